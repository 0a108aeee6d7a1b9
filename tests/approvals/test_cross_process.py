"""An approval round trip across two separate Python processes, on every host.

Process 1 runs the agent to ``requires_action`` / ``approval_required`` and writes
``result.to_dict()`` as JSON; process 2 loads it and resumes with decisions (approve one
``transfer``, deny the other). The emulator (in this process) records the wire: each tool
use is answered exactly once, the denial reaches the model as an error result, and the
call that needed no decision ran once, in process 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anthropic
import pytest

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.testing import (
    AgentCoreEmulator,
    ChatEmulator,
    ClaudeEmulator,
    ModelRequest,
    Reply,
    ToolCall,
    say,
)

pytestmark = pytest.mark.anyio

SCRIPT = Path(__file__).with_name("_process.py")
HOSTS = ["local", "claude", "agentcore"]


def first_turn() -> Reply:
    return Reply(
        tool_calls=[
            ToolCall(name="transfer", input={"amount": 1}),
            ToolCall(name="transfer", input={"amount": 2}),
            ToolCall(name="balance", input={}),
        ]
    )


def echo_results(request: ModelRequest) -> Reply:
    return say(" | ".join(f"{r.text} (error={r.is_error})" for r in request.tool_results))


def run_process(tmp: Path, config: dict[str, Any], phase: str, **extra: Any) -> dict[str, Any]:
    out = tmp / f"{phase}.json"
    cfg = {**config, "phase": phase, "out": str(out), "log": str(tmp / "ran.log"), **extra}
    path = tmp / f"{phase}-config.json"
    path.write_text(json.dumps(cfg))
    empty = tmp / "aws-empty"
    empty.touch()
    env = {
        **os.environ,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
    }
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    return data


async def round_trip(tmp: Path, config: dict[str, Any]) -> tuple[ml.SessionResult, dict[str, str]]:
    parked_dict = run_process(tmp, config, "park")
    parked = ml.SessionResult.from_dict(parked_dict)
    assert parked.terminal is ml.Terminal.REQUIRES_ACTION
    assert parked.reason == "approval_required"
    assert parked.pending is not None
    held = {a.tool_use.input["amount"]: a.id for a in parked.pending.approvals}
    assert sorted(held) == [1, 2]
    assert (tmp / "ran.log").read_text().splitlines() == ["balance"]
    decisions = {held[1]: "approve", held[2]: "too much"}
    final = run_process(tmp, config, "resume", parked=str(tmp / "park.json"), decisions=decisions)
    result = ml.SessionResult.from_dict(final)
    assert result.terminal is ml.Terminal.END_TURN
    first, second, third = result.text.split(" | ")
    assert first == "moved 1 (error=False)"  # the model saw each answer, in call order
    assert "The call to 'transfer' was denied: too much" in second
    assert second.endswith("(error=True)")
    assert third == "42 (error=False)"
    assert sorted((tmp / "ran.log").read_text().splitlines()) == ["balance", "transfer 1"]
    return result, {held[1]: "approved", held[2]: "denied"}


def exactly_once(ids: list[str], expected: int = 3) -> None:
    counts = Counter(ids)
    assert len(counts) == expected, counts
    assert set(counts.values()) == {1}, counts


async def test_local(tmp_path: Path) -> None:
    with ChatEmulator([first_turn(), echo_results]) as emu:
        config = {"host": "local", "base_url": emu.base_url, "api_key": emu.api_key}
        _, held = await round_trip(tmp_path, config)
        assert len(emu.requests) == 2  # the park, then one call with every answer
        answers = [m for m in emu.requests[1].messages if m.get("role") == "tool"]
        exactly_once([m["tool_call_id"] for m in answers])
        denied = next(m for m in answers if held.get(m["tool_call_id"]) == "denied")
        assert json.loads(denied["content"])["isError"] is True


async def test_claude(tmp_path: Path) -> None:
    with ClaudeEmulator([first_turn(), echo_results]) as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            handle = await ml.provision(ClaudeManagedAgents(client=c), _spec())
        config = {
            "host": "claude",
            "base_url": emu.base_url,
            "api_key": emu.api_key,
            "handle": handle.to_dict(),
        }
        _, held = await round_trip(tmp_path, config)
        results = [e for e in emu.sent_events() if e["type"] == "user.custom_tool_result"]
        exactly_once([e["custom_tool_use_id"] for e in results])
        denied = next(e for e in results if held.get(e["custom_tool_use_id"]) == "denied")
        assert denied["is_error"] is True


async def test_agentcore(tmp_path: Path) -> None:
    with AgentCoreEmulator([first_turn(), echo_results]) as emu:
        config = {
            "host": "agentcore",
            "harness_arn": emu.harness_arn,
            "client_kwargs": emu.client_kwargs,
        }
        _, held = await round_trip(tmp_path, config)
        invokes = emu.operations("InvokeHarness")
        assert len(invokes) == 2
        assert invokes[0].session_id == invokes[1].session_id  # the parked runtime session
        blocks = [
            b["toolResult"]
            for inv in invokes
            for m in inv.body["messages"]
            for b in m["content"]
            if "toolResult" in b
        ]
        exactly_once([b["toolUseId"] for b in blocks])
        denied = next(b for b in blocks if held.get(b["toolUseId"]) == "denied")
        assert denied["status"] == "error"


def _spec() -> ml.AgentSpec:
    """The spec ``_process.py`` runs (same tools), for provisioning from this process."""
    names = [("transfer", "Move money (needs a decision)."), ("balance", "The balance.")]
    schemas = {
        "transfer": {
            "type": "object",
            "properties": {"amount": {"type": "integer"}},
            "required": ["amount"],
            "additionalProperties": False,
        },
        "balance": {"type": "object", "properties": {}, "additionalProperties": False},
    }
    tools = [ml.ToolDefinition(name=n, description=d, input_schema=schemas[n]) for n, d in names]
    return ml.AgentSpec(name="bank", system_prompt="Use tools.", tools=tools)
