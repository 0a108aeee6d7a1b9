"""The live test's gate, both ways, in a child pytest (its own environment, as a user's).

* with credentials (the emulator's own keys: fake AWS credentials botocore signs with), a
  harness ARN, a region and botocore's endpoint setting pointed at the emulator, the live
  module is collected and **runs** (passes, not skipped) - so the AgentCore conftest does
  not strip what it needs;
* with none of them it is skipped at run time, and the reason names what is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from managedloop.testing import AgentCoreEmulator

ROOT = Path(__file__).resolve().parents[2]
_AWS_PREFIXES = ("AWS_", "AGENTCORE_LIVE_")
_ARGS = (sys.executable, "-m", "pytest", "-m", "live", "-rs", "-q", "-p", "no:cacheprovider")


def _pytest(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(_AWS_PREFIXES)}
    # No profile files or IMDS for the child either: only what ``env`` gives it.
    base |= {"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull}
    base["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    return subprocess.run(
        [*_ARGS, "tests/agentcore/test_live.py"],
        cwd=ROOT,
        env=base | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_with_credentials_the_live_test_runs_against_the_endpoint() -> None:
    with AgentCoreEmulator() as emu:
        keys = emu.client_kwargs
        done = _pytest(
            {
                "AGENTCORE_LIVE_HARNESS_ARN": emu.harness_arn,
                "AWS_ACCESS_KEY_ID": keys["aws_access_key_id"],
                "AWS_SECRET_ACCESS_KEY": keys["aws_secret_access_key"],
                "AWS_REGION": emu.region,
                "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE": emu.endpoint_url,
                "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE_CONTROL": emu.endpoint_url,
            }
        )
        invokes = emu.operations("InvokeHarness")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout, done.stdout
    assert "skipped" not in done.stdout, done.stdout
    assert len(invokes) >= 2  # the tool round trip and the resumed question reached it


def test_without_credentials_it_is_skipped_with_the_reason() -> None:
    done = _pytest({})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout, done.stdout
    assert "live AgentCore test needs AGENTCORE_LIVE_HARNESS_ARN" in done.stdout
    assert "AWS credentials" in done.stdout
    assert "AWS_REGION" in done.stdout
