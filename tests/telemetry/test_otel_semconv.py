"""What definitions of the GenAI conventions we did not write say of the bridge's output.

* every ``gen_ai`` span of a two-tool session on every host, a failed tool and a failed
  request, with content on and off, passes ``pytest-genai-semconv``'s checks (attribute
  value types and enum values from the conventions' registry; the required attributes,
  span kinds and name prefixes of each span type);
* the histograms carry the conventions' ``ExplicitBucketBoundaries`` (gen-ai metrics:
  token usage 1, 4, 16 ... 67,108,864; operation duration 0.01 ... 81.92 s) rather than
  the SDK's defaults, which are made for milliseconds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pytest_genai_semconv import (
    assert_chat_span,
    assert_execute_tool_span,
    assert_genai_span_compliant,
    assert_invoke_agent_span,
)

import managedloop as ml
import managedloop.otel
from host_models import CLAUDE_MODEL, model_for
from managedloop import telemetry
from managedloop.providers import Local
from managedloop.testing import ChatEmulator, call, say

from .otel_hosts import broken, provider_into, run_agentcore, run_claude, run_local
from .otel_kit import Otel

pytestmark = pytest.mark.anyio

TOKEN_BOUNDARIES = [4.0**n for n in range(14)]  # 1 ... 67,108,864
DURATION_BOUNDARIES = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24]
DURATION_BOUNDARIES += [20.48, 40.96, 81.92]


def _judge(otel: Otel, tools: list[str], model: str = CLAUDE_MODEL) -> None:
    """Every gen_ai span passes the generic checks; each kind its operation's."""
    genai = [s for s in otel.spans() if "gen_ai.operation.name" in (s.attributes or {})]
    assert genai, "no gen_ai spans"
    for span in genai:
        assert_genai_span_compliant(span)
    (agent,) = otel.named("invoke_agent")
    assert_invoke_agent_span(agent, agent_name="weather")
    chats = otel.named("chat")
    assert chats
    for chat in chats:
        assert_chat_span(chat, request_model=model)
    executed = otel.named("execute_tool")
    assert [dict(s.attributes or {})["gen_ai.tool.name"] for s in executed] == tools
    for span, name in zip(executed, tools, strict=True):
        assert_execute_tool_span(span, tool_name=name)


@pytest.mark.parametrize("content", [False, True], ids=["content-off", "content-on"])
@pytest.mark.parametrize(
    "host", [run_local, run_claude, run_agentcore], ids=["local", "claude", "agentcore"]
)
async def test_every_host_s_spans_pass_the_conventions(
    otel: Otel, host: Any, content: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    if content:  # instrumented again, into the same exporter, with content
        managedloop.otel.instrument(provider_into(otel), capture_content=True)
        assert telemetry.capture_content()
    result = await host(otel)
    _judge(
        otel,
        ["get_weather", "get_time"],
        model_for("agentcore" if host is run_agentcore else "claude"),
    )
    if not content:
        return
    # the content attributes were there to be judged; the first turn's output message
    # names the tool calls the model asked for (the conventions' tool_call parts)
    keys = {k for s in otel.spans() for k in s.attributes or {}}
    assert {"gen_ai.input.messages", "gen_ai.tool.call.arguments"} <= keys
    first, last = (dict(c.attributes or {}) for c in otel.named("chat"))
    (message,) = json.loads(first["gen_ai.output.messages"])
    assert message["role"] == "assistant"
    calls = [p for p in message["parts"] if p["type"] == "tool_call"]
    assert calls == [
        {"type": "tool_call", "id": u.id, "name": u.name, "arguments": dict(u.input)}
        for u in result.custom_tool_uses
    ]
    (answer,) = json.loads(last["gen_ai.output.messages"])
    assert answer["parts"] == [{"type": "text", "content": result.text}]


async def test_failures_pass_the_conventions(otel: Otel) -> None:
    agent = ml.AgentSpec(name="weather", tools=[broken], model="claude-haiku-4-5")
    with ChatEmulator([call("broken", {"city": "Paris"}), say("sorry")]) as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        await ml.run(provider, agent=agent, prompt="x")
    _judge(otel, ["broken"])
    otel.exporter.clear()
    with ChatEmulator([say("never")]) as emu:
        provider = Local(
            model="claude-haiku-4-5", base_url=emu.base_url, api_key="wrong-key", max_retries=0
        )
        with pytest.raises(ml.ManagedLoopError):
            await ml.run(provider, agent=agent, prompt="x")
    _judge(otel, [])


async def test_histograms_carry_the_conventions_bucket_boundaries(otel: Otel) -> None:
    await run_local(otel)
    metrics = otel.metrics()
    tokens = metrics["gen_ai.client.token.usage"]
    durations = metrics["gen_ai.client.operation.duration"] + metrics["managedloop.tool.duration"]
    assert tokens
    assert durations
    for point in tokens:
        assert list(point.explicit_bounds) == TOKEN_BOUNDARIES
    for point in durations:
        assert list(point.explicit_bounds) == DURATION_BOUNDARIES
