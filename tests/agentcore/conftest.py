"""Fixtures for the AgentCore tests: an isolated AWS environment and a running emulator.

botocore must never reach real AWS here: no IMDS probe, no profile files, no ambient keys.
The one exception is a test marked ``live`` (``test_live.py``): it exists to use the
caller's real credentials and endpoint, so the isolation leaves it alone and the test
decides at run time whether it can run (printing why not).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from managedloop.providers.agentcore import BedrockAgentCore, new_runtime_session_id
from managedloop.testing.agentcore import AgentCoreEmulator

_AMBIENT = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE",
    "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE_CONTROL",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@pytest.fixture(autouse=True)
def _isolated_aws(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if request.node.get_closest_marker("live") is not None:
        return  # a live test runs on the caller's own AWS environment
    for name in _AMBIENT:
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path_factory.getbasetemp() / "aws-empty"
    empty.touch()
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))


@pytest.fixture
def emu() -> Iterator[AgentCoreEmulator]:
    with AgentCoreEmulator() as emulator:
        yield emulator


@pytest.fixture
def sid() -> str:
    return new_runtime_session_id("test")


def make_provider(emu: AgentCoreEmulator, **options: object) -> BedrockAgentCore:
    options.setdefault("harness_arn", emu.harness_arn)
    options.setdefault("retry_backoff", 0.0)
    return BedrockAgentCore(**emu.client_kwargs, **options)  # type: ignore[arg-type]


@pytest.fixture
def provider(emu: AgentCoreEmulator) -> Iterator[BedrockAgentCore]:
    with make_provider(emu) as p:
        yield p
