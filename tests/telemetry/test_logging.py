"""Structured logging under the ``managedloop`` logger (managedloop._log).

* a normal session on every host logs nothing at INFO or above (no per-token or per-event
  record), streamed Local included;
* each notable event is one record whose ``extra`` fields a JSON formatter can use:
  retries with their wait (Local, AgentCore invoke, Claude event sends), give-ups,
  Claude stream reconnects, AgentCore provisioning polls, guard interventions (a repeated
  call answered, a re-prompt) and library stops (``max_turns``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

import managedloop as ml
from host_models import BEDROCK_MODEL, for_host
from managedloop import _retry
from managedloop._log import fields
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.testing import (
    AgentCoreEmulator,
    AgentCoreFaults,
    ChatEmulator,
    ChatFaults,
    ClaudeEmulator,
    ClaudeFaults,
    call,
    calls,
    say,
)
from managedloop.testing.agentcore import ManualClock

from .conftest import TWO_TOOLS

pytestmark = pytest.mark.anyio

_STANDARD = set(vars(logging.LogRecord("x", logging.INFO, "x", 0, "", None, None))) | {
    "message",
    "asctime",
}


class Records(logging.Handler):
    """Every record of the ``managedloop`` logger tree, at DEBUG."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def events(self, event: str) -> list[logging.LogRecord]:
        return [r for r in self.records if getattr(r, "event", None) == event]

    def loud(self) -> list[str]:
        return [f"{r.name}: {r.getMessage()}" for r in self.records if r.levelno >= logging.INFO]


@pytest.fixture
def logs() -> Iterator[Records]:
    handler = Records()
    root = logging.getLogger("managedloop")
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def as_json(record: logging.LogRecord) -> dict[str, object]:
    """What a JSON formatter emits: the message and every non-standard attribute."""
    extra = {k: v for k, v in vars(record).items() if k not in _STANDARD}
    return json.loads(json.dumps({"message": record.getMessage(), **extra}))


@pytest.fixture(autouse=True)
def _no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


async def test_normal_sessions_log_nothing_at_info(logs: Records) -> None:
    for stream in (False, True):
        with ChatEmulator(chunk_size=2) as emu:
            provider = Local(
                model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key, stream=stream
            )
            await ml.run(provider, agent=TWO_TOOLS, prompt="x")
    with ClaudeEmulator() as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            handle = await ml.provision(ClaudeManagedAgents(client=c), TWO_TOOLS)
            provider_c = ClaudeManagedAgents(client=c, agent=handle, environment=handle)
            await ml.run(provider_c, agent=TWO_TOOLS, prompt="x")
    with (
        AgentCoreEmulator() as emu,
        BedrockAgentCore(harness_arn=emu.harness_arn, **emu.client_kwargs) as provider_a,
    ):
        await ml.run(provider_a, agent=for_host(TWO_TOOLS, "agentcore"), prompt="x")
    assert logs.loud() == []


async def test_local_retry_and_give_up(logs: Records) -> None:
    with ChatEmulator([say("ok")], faults=ChatFaults(statuses=[503])) as emu:
        provider = Local(
            model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key, retry_backoff=0.25
        )
        with _retry.testing() as waits:  # the wait is recorded, not slept
            result = await ml.run(provider, agent=TWO_TOOLS, prompt="x")
    (retry,) = logs.events("retry")
    data = as_json(retry)
    assert retry.levelno == logging.WARNING
    assert data["host"] == "local"
    assert data["attempt"] == 1
    assert data["max_retries"] == 3
    assert data["status"] == 503
    assert data["session_id"] == result.session_id
    assert data["wait_s"] == waits[0]
    assert 0 < data["wait_s"] <= 0.25
    with ChatEmulator([say("ok")], faults=ChatFaults(statuses=[503, 503])) as emu:
        provider = Local(
            model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key, max_retries=1
        )
        with pytest.raises(ml.ManagedLoopError):
            await ml.run(provider, agent=TWO_TOOLS, prompt="x")
    (give_up,) = logs.events("give_up")
    data = as_json(give_up)
    assert give_up.levelno == logging.WARNING
    assert (data["operation"], data["retries"], data["status"]) == ("local chat call", 1, 503)


