"""managedloop.otel: GenAI spans and metrics, pinned with the SDK's in-memory exporter.

* the span tree of a two-tool session on every host (names, parentage, key attributes);
  a tool's own span nests under its ``execute_tool`` span, for a sync tool in a worker
  thread and for an async tool;
* the host's HTTP requests run with the turn's ``chat`` span current (what an httpx,
  aiohttp or botocore instrumentation would parent its spans under);
* failures: ``error.type`` and an error status (a tool error result, a failed request);
* content only with ``capture_content=True``;
* metrics: ``gen_ai.client.token.usage``, ``gen_ai.client.operation.duration``,
  ``managedloop.tool.duration``;
* ``import managedloop`` imports no opentelemetry; uninstrument stops the spans.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import StatusCode

import managedloop as ml
import managedloop.otel
from host_models import BEDROCK_MODEL, model_for
from managedloop import telemetry
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.testing import (
    AgentCoreEmulator,
    ChatEmulator,
    ChatFaults,
    ClaudeEmulator,
    call,
    say,
)

from .otel_hosts import TREE, broken, tree_for
from .otel_kit import Otel, traced_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
def http_parents() -> Iterator[list[tuple[str, str | None]]]:
    """(path, name of the current span) at every host HTTP request."""
    seen: list[tuple[str, str | None]] = []

    def listener(_n: str, _m: Any, meta: Any) -> None:
        seen.append((meta.get("path"), getattr(trace.get_current_span(), "name", None)))

    handle = telemetry.attach(
        listener, ["managedloop.request.start", "managedloop.agent_core.request.start"]
    )
    try:
        yield seen
    finally:
        telemetry.detach(handle)


def _agent(otel: Otel, host: str = "claude") -> ml.AgentSpec:
    return ml.AgentSpec(name="weather", tools=traced_tools(otel.tracer), model=model_for(host))


def _finish_reasons(otel: Otel) -> list[Any]:
    return [dict(c.attributes or {})["gen_ai.response.finish_reasons"] for c in otel.named("chat")]


def _check_common(
    otel: Otel, result: ml.SessionResult, provider_name: str, host: str = "claude"
) -> None:
    assert otel.tree() == tree_for(host)
    root = otel.named("invoke_agent")[0]
    attrs = dict(root.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.provider.name"] == provider_name
    assert attrs["gen_ai.agent.name"] == "weather"
    assert attrs["gen_ai.conversation.id"] == result.session_id
    assert attrs["gen_ai.request.model"] == model_for(host)
    assert result.usage is not None
    assert attrs["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    assert attrs["gen_ai.usage.output_tokens"] == result.usage.output_tokens
    assert root.status.status_code is StatusCode.UNSET
    for chat in otel.named("chat"):
        a = dict(chat.attributes or {})
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == provider_name
        assert a["gen_ai.conversation.id"] == result.session_id
        assert {"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} <= set(a)
        assert len(a["gen_ai.response.finish_reasons"]) == 1
        assert chat.kind is trace.SpanKind.CLIENT
    tools = otel.named("execute_tool")
    assert [dict(t.attributes or {})["gen_ai.tool.name"] for t in tools] == [
        "get_weather",
        "get_time",
    ]
    ids = [u.id for u in result.custom_tool_uses]
    assert [dict(t.attributes or {})["gen_ai.tool.call.id"] for t in tools] == ids
    for t in tools:
        a = dict(t.attributes or {})
        assert a["gen_ai.operation.name"] == "execute_tool"
        assert a["gen_ai.tool.type"] == "function"
        assert "gen_ai.tool.call.arguments" not in a  # content is off by default
        assert "error.type" not in a
    # one trace: every span shares the root's trace id
    assert {s.context.trace_id for s in otel.spans() if s.context} == {
        root.context.trace_id if root.context else 0
    }


async def test_local_span_tree(otel: Otel, http_parents: list[Any]) -> None:
    with ChatEmulator() as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(provider, agent=_agent(otel), prompt="x", max_concurrent_tools=1)
    _check_common(otel, result, "openai")
    assert otel.named("invoke_agent")[0].kind is trace.SpanKind.INTERNAL  # in process
    finish = [
        dict(c.attributes or {})["gen_ai.response.finish_reasons"] for c in otel.named("chat")
    ]
    assert finish == [("tool_calls",), ("stop",)]
    assert http_parents == [("/chat/completions", "chat claude-haiku-4-5")] * 2


async def test_claude_span_tree(otel: Otel, http_parents: list[Any]) -> None:
    with ClaudeEmulator() as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            agent = _agent(otel)
            handle = await ml.provision(ClaudeManagedAgents(client=c), agent)
            otel.exporter.clear()
            http_parents.clear()
            provider = ClaudeManagedAgents(client=c, agent=handle, environment=handle)
            result = await ml.run(provider, agent=agent, prompt="x", max_concurrent_tools=1)
    _check_common(otel, result, "anthropic")
    root = otel.named("invoke_agent")[0]
    assert root.kind is trace.SpanKind.CLIENT
    assert dict(root.attributes or {})["gen_ai.agent.id"] == handle.agent_id
    finish = [
        dict(c.attributes or {})["gen_ai.response.finish_reasons"] for c in otel.named("chat")
    ]
    assert finish == [("requires_action",), ("end_turn",)]
    # The session create happens at open, inside the run's invoke_agent span; the stream
    # attach and the event POSTs inside the turns.
    sid = result.session_id
    assert http_parents == [
        ("/v1/sessions", "invoke_agent weather"),
        (f"/v1/sessions/{sid}/events/stream", "invoke_agent weather"),
        (f"/v1/sessions/{sid}/events", "chat claude-haiku-4-5"),
        (f"/v1/sessions/{sid}/events", "chat claude-haiku-4-5"),
    ]


async def test_agentcore_span_tree(
    otel: Otel, http_parents: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with (
        AgentCoreEmulator() as emu,
        BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        ) as provider,
    ):
        agent = _agent(otel, "agentcore")
        result = await ml.run(provider, agent=agent, prompt="x", max_concurrent_tools=1)
    _check_common(otel, result, "aws.bedrock", "agentcore")
    finish = [
        dict(c.attributes or {})["gen_ai.response.finish_reasons"] for c in otel.named("chat")
    ]
    assert finish == [("tool_use",), ("end_turn",)]
    assert http_parents == [
        ("/harnesses/{harnessId}", "invoke_agent weather"),  # at open, in a worker thread
        ("/harnesses/invoke", f"chat {BEDROCK_MODEL}"),
        ("/harnesses/invoke", f"chat {BEDROCK_MODEL}"),
    ]


async def test_tool_error_and_failed_request(otel: Otel) -> None:
    agent = ml.AgentSpec(name="weather", tools=[broken], model="claude-haiku-4-5")
    with ChatEmulator([call("broken", {"city": "Paris"}), say("sorry")]) as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        await ml.run(provider, agent=agent, prompt="x")
    tool = otel.named("execute_tool")[0]
    assert dict(tool.attributes or {})["error.type"] == "tool_error"
    assert tool.status.status_code is StatusCode.ERROR
    assert otel.named("invoke_agent")[0].status.status_code is StatusCode.UNSET
    otel.exporter.clear()
    # An HTTP 401 on the model call: the chat and invoke_agent spans fail with the code.
    with ChatEmulator([say("never")]) as emu:
        provider = Local(
            model="claude-haiku-4-5", base_url=emu.base_url, api_key="wrong-key", max_retries=0
        )
        with pytest.raises(ml.ManagedLoopError) as info:
            await ml.run(provider, agent=agent, prompt="x")
    code = info.value.code
    for span in (otel.named("chat")[0], otel.named("invoke_agent")[0]):
        assert dict(span.attributes or {})["error.type"] == code
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == code  # the type, never the message


async def test_content_only_with_capture_content(otel: Otel) -> None:
    agent = ml.AgentSpec(
        name="weather", tools=traced_tools(otel.tracer)[:1], model="claude-haiku-4-5"
    )
    script = [call("get_weather", {"city": "Paris"}), say("It is sunny.")]
    with ChatEmulator(script) as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        await ml.run(provider, agent=agent, prompt="Weather in Paris?")
        for span in otel.spans():
            keys = set(span.attributes or {})
            assert not keys & {
                "gen_ai.input.messages",
                "gen_ai.output.messages",
                "gen_ai.tool.call.arguments",
                "gen_ai.tool.call.result",
            }
        otel.exporter.clear()
        provider_sdk = TracerProvider()  # the same exporter, instrumented again with content
        provider_sdk.add_span_processor(SimpleSpanProcessor(otel.exporter))
        managedloop.otel.instrument(provider_sdk, capture_content=True)
        assert telemetry.capture_content()
        await ml.run(provider, agent=agent, prompt="Weather in Paris?")
    tool = dict(otel.named("execute_tool")[0].attributes or {})
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"city": "Paris"}
    assert tool["gen_ai.tool.call.result"] == "Sunny in Paris"
    first, second = (dict(c.attributes or {}) for c in otel.named("chat"))
    assert json.loads(first["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}
    ]
    response = json.loads(second["gen_ai.input.messages"])[0]
    assert response["role"] == "tool"
    assert response["parts"][0]["response"] == "Sunny in Paris"
    assert json.loads(second["gen_ai.output.messages"])[0]["parts"][0]["content"] == (
        "It is sunny."
    )
    assert managedloop.otel.uninstrument()
    assert not telemetry.capture_content()
    assert not managedloop.otel.uninstrument()


async def test_metrics(otel: Otel) -> None:
    with ChatEmulator() as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(provider, agent=_agent(otel), prompt="x")
    metrics = otel.metrics()
    tokens = metrics["gen_ai.client.token.usage"]
    by_type = {p.attributes["gen_ai.token.type"]: p for p in tokens}
    assert result.usage is not None
    assert by_type["input"].sum == result.usage.input_tokens
    assert by_type["output"].sum == result.usage.output_tokens
    assert by_type["input"].count == 2  # one per chat (model call)
    assert dict(by_type["input"].attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "claude-haiku-4-5",
        "gen_ai.token.type": "input",
    }
    durations = {
        p.attributes["gen_ai.operation.name"]: p
        for p in metrics["gen_ai.client.operation.duration"]
    }
    assert durations["chat"].count == 2
    assert durations["invoke_agent"].count == 1
    tools = {p.attributes["gen_ai.tool.name"]: p for p in metrics["managedloop.tool.duration"]}
    assert set(tools) == {"get_weather", "get_time"}
    assert all(p.count == 1 and p.sum >= 0 for p in tools.values())


async def test_uninstrument_stops_spans(otel: Otel) -> None:
    assert managedloop.otel.instrumented()
    managedloop.otel.uninstrument()
    assert not managedloop.otel.instrumented()
    assert not telemetry.span_enabled("session.turn")  # the hot path is free again
    with ChatEmulator([say("hi")]) as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        await ml.run(provider, agent=_agent(otel), prompt="x")
    assert otel.spans() == []


async def test_instrument_does_not_enable_request_events(otel: Otel) -> None:
    """The bridge listens to the session, turn and tool spans only: a host's per-request
    telemetry stays off (no metadata built) unless someone else listens."""
    assert telemetry.span_enabled("session.request")
    assert not telemetry.span_enabled("request")
    assert not telemetry.enabled("stream.event")


async def test_streamed_local_and_retries_keep_one_chat_span(otel: Otel) -> None:
    faults = ChatFaults(statuses=[503])
    with ChatEmulator(faults=faults) as emu:
        provider = Local(
            model="claude-haiku-4-5",
            base_url=emu.base_url,
            api_key=emu.api_key,
            stream=True,
            retry_backoff=0.0,
        )
        await ml.run(provider, agent=_agent(otel), prompt="x", max_concurrent_tools=1)
        assert len(emu.received) == 3  # the 503, its retry, the second model call
    assert otel.tree() == TREE


def test_import_managedloop_imports_no_opentelemetry() -> None:
    code = (
        "import sys, managedloop, managedloop.telemetry; "
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_live_session_one_invoke_agent_per_request(otel: Otel) -> None:
    script = [say("one"), say("two")]
    with ChatEmulator(script) as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        async with ml.start(provider, agent=_agent(otel), prompt="first") as session:
            await session.result()
            await session.send("second")
            await session.result()
            sid = session.session_id
    assert otel.tree() == ["invoke_agent weather", "  chat claude-haiku-4-5"] * 2
    roots = otel.named("invoke_agent")
    assert {dict(r.attributes or {})["gen_ai.conversation.id"] for r in roots} == {sid}
    assert roots[0].context is not None
    assert roots[1].context is not None
    assert roots[0].context.trace_id != roots[1].context.trace_id  # each request: a trace


async def test_concurrent_tools_each_nest_their_own_spans(otel: Otel) -> None:
    """The default runs a turn's calls concurrently: each task has its own current span."""
    with ChatEmulator() as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        await ml.run(provider, agent=_agent(otel), prompt="x")  # max_concurrent_tools=8
    by_id = {s.context.span_id: s for s in otel.spans() if s.context is not None}

    def parent(name: str) -> str:
        (span,) = [s for s in otel.spans() if s.name == name]
        assert span.parent is not None
        return by_id[span.parent.span_id].name

    assert parent("weather lookup") == "execute_tool get_weather"
    assert parent("time lookup") == "execute_tool get_time"
    assert parent("execute_tool get_weather") == "invoke_agent weather"
    assert parent("execute_tool get_time") == "invoke_agent weather"
