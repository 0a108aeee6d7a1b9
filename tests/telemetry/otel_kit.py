"""An in-memory OpenTelemetry SDK setup and a span-tree renderer for the bridge tests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import managedloop as ml
import managedloop.otel


@dataclass
class Otel:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer: trace.Tracer

    def spans(self) -> list[ReadableSpan]:
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)

    def tree(self) -> list[str]:
        """Each span as ``"  " * depth + name``, children after their parent (start order)."""
        spans = self.spans()
        by_parent: dict[int | None, list[ReadableSpan]] = {}
        ids = {s.context.span_id for s in spans if s.context is not None}
        for s in spans:
            parent = s.parent.span_id if s.parent is not None else None
            by_parent.setdefault(parent if parent in ids else None, []).append(s)
        out: list[str] = []

        def walk(parent: int | None, depth: int) -> None:
            for s in by_parent.get(parent, []):
                out.append("  " * depth + s.name)
                assert s.context is not None
                walk(s.context.span_id, depth + 1)

        walk(None, 0)
        return out

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]

    def metrics(self) -> dict[str, list[Any]]:
        """Metric name -> its data points."""
        data = self.reader.get_metrics_data()
        out: dict[str, list[Any]] = {}
        if data is None:
            return out
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    managedloop.otel.instrument(provider, meter_provider=meters)
    try:
        yield Otel(exporter, reader, provider.get_tracer("tools"))
    finally:
        managedloop.otel.uninstrument()
        provider.shutdown()
        meters.shutdown()


def traced_tools(tracer: trace.Tracer) -> list[Any]:
    """Two tools that open their own span: a sync one (a worker thread) and an async one."""

    @ml.tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        with tracer.start_as_current_span("weather lookup"):
            return f"Sunny in {city}"

    @ml.tool
    async def get_time(city: str) -> str:
        """Local time in a city."""
        with tracer.start_as_current_span("time lookup"):
            return f"Noon in {city}"

    return [get_weather, get_time]