async def test_agentcore_invoke_retry_and_give_up(logs: Records) -> None:
    faults = AgentCoreFaults(drop_after=1, times=None)
    with (
        AgentCoreEmulator([say("x")], faults=faults) as emu,
        BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        ) as provider,
        pytest.raises(ml.TransportError),
    ):
        await ml.run(provider, agent=ml.AgentSpec(name="a"), prompt="hi")
    retries = [as_json(r) for r in logs.events("retry")]
    assert retries
    assert {r["host"] for r in retries} == {"agentcore"}
    assert [r["attempt"] for r in retries] == list(range(1, len(retries) + 1))
    assert all(r["operation"] == "invoke_harness" and "wait_s" in r for r in retries)
    (give_up,) = [as_json(r) for r in logs.events("give_up")]
    assert give_up["attempts"] == len(retries) + 1


async def _claude_run(script: list[Any], faults: ClaudeFaults) -> ml.SessionResult:
    """A provisioned two-tool Claude session under ``faults`` (the SDK's own retries off)."""
    with ClaudeEmulator(script, faults=faults) as emu:
        async with anthropic.AsyncAnthropic(
            base_url=emu.base_url, api_key=emu.api_key, max_retries=0
        ) as c:
            handle = await ml.provision(ClaudeManagedAgents(client=c), TWO_TOOLS)
            provider = ClaudeManagedAgents(
                client=c, agent=handle, environment=handle, reconnect_backoff=0.0
            )
            return await ml.run(provider, agent=TWO_TOOLS, prompt="x", timeout=30)


async def test_claude_reconnect_and_send_retry(logs: Records) -> None:
    script = [call("get_weather", {"city": "A"}), say("done")]
    faults = ClaudeFaults(
        drop_stream_after=(2,), rate_limit=1, fault_path="/events", fault_method="POST"
    )
    result = await _claude_run(script, faults)
    assert result.terminal is ml.Terminal.END_TURN
    (reconnect,) = [as_json(r) for r in logs.events("reconnect")]
    assert reconnect["host"] == "claude"
    assert reconnect["session_id"] == result.session_id
    assert reconnect["attempt"] == 1
    assert "wait_s" in reconnect
    sends = [as_json(r) for r in logs.events("retry")]
    assert [(s["operation"], s["status"]) for s in sends] == [("claude event send", 429)]


async def test_agentcore_provision_polls_are_debug_records(logs: Records) -> None:
    faults = AgentCoreFaults(harness_ready_after=0.05, endpoint_ready_after=0.05)
    with AgentCoreEmulator(faults=faults, clock=ManualClock()) as emu:
        assert isinstance(emu.clock, ManualClock)
        with BedrockAgentCore(**emu.client_kwargs) as provider:
            await provider.provision(
                ml.AgentSpec(name="prov", system_prompt="p", model=BEDROCK_MODEL),
                execution_role_arn=emu.execution_role_arn,
                timeout=3.0,
                clock=emu.clock,
                sleep=emu.clock.sleep,
            )
    polls = logs.events("provision_poll")
    assert polls
    assert all(r.levelno == logging.DEBUG for r in polls)
    first = as_json(polls[0])
    assert {"harness_id", "phase", "status", "poll_n", "elapsed_ms"} <= set(first)
    assert next(as_json(r)["poll_n"] for r in polls if as_json(r)["phase"] == "ready") == 1


async def test_guards_and_library_stops(logs: Records) -> None:
    repeat = [
        call("get_weather", {"city": "P"}),
        call("get_weather", {"city": "P"}),
        say("done"),
    ]
    with ChatEmulator(repeat) as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        await ml.run(provider, agent=TWO_TOOLS, prompt="x")
        (guard,) = [as_json(r) for r in logs.events("guard")]
        assert (guard["guard"], guard["count"], guard["host"]) == ("duplicate_call", 1, "local")
    with ChatEmulator([calls(("get_time", {"city": "P"}))] * 3) as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(provider, agent=TWO_TOOLS, prompt="x", max_turns=1)
    (stopped,) = [as_json(r) for r in logs.events("stopped")]
    assert stopped["reason"] == str(result.reason)
    assert stopped["turns"] == 1
    assert stopped["terminal"] == result.terminal.value


def test_fields_rename_reserved_keys() -> None:
    assert fields("x", name="n", module="m", ok=1) == {
        "event": "x",
        "ml_name": "n",
        "ml_module": "m",
        "ok": 1,
    }
    record = logging.LogRecord("managedloop", logging.INFO, "f", 1, "m", None, None)
    record.__dict__.update(fields("x", name="n"))
    assert record.name == "managedloop"


