"""Trace context reaches the harness: each InvokeHarness carries the current span's
W3C ``traceparent``/``tracestate``/``baggage`` and its X-Ray ``X-Amzn-Trace-Id``.

The judge is the OpenTelemetry SDK (its exported spans and its own propagators) and the
emulator's record of the headers it received.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import managedloop as ml
import managedloop.otel
from managedloop.providers import BedrockAgentCore
from managedloop.testing import AgentCoreEmulator, call, say

pytestmark = pytest.mark.anyio


@ml.tool
def lookup(city: str) -> str:
    """Look a city up."""
    return city


SPEC = ml.AgentSpec(name="traced", tools=[lookup])


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider, exporter
    finally:
        managedloop.otel.uninstrument()
        provider.shutdown()


def _trace_headers(emu: AgentCoreEmulator) -> list[dict[str, str]]:
    return [r.trace_context for r in emu.operations("InvokeHarness")]


def _parent_of(traceparent: str) -> tuple[int, int]:
    ctx = trace.get_current_span(
        TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    ).get_span_context()
    assert ctx.is_valid
    return ctx.trace_id, ctx.span_id


async def test_the_harness_call_is_a_child_of_the_session_span(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    managedloop.otel.instrument(provider)
    with AgentCoreEmulator([call("lookup", {"city": "Paris"}), say("done")]) as emu:
        async with BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        ) as hosted:
            result = await ml.run(hosted, agent=SPEC, prompt="go")
    assert result.terminal is ml.Terminal.END_TURN
    finished = exporter.get_finished_spans()
    roots = [s for s in finished if s.parent is None]
    assert len(roots) == 1, [s.name for s in roots]
    session = roots[0]
    assert session.context is not None
    ids = {s.context.span_id: s for s in finished if s.context is not None}
    headers = _trace_headers(emu)
    assert len(headers) == 2  # the prompt, then the tool results
    for sent in headers:
        trace_id, parent_id = _parent_of(sent["traceparent"])
        assert trace_id == session.context.trace_id
        # the harness's parent is one of our spans: the request span of that invoke
        assert parent_id in ids
        assert ids[parent_id].name == "chat"  # the bridge's span of that InvokeHarness
        hexid = f"{trace_id:032x}"
        assert sent["x-amzn-trace-id"] == (
            f"Root=1-{hexid[:8]}-{hexid[8:]};Parent={parent_id:016x};Sampled=1"
        )


async def test_the_callers_own_span_and_baggage_travel_without_the_bridge(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, _ = spans
    tracer = provider.get_tracer("caller")
    with AgentCoreEmulator([say("hi")]) as emu:
        hosted = BedrockAgentCore(harness_arn=emu.harness_arn, **emu.client_kwargs)
        token = context.attach(baggage.set_baggage("tenant", "acme"))
        try:
            with tracer.start_as_current_span("mine") as mine:
                await ml.run(hosted, agent=SPEC, prompt="go")
        finally:
            context.detach(token)
    (sent,) = _trace_headers(emu)
    trace_id, parent_id = _parent_of(sent["traceparent"])
    assert (trace_id, parent_id) == (
        mine.get_span_context().trace_id,
        mine.get_span_context().span_id,
    )
    assert sent["baggage"] == "tenant=acme"


async def test_no_current_span_sends_no_trace_headers() -> None:
    with AgentCoreEmulator([say("hi")]) as emu:
        hosted = BedrockAgentCore(harness_arn=emu.harness_arn, **emu.client_kwargs)
        await ml.run(hosted, agent=SPEC, prompt="go")
    assert _trace_headers(emu) == [{}]
