"""``gen_ai.provider.name`` names the API a session's turns actually speak, as the host's
connection reports it (``Connection.gen_ai_provider``), on every span and metric point; and
the bridge on the API's no-op providers attaches nothing."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider

import managedloop as ml
import managedloop.otel
from managedloop import telemetry
from managedloop.providers import Local
from managedloop.testing import ChatEmulator, ScriptedChatModel, call, say

from .otel_kit import Otel

pytestmark = pytest.mark.anyio


def get_weather(city: str) -> str:
    """Weather."""
    return f"Sunny in {city}"


AGENT = ml.AgentSpec(name="a", tools=[get_weather])
SCRIPT = [call("get_weather", {"city": "Paris"}), say("Sunny.")]


def _providers(otel: Otel) -> dict[str, set[Any]]:
    """Span name prefix -> the provider names its spans and metric points carry."""
    out: dict[str, set[Any]] = {}
    for span in otel.spans():
        kind = span.name.split(" ")[0]
        out.setdefault(kind, set()).add(dict(span.attributes or {}).get("gen_ai.provider.name"))
    for name, points in otel.metrics().items():
        out.setdefault(name, set()).update(
            dict(p.attributes).get("gen_ai.provider.name") for p in points
        )
    return out


ANTHROPIC = {
    "invoke_agent": {"anthropic"},
    "chat": {"anthropic"},
    "execute_tool": {"anthropic"},
    "gen_ai.client.operation.duration": {"anthropic"},
    "gen_ai.client.token.usage": {"anthropic"},
    "managedloop.tool.duration": {"anthropic"},
}


async def test_a_run_of_an_anthropic_model_on_local_names_anthropic(otel: Otel) -> None:
    with ChatEmulator(SCRIPT) as emu:
        provider = Local(
            model="anthropic:claude-test", base_url=emu.anthropic_base_url, api_key=emu.api_key
        )
        result = await ml.run(provider, agent=AGENT, prompt="x")
    assert emu.requests[0].model == "claude-test"  # the Messages API, without the prefix
    assert len(result.custom_tool_uses) == 1
    assert _providers(otel) == ANTHROPIC


async def test_a_spec_model_with_the_anthropic_prefix_names_anthropic(otel: Otel) -> None:
    agent = ml.AgentSpec(name="a", tools=[get_weather], model="anthropic:claude-test")
    with ChatEmulator(SCRIPT) as emu:
        provider = Local(base_url=emu.anthropic_base_url, api_key=emu.api_key)
        async with ml.start(provider, agent=agent) as session:
            await session.send("x")
            await session.result()
    assert _providers(otel) == ANTHROPIC


async def test_chat_completions_on_local_names_openai(otel: Otel) -> None:
    chat = ScriptedChatModel(SCRIPT)
    await ml.run(Local(model="claude-test", chat=chat), agent=AGENT, prompt="x")
    assert _providers(otel) == {key: {"openai"} for key in ANTHROPIC}


async def test_a_chat_function_may_name_its_provider(otel: Otel) -> None:
    chat = ScriptedChatModel(SCRIPT)
    chat.gen_ai_provider = "mistral_ai"  # type: ignore[attr-defined]
    await ml.run(Local(model="m", chat=chat), agent=AGENT, prompt="x")
    assert _providers(otel)["execute_tool"] == {"mistral_ai"}
    assert _providers(otel)["chat"] == {"mistral_ai"}


def test_the_api_no_op_providers_attach_nothing() -> None:
    managedloop.otel.instrument(NoOpTracerProvider(), meter_provider=NoOpMeterProvider())
    try:
        assert managedloop.otel.instrumented()
        assert not telemetry.span_enabled("session.turn")
        assert not telemetry.span_enabled("tool")
    finally:
        assert managedloop.otel.uninstrument()
    assert not managedloop.otel.instrumented()
    assert not managedloop.otel.uninstrument()


async def test_a_no_op_meter_keeps_the_spans() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    managedloop.otel.instrument(tracer_provider, meter_provider=NoOpMeterProvider())
    try:
        await ml.run(Local(model="m", chat=ScriptedChatModel(SCRIPT)), agent=AGENT, prompt="x")
    finally:
        managedloop.otel.uninstrument()
    names = sorted(s.name.split(" ")[0] for s in exporter.get_finished_spans())
    assert names == ["chat", "chat", "execute_tool", "invoke_agent"]
