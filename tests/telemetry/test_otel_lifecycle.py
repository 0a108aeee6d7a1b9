"""The bridge at the edges (found by the hostile review of issue 11): a timeout, an
uninstrument while the session runs, a model that invents tool names.

* a run or a live request that times out raises ``SessionTimeoutError`` (code
  ``timeout``): its ``invoke_agent`` span and its duration point say ``timeout``, not
  ``CancelledError`` (the cancel the deadline uses inside);
* ``uninstrument()`` during a session still ends the spans that session opened and gives
  the caller's task its context back: a later session in that task (instrumented again)
  is a trace of its own, not the child of a span that never ends;
* invented tool names cannot grow the tool-duration metric without bound.
"""

from __future__ import annotations

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

import managedloop as ml
import managedloop.otel
from managedloop import telemetry
from managedloop.handler import run_tool_calls
from managedloop.providers import Local
from managedloop.testing import ChatEmulator, call, say

from .otel_hosts import provider_into
from .otel_kit import Otel

pytestmark = pytest.mark.anyio


@ml.tool
async def hang(city: str) -> str:
    """Never returns."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


@ml.tool
def switch_off(city: str) -> str:
    """Turns the bridge off while its own session runs."""
    managedloop.otel.uninstrument()
    return "off"


def _hanging() -> tuple[ml.AgentSpec, ChatEmulator]:
    agent = ml.AgentSpec(name="a", tools=[hang], model="claude-haiku-4-5")
    return agent, ChatEmulator([call("hang", {"city": "P"}), say("never")])


async def test_a_timed_out_run_records_the_timeout_code(otel: Otel) -> None:
    agent, emulator = _hanging()
    with emulator as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        with pytest.raises(ml.SessionTimeoutError) as info:
            await ml.run(provider, agent=agent, prompt="x", timeout=0.2)
    code = info.value.code
    assert code == "timeout"
    (root,) = otel.named("invoke_agent")
    assert root.status.status_code is StatusCode.ERROR
    assert dict(root.attributes or {})["error.type"] == code
    assert root.status.description == code
    points = otel.metrics()["gen_ai.client.operation.duration"]
    (point,) = [p for p in points if p.attributes["gen_ai.operation.name"] == "invoke_agent"]
    assert point.attributes["error.type"] == code


async def test_a_timed_out_live_request_records_the_timeout_code(otel: Otel) -> None:
    agent, emulator = _hanging()
    with emulator as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        async with ml.start(provider, agent=agent, prompt="x", timeout=0.2) as session:
            with pytest.raises(ml.SessionTimeoutError) as info:
                await session.result()
    (root,) = otel.named("invoke_agent")
    assert dict(root.attributes or {})["error.type"] == info.value.code == "timeout"
    assert root.status.status_code is StatusCode.ERROR


async def test_uninstrument_mid_session_leaves_no_current_span_behind(otel: Otel) -> None:
    agent = ml.AgentSpec(name="a", tools=[switch_off], model="claude-haiku-4-5")
    with ChatEmulator([call("switch_off", {"city": "P"}), say("done"), say("again")]) as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        with otel.tracer.start_as_current_span("caller") as caller:
            await ml.run(provider, agent=agent, prompt="x")
            assert trace.get_current_span() is caller
        # the spans the session opened before the switch were ended, so exported
        assert {s.name for s in otel.spans()} >= {"invoke_agent a", "execute_tool switch_off"}
        otel.exporter.clear()
        managedloop.otel.instrument(provider_into(otel))
        await ml.run(provider, agent=ml.AgentSpec(name="b", model="claude-haiku-4-5"), prompt="y")
    (root,) = otel.named("invoke_agent")
    assert root.parent is None  # a root: not under the first session's dead spans


def test_invented_tool_names_cannot_grow_the_metrics_without_bound(otel: Otel) -> None:
    """A model can call any number of tools it was never given: after 1,000 distinct names
    the tool-duration metric records new ones as ``_OTHER`` (the SDK keeps a series per
    attribute set, without a limit); the spans keep every name."""
    names = [f"invented_{i}" for i in range(1005)]
    for name in names:  # as the session emits a tool call's span
        opened = telemetry.open_span(
            "tool", {"tool": name, "tool_use_id": "c", "provider": "local"}
        )
        telemetry.close_span(opened, ml.ToolResult(tool_use_id="c", text="ok"))
    points = otel.metrics()["managedloop.tool.duration"]
    by_name = {p.attributes["gen_ai.tool.name"]: p.count for p in points}
    assert len(by_name) == 1001
    assert by_name["_OTHER"] == 5
    assert by_name["invented_999"] == 1
    assert "invented_1000" not in by_name
    spans = {dict(s.attributes or {})["gen_ai.tool.name"] for s in otel.named("execute_tool")}
    assert spans == set(names)


async def test_a_traced_call_the_run_timeout_cancels_ends_its_span(otel: Otel) -> None:
    """The cancellation reaches the tool's span (opened inside the call itself): it ends
    with the error, and the caller's context is its own again."""
    agent, emulator = _hanging()
    with emulator as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        with pytest.raises(ml.SessionTimeoutError):
            await ml.run(provider, agent=agent, prompt="x", timeout=0.2)
    assert not trace.get_current_span().get_span_context().is_valid
    (tool,) = otel.named("execute_tool hang")
    assert tool.status.status_code is StatusCode.ERROR
    assert dict(tool.attributes or {})["error.type"] == "CancelledError"
    (root,) = otel.named("invoke_agent")
    assert tool.parent is not None
    assert root.context is not None
    assert tool.parent.span_id == root.context.span_id


async def test_a_traced_tool_timeout_and_unreadable_arguments_are_error_spans(otel: Otel) -> None:
    agent, _ = _hanging()
    with ChatEmulator([call("hang", {"city": "P"}), say("done")]) as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(provider, agent=agent, prompt="x", tool_timeout=0.05)
    assert result.text == "done"
    use = ml.ToolUse(id="t1", name="hang", input={}, input_error="arguments were null")
    [answer] = await run_tool_calls(ml.Toolset([hang]), [use], ml.SessionInfo(session_id="s"))
    assert answer.is_error
    assert "arguments were null" in answer.text
    timed_out, unreadable = otel.named("execute_tool hang")
    for span in (timed_out, unreadable):
        assert span.status.status_code is StatusCode.ERROR
        assert dict(span.attributes or {})["error.type"] == "tool_error"
    assert dict(unreadable.attributes or {})["gen_ai.tool.call.id"] == "t1"
