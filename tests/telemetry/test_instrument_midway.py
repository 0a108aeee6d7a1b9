"""Instrumenting while spans are open (``managedloop.otel``'s "Limits"): the stops of
spans that started before ``instrument()`` find no span and are ignored; a span that
starts afterwards is recorded, and a turn with no usage records its duration only."""

from __future__ import annotations

import asyncio

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import managedloop.otel
from managedloop import ToolResult, TurnResult, telemetry


def _metric_names(reader: InMemoryMetricReader) -> list[str]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        metric.name
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        for _ in metric.data.data_points
    ]


def test_spans_started_before_instrument_are_not_ended() -> None:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    meters = MeterProvider(metric_readers=[reader])

    async def body() -> None:
        # As the session emits them: session.request with a context manager, its turns and
        # tool calls with open_span/close_span and their results.
        with telemetry.span("session.request", {"agent": "a", "provider": "local"}):
            turn = telemetry.open_span("session.turn", {"model": "m", "provider": "local"})
            tool = telemetry.open_span("tool", {"tool": "t", "provider": "local"})
            managedloop.otel.instrument(provider, meter_provider=meters)
            telemetry.close_span(tool, ToolResult(tool_use_id="c", text="ok"))
            telemetry.close_span(turn, TurnResult(stop_reason="tool_calls"))
            turn = telemetry.open_span("session.turn", {"model": "m", "provider": "local"})
            telemetry.close_span(turn, TurnResult(stop_reason="stop"))
            assert [s.name for s in exporter.get_finished_spans()] == ["chat m"]

    try:
        asyncio.run(body())
    finally:
        managedloop.otel.uninstrument()
        provider.shutdown()
    assert [s.name for s in exporter.get_finished_spans()] == ["chat m"]
    assert _metric_names(reader) == ["gen_ai.client.operation.duration"]
    meters.shutdown()
