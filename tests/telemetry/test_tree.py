"""The telemetry tree on every host, pinned against ``telemetry.TABLE``.

One table-driven test per host: a two-tool session on the host's emulator with caller
``telemetry_metadata``. Every event of the host's part of the seed table fires, carries the
table's measurements and metadata keys, and every event the session causes carries the
caller's tags under the library's own keys (library keys win) -- the host's own HTTP
requests (Local ``request.*``, AgentCore ``agent_core.request.*``) included. Claude's
``stream.event`` carries the model request's usage.
"""

from __future__ import annotations

import anthropic
import pytest

import managedloop as ml
from host_models import BEDROCK_MODEL, for_host
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.testing import (
    AgentCoreEmulator,
    AgentCoreFaults,
    ChatEmulator,
    ChatFaults,
    ClaudeEmulator,
    ClaudeFaults,
    call,
    say,
)
from managedloop.testing.agentcore import ManualClock

from .conftest import CALLER, TWO_TOOLS, Recorder, check_against_table

pytestmark = pytest.mark.anyio

SESSION_EVENTS = {
    "tool.start",
    "tool.stop",
    "session.tool_uses",
    "session.terminal",
    "session.request.start",
    "session.request.stop",
    "session.turn.start",
    "session.turn.stop",
    "stream.event",
}


def _tool_stops(rec: Recorder) -> list[str]:
    return sorted(md["tool"] for md in rec.of("tool.stop"))


async def test_local_tree(recorder: Recorder) -> None:
    with ChatEmulator() as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(provider, agent=TWO_TOOLS, prompt="x", telemetry_metadata=CALLER)
    assert result.terminal is ml.Terminal.END_TURN
    expected = SESSION_EVENTS | {"request.start", "request.stop"}
    check_against_table(recorder, expected, tagged=recorder.names())
    assert _tool_stops(recorder) == ["get_time", "get_weather"]
    stop = recorder.of("request.stop")[0]
    assert (stop["method"], stop["path"], stop["status"]) == ("POST", "/chat/completions", 200)
    assert all(md["provider"] == "local" for md in recorder.of("session.turn.stop"))
    usage = [md for md in recorder.of("stream.event") if "usage" in md]
    assert usage, "the model_response events carry their usage"


async def test_claude_tree(recorder: Recorder) -> None:
    with ClaudeEmulator() as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            handle = await ml.provision(ClaudeManagedAgents(client=c), TWO_TOOLS)
            recorder.events.clear()  # provisioning is not a session: no caller tags there
            provider = ClaudeManagedAgents(
                client=c, agent=handle, environment=handle, reconnect_backoff=0.0
            )
            result = await ml.run(provider, agent=TWO_TOOLS, prompt="x", telemetry_metadata=CALLER)
    assert result.terminal is ml.Terminal.END_TURN
    expected = SESSION_EVENTS | {
        "request.start",
        "request.stop",
        "stream.connected",
        "stream.done",
    }
    check_against_table(recorder, expected, tagged=recorder.names())
    assert _tool_stops(recorder) == ["get_time", "get_weather"]
    paths = {md["path"] for md in recorder.of("request.stop")}
    assert f"/v1/sessions/{result.session_id}/events" in paths
    assert all(md["session_id"] == result.session_id for md in recorder.of("stream.event"))
    usage = [md["usage"] for md in recorder.of("stream.event") if "usage" in md]
    assert usage
    assert all("input_tokens" in u for u in usage)  # span.model_request_end
    assert {md["type"] for md in recorder.of("stream.event")} >= {"agent.custom_tool_use"}


