"""Fixtures for the operations commands: a Claude emulator with the environment a spec file
names pointed at it, an AgentCore one on a shared ManualClock, and a throwaway store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from managedloop.cli import ops
from managedloop.testing import AgentCoreEmulator, AgentCoreFaults, ClaudeEmulator
from managedloop.testing.agentcore import ManualClock

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_BEARER_TOKEN_FILE",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "MANAGEDLOOP_AGENTCORE_ENDPOINT_URL",
        "MANAGEDLOOP_EXECUTION_ROLE_ARN",
    ):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "aws-empty"
    empty.touch()
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the default store
    yield
    ops.set_testing()


@pytest.fixture
def claude_emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[ClaudeEmulator]:
    with ClaudeEmulator() as emu:
        monkeypatch.setenv("ANTHROPIC_API_KEY", emu.api_key)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emu.base_url)
        yield emu


@pytest.fixture
def agentcore_emu(monkeypatch: pytest.MonkeyPatch) -> Iterator[AgentCoreEmulator]:
    clock = ManualClock()
    faults = AgentCoreFaults(harness_ready_after=12.0, endpoint_ready_after=8.0)
    with AgentCoreEmulator(faults=faults, clock=clock) as emu:
        kw = emu.client_kwargs
        monkeypatch.setenv("MANAGEDLOOP_AGENTCORE_ENDPOINT_URL", kw["endpoint_url"])
        monkeypatch.setenv("AWS_REGION", kw["region_name"])
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", kw["aws_access_key_id"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", kw["aws_secret_access_key"])
        monkeypatch.setenv("MANAGEDLOOP_EXECUTION_ROLE_ARN", emu.execution_role_arn)
        ops.set_testing(clock=clock, sleep=clock.sleep)  # the waits run on the emulator's clock
        yield emu


@pytest.fixture
def store_arg(tmp_path: Path) -> list[str]:
    return ["--store", f"sqlite:{tmp_path / 'state.sqlite3'}"]
