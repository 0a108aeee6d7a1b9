"""The AgentCore plug-in of the ``managedloop`` command.

§9 agent_core/smoke_test and qa/provisioning_smoke (Bedrock): ``managedloop demo`` and
``run --provision`` provision on the emulator, run a session and tear the harness down.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys

import pytest

import managedloop as ml
from managedloop.cli import agentcore as host_cli
from managedloop.cli import demo_agent, main
from managedloop.testing import AgentCoreEmulator


def test_demo_provisions_runs_and_tears_down() -> None:
    result = host_cli.demo(demo_agent(), "Weather in Paris?")
    assert result.terminal is ml.Terminal.END_TURN
    assert {u.name for u in result.custom_tool_uses} == {"get_weather", "convert_temperature"}


def test_run_arguments_and_provider() -> None:
    parser = argparse.ArgumentParser()
    host_cli.add_run_arguments(parser)
    args = parser.parse_args(
        [
            "--harness-arn",
            "arn:aws:bedrock-agentcore:us-west-2:123456789012:harness/h-1",
            "--region",
            "us-west-2",
            "--max-iterations",
            "5",
            "--endpoint-name",
            "live",
        ]
    )
    provider = host_cli.provider_for_run(args)
    assert isinstance(provider, ml.providers.BedrockAgentCore)  # type: ignore[attr-defined]
    assert provider.clients.region_name == "us-west-2"
    assert (provider.max_iterations, provider.endpoint_name) == (5, "live")
    provider.close()


def _run(emu: AgentCoreEmulator, monkeypatch: pytest.MonkeyPatch, *extra: str) -> tuple[int, str]:
    """``managedloop run --provider agentcore`` against ``emu``, keys from the environment."""
    kw = emu.client_kwargs
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", kw["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", kw["aws_secret_access_key"])
    out = io.StringIO()
    argv = ["run", "--provider", "agentcore", "--prompt", "hi"]
    argv += ["--endpoint-url", emu.endpoint_url, "--region", "us-east-1", *extra]
    return main(argv, out=out), out.getvalue()


def test_run_drives_a_harness_through_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with AgentCoreEmulator([ml.testing.say("Hello from the harness.")]) as emu:  # type: ignore[attr-defined]
        code, out = _run(emu, monkeypatch, "--harness-arn", emu.harness_arn)
    assert code == 0, out
    assert "Hello from the harness." in out


def test_run_can_provision_from_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with AgentCoreEmulator() as emu:
        code, out = _run(emu, monkeypatch, "--execution-role-arn", emu.execution_role_arn)
        assert code == 0, out
        assert len(emu.operations("CreateHarness")) == 1


def test_emulate_serves_and_prints_what_a_client_needs() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    code = "from managedloop.cli.agentcore import emulate; emulate('agentcore', 0)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(7)]
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    text = "".join(lines)
    assert "endpoint_url=http://127.0.0.1:" in text
    assert "harness_arn=arn:aws:bedrock-agentcore" in text