async def test_agentcore_tree(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with (
        AgentCoreEmulator() as emu,
        BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        ) as provider,
    ):
        result = await ml.run(
            provider, agent=for_host(TWO_TOOLS, "agentcore"), prompt="x", telemetry_metadata=CALLER
        )
    assert result.terminal is ml.Terminal.END_TURN
    expected = SESSION_EVENTS | {"agent_core.request.start", "agent_core.request.stop"}
    check_against_table(recorder, expected, tagged=recorder.names())
    assert _tool_stops(recorder) == ["get_time", "get_weather"]
    ops = {md["operation"] for md in recorder.of("agent_core.request.stop")}
    assert ops == {"get_harness", "invoke_harness"}
    services = {md["service"] for md in recorder.of("agent_core.request.stop")}
    assert services == {"bedrock-agentcore"}


async def test_agentcore_provision_events(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    faults = AgentCoreFaults(harness_ready_after=0.05, endpoint_ready_after=0.05)
    with AgentCoreEmulator(faults=faults, clock=ManualClock()) as emu:
        assert isinstance(emu.clock, ManualClock)
        with BedrockAgentCore(retry_backoff=0.0, **emu.client_kwargs) as provider:
            spec = ml.AgentSpec(name="prov", system_prompt="p", model=BEDROCK_MODEL)
            await provider.provision(
                spec,
                execution_role_arn=emu.execution_role_arn,
                timeout=3.0,
                clock=emu.clock,
                sleep=emu.clock.sleep,
                telemetry_metadata={"tenant": "acme"},
            )
    expected = {"agent_core.provision.poll", "agent_core.provision.stop"}
    check_against_table(recorder, expected, tagged=expected)
    assert {md["phase"] for md in recorder.of("agent_core.provision.stop")} >= {"ready"}
    assert all(md["result"] == "ok" for md in recorder.of("agent_core.provision.stop"))


async def test_fault_events_carry_the_tags_on_every_host(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure side of the tree: request.exception (Local, Claude),
    agent_core.request.exception, stream.error -- table keys, caller tags, library keys."""
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    script = [call("get_weather", {"city": "A"}), say("done")]
    with ChatEmulator(script, faults=ChatFaults(drop=1)) as emu:
        provider = Local(
            model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key, retry_backoff=0
        )
        await ml.run(provider, agent=TWO_TOOLS, prompt="x", telemetry_metadata=CALLER)
    claude_faults = ClaudeFaults(
        drop_stream_after=(2,), server_errors=1, fault_path="/events", fault_method="POST"
    )
    with ClaudeEmulator(script, faults=claude_faults) as emu:
        async with anthropic.AsyncAnthropic(
            base_url=emu.base_url, api_key=emu.api_key, max_retries=0
        ) as c:
            handle = await ml.provision(ClaudeManagedAgents(client=c), TWO_TOOLS)
            # provisioning is not a session: keep only the Local events before it
            recorder.events[:] = [e for e in recorder.events if e[2].get("provider") == "local"]
            claude = ClaudeManagedAgents(
                client=c, agent=handle, environment=handle, reconnect_backoff=0.0
            )
            await ml.run(claude, agent=TWO_TOOLS, prompt="x", telemetry_metadata=CALLER)
    faults = AgentCoreFaults(drop_after=1, times=1)
    with (
        AgentCoreEmulator(script, faults=faults) as emu,
        BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        ) as agentcore,
    ):
        await ml.run(
            agentcore, agent=for_host(TWO_TOOLS, "agentcore"), prompt="x", telemetry_metadata=CALLER
        )
    expected = {"request.exception", "agent_core.request.exception", "stream.error"}
    check_against_table(recorder, expected, tagged=recorder.names())
    failures = recorder.of("request.exception")
    assert {(md["provider"], md["code"]) for md in failures} == {
        ("local", "transport_error"),
        ("claude", "http_error"),
    }
    assert [md["status"] for md in failures if md["provider"] == "claude"] == [500]
    (dropped,) = recorder.of("stream.error")
    assert dropped["provider"] == "claude"
    assert dropped["reason"]
    (invoke,) = recorder.of("agent_core.request.exception")
    assert (invoke["operation"], invoke["code"]) == ("invoke_harness", "transport_error")