async def test_reprompts_are_guard_records(logs: Records) -> None:
    with ChatEmulator([say("no"), say("still no"), say("never")]) as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(
            provider,
            agent=TWO_TOOLS,
            prompt="x",
            require_terminal_tool=True,
            terminal_tool="get_time",
        )
    assert result.reason == "no_terminal_tool"
    guards = [as_json(r) for r in logs.events("guard")]
    assert [(g["guard"], g["turn"]) for g in guards] == [("reprompt", 1), ("reprompt", 2)]
    assert all(r.levelno == logging.INFO for r in logs.events("guard"))
    (stopped,) = [as_json(r) for r in logs.events("stopped")]
    assert (stopped["reason"], stopped["turns"]) == ("no_terminal_tool", 3)


async def test_agentcore_provision_stops_are_structured_records(logs: Records) -> None:
    """The end of each provisioning wait is one record with fields: INFO when the harness
    is ready, WARNING when the wait gave up (here: the harness FAILED)."""
    faults = AgentCoreFaults(harness_ready_after=0.05, endpoint_ready_after=0.05)
    with AgentCoreEmulator(faults=faults, clock=ManualClock()) as emu:
        assert isinstance(emu.clock, ManualClock)
        with BedrockAgentCore(**emu.client_kwargs) as provider:
            waits = {"timeout": 3.0, "clock": emu.clock, "sleep": emu.clock.sleep}
            role = emu.execution_role_arn
            await provider.provision(
                ml.AgentSpec(name="ok", model=BEDROCK_MODEL), execution_role_arn=role, **waits
            )
            (ready,) = [
                as_json(r) for r in logs.events("provision_stop") if as_json(r)["phase"] == "ready"
            ]
            assert ready["host"] == "agentcore"
            assert ready["result"] == "ok"
            assert ready["polls"] >= 1
            assert {"harness_id", "duration_ms"} <= set(ready)
            logs.records.clear()
            emu.faults = AgentCoreFaults(harness_ready_after=0.05, harness_outcome="FAILED")
            with pytest.raises(ml.ManagedLoopError) as info:
                await provider.provision(
                    ml.AgentSpec(name="bad", model=BEDROCK_MODEL),
                    execution_role_arn=role,
                    **waits,
                )
    (stop,) = logs.events("provision_stop")
    assert stop.levelno == logging.WARNING
    data = as_json(stop)
    assert (data["host"], data["phase"], data["result"]) == ("agentcore", "ready", "error")
    assert data["error"] == info.value.code


async def test_undecodable_claude_frames_warn_once_per_stream(logs: Records) -> None:
    """A server that streams junk frames (here 30 non-JSON ``data:`` lines) gets one WARNING
    for the stream, with fields; the others are DEBUG: no WARNING per event."""
    emulator: list[ClaudeEmulator] = []

    @ml.tool
    def junk(city: str) -> str:
        """Makes the server send junk frames."""
        for _ in range(30):
            emulator[0].inject_frame(b"event: junk\ndata: not json\n\n")
        return city

    agent = ml.AgentSpec(name="j", tools=[junk], model="claude-haiku-4-5")
    with ClaudeEmulator([call("junk", {"city": "A"}), say("done")]) as emu:
        emulator.append(emu)
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            handle = await ml.provision(ClaudeManagedAgents(client=c), agent)
            provider = ClaudeManagedAgents(client=c, agent=handle, environment=handle)
            result = await ml.run(provider, agent=agent, prompt="x")
    assert result.terminal is ml.Terminal.END_TURN
    skipped = logs.events("skipped_frame")
    assert len(skipped) == 30
    (loud,) = [r for r in skipped if r.levelno >= logging.INFO]
    assert loud.levelno == logging.WARNING
    data = as_json(loud)
    assert (data["host"], data["sse_event"], data["size"], data["skipped"]) == (
        "claude",
        "junk",
        8,
        1,
    )
    assert logs.loud() == [f"{loud.name}: {loud.getMessage()}"]


async def test_claude_tool_result_resend_is_a_retry_record(logs: Records) -> None:
    """A tool result the host acknowledged but lost (it names the call again) is re-sent:
    one ``retry`` record with fields, like every other retry."""
    three = calls(("get_weather", {"city": "A"}), ("get_time", {"city": "B"}))
    result = await _claude_run([three, say("done")], ClaudeFaults(lose_results=1))
    assert result.terminal is ml.Terminal.END_TURN
    (resend,) = [as_json(r) for r in logs.events("retry")]
    assert (resend["host"], resend["operation"]) == ("claude", "tool result resend")
    assert resend["session_id"] == result.session_id
    assert resend["tool_use_id"] == result.custom_tool_uses[0].id
    assert resend["attempt"] == 1
    assert resend["max_retries"] >= 1
