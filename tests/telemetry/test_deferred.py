"""managedloop.otel's deferred span ends: the same spans and metrics as inline ends.

A turn's and a tool call's span end (its stop attributes, status, ``end()`` and histogram
records) is queued and run when the session's task next yields instead of inline; the
span's start and its being current stay inline. Pinned here:

* with one injected clock (the SDK's and the bridge's) and deterministic span ids, a
  two-tool session over HTTP gives span for span the same trace (names, ids, parents,
  start and end times, attributes, status) and the same metric points (counts, sums,
  exemplars) deferred as inline -- and the deferred run did queue its ends;
* every place a caller looks sees every span: the end of a session request (every other
  test in this directory reads the exporter right after ``ml.run``), ``flush()``,
  ``uninstrument()``, a tool call outside any session span (ended inline), ends queued on
  a loop that stopped before its flush ran (the next loop's flush takes them), and the
  interpreter's exit; a forked child does not end its parent's queued spans again;
* a deferred histogram record keeps the context of its span's stop (exemplars), also
  when one flush runs the ends of two sessions.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import textwrap
from collections import deque
from typing import Any

import opentelemetry.sdk.trace as sdk_trace
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

import managedloop as ml
import managedloop.otel
from managedloop import telemetry
from managedloop.handler import run_tool_calls
from managedloop.providers import Local
from managedloop.testing import ChatEmulator

from .otel_kit import Otel, traced_tools

pytestmark = pytest.mark.anyio


class _CountingIds(IdGenerator):
    """Span and trace ids 1, 2, 3...: two runs of one session get the same ids."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def generate_span_id(self) -> int:
        return next(self._next)

    def generate_trace_id(self) -> int:
        return next(self._next)


class _Queued(deque[Any]):
    """``managedloop.otel._pending`` that counts what was queued."""

    appended = 0

    def append(self, item: Any) -> None:
        self.appended += 1
        super().append(item)


def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """One fake nanosecond clock for the SDK's span times and the bridge's end stamps (a
    deferred end is stamped when the operation ends: the same tick an inline end reads),
    and a fake ``perf_counter`` for the durations the histograms record."""
    ticks = itertools.count(1_000_000_000, 1_000)
    monkeypatch.setattr(sdk_trace, "time_ns", lambda: next(ticks))
    monkeypatch.setattr(managedloop.otel, "_time_ns", lambda: next(ticks))
    seconds = itertools.count(1)
    monkeypatch.setattr(telemetry, "_perf_counter", lambda: float(next(seconds)))


def _points(reader: InMemoryMetricReader) -> list[Any]:
    """Every data point, without the metrics SDK's own collection timestamps."""
    data = reader.get_metrics_data()
    assert data is not None
    out = []
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for p in metric.data.data_points:
                    exemplars = sorted(
                        (e.trace_id, e.span_id, e.value) for e in getattr(p, "exemplars", ())
                    )
                    out.append(
                        (
                            metric.name,
                            sorted(p.attributes.items()),
                            p.count,
                            p.sum,
                            tuple(p.bucket_counts),
                            exemplars,
                        )
                    )
    return sorted(out, key=repr)


async def _session(defer: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[Any]]:
    _clock(monkeypatch)
    queued = _Queued()
    monkeypatch.setattr(managedloop.otel, "_pending", queued)
    monkeypatch.setattr(managedloop.otel, "_defer", defer)
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider(id_generator=_CountingIds(), resource=Resource({"service.name": "t"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    meters = MeterProvider(metric_readers=[reader], resource=Resource({"service.name": "t"}))
    managedloop.otel.instrument(provider, meter_provider=meters)
    try:
        agent = ml.AgentSpec(
            name="weather", tools=traced_tools(provider.get_tracer("tools")), model="m1"
        )
        with ChatEmulator() as emu:  # the real HTTP transport, as in bench/otel.py
            local = Local(model="m1", base_url=emu.base_url, api_key=emu.api_key)
            # one call at a time: the sync tool's worker thread reads the clock in turn
            result = await ml.run(local, agent=agent, prompt="x", max_concurrent_tools=1)
        # read as a caller does, right after ml.run: no flush of our own
        spans = sorted(exporter.get_finished_spans(), key=lambda s: s.context.span_id)
        points = _points(reader)
    finally:
        managedloop.otel.uninstrument()
        provider.shutdown()
        meters.shutdown()
    # chat x2 and execute_tool x2 are queued; invoke_agent ends inline
    assert queued.appended == (4 if defer else 0)
    assert result.session_id is not None  # random per session: the one thing that differs
    return [s.to_json().replace(result.session_id, "SESSION") for s in spans], points


async def test_deferred_ends_equal_inline_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    inline_spans, inline_points = await _session(False, monkeypatch)
    deferred_spans, deferred_points = await _session(True, monkeypatch)
    assert len(inline_spans) == 7  # the tree of test_otel.TREE
    assert deferred_spans == inline_spans
    assert deferred_points == inline_points
    assert any(p[5] for p in inline_points), "exemplars link points to spans: compared too"


async def test_a_deferred_record_keeps_its_spans_context(otel: Otel) -> None:
    """Two sessions' turns end in one loop iteration, so one flush runs both ends, in
    the context of the first: each record still goes in with its own span's context (the
    exemplar of a measurement names the span that was current when it was taken)."""

    async def session(agent: str) -> None:
        with telemetry.span("session.request", {"agent": agent, "provider": "local"}):
            with telemetry.span("session.turn", {"model": agent, "provider": "local"}) as x:
                x.update(input_tokens=1, output_tokens=1, stop_reason="stop")
            for _ in range(3):  # the flush runs here, before the request ends
                await asyncio.sleep(0)

    await asyncio.gather(session("a"), session("b"))
    traces = {s.name: s.context.trace_id for s in otel.exporter.get_finished_spans()}
    assert traces["invoke_agent a"] != traces["invoke_agent b"]
    chats = [
        p
        for p in otel.metrics()["gen_ai.client.operation.duration"]
        if p.attributes["gen_ai.operation.name"] == "chat"
    ]
    assert len(chats) == 2
    for point in chats:
        model = point.attributes["gen_ai.request.model"]
        assert {e.trace_id for e in point.exemplars} == {traces[f"invoke_agent {model}"]}


def _queue_one_tool_end(name: str) -> Any:
    """On the running loop, inside an open ``session.request`` span, end one tool span: its end
    is queued. Returns the request span's context manager, still open."""
    request = telemetry.span("session.request", {"agent": "a", "provider": "local"})
    request.__enter__()
    with telemetry.span("tool", {"tool": name, "tool_use_id": name, "provider": "local"}):
        pass
    return request


def _stopped_loop_with_a_queued_end(name: str) -> None:
    """A loop that stops right after queueing a span end, before its flush can run, and
    is closed: the end stays queued."""
    loop = asyncio.new_event_loop()

    def step() -> None:
        _queue_one_tool_end(name)
        loop.stop()  # this iteration is the last: the flush callback never runs

    loop.call_soon(step)
    loop.run_forever()
    loop.close()


def _names(otel: Otel) -> list[str]:
    return [s.name for s in otel.exporter.get_finished_spans()]


def test_ends_queued_on_a_closed_loop_are_flushed_by_the_next_loop(otel: Otel) -> None:
    _stopped_loop_with_a_queued_end("lost")
    assert _names(otel) == []  # queued, not lost

    async def next_loop() -> list[str]:
        _queue_one_tool_end("found")
        for _ in range(3):  # the loop's next iterations run its flush
            await asyncio.sleep(0)
        return _names(otel)

    assert asyncio.run(next_loop()) == ["execute_tool lost", "execute_tool found"]


def test_uninstrument_and_flush_end_what_is_queued(otel: Otel) -> None:
    _stopped_loop_with_a_queued_end("one")
    managedloop.otel.flush()
    assert _names(otel) == ["execute_tool one"]
    _stopped_loop_with_a_queued_end("two")
    assert managedloop.otel.uninstrument()
    assert _names(otel) == ["execute_tool one", "execute_tool two"]


async def test_a_tool_call_outside_a_session_ends_inline(otel: Otel) -> None:
    """contrib.temporal runs tool calls with no session span around them: nothing would
    flush their ends soon, so they end at once."""
    tools = traced_tools(otel.tracer)[1:]  # the async one
    [tool] = tools
    toolset = ml.Toolset(tools)
    info = ml.SessionInfo(session_id="s1", provider="local")
    use = ml.ToolUse(id="c1", name=tool.name, input={"city": "Oslo"})
    [result] = await run_tool_calls(toolset, [use], info)
    assert not result.is_error
    assert _names(otel) == ["time lookup", f"execute_tool {tool.name}"]


_QUEUE_ONE = """
import asyncio, os, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
import managedloop.otel
from managedloop import telemetry

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
    formatter=lambda s: f"{os.getpid()} ended {s.name}\\n", out=sys.stdout
)))
managedloop.otel.instrument(provider)
loop = asyncio.new_event_loop()

def step():
    telemetry.span("session.request", {"agent": "a", "provider": "local"}).__enter__()
    with telemetry.span("tool", {"tool": "queued", "provider": "local"}):
        pass
    loop.stop()

loop.call_soon(step)
loop.run_forever()
loop.close()
sys.stdout.flush()
"""


def test_a_forked_child_does_not_end_its_parents_queued_spans() -> None:
    script = _QUEUE_ONE + textwrap.dedent(
        """
        child = os.fork()
        if child == 0:
            managedloop.otel.flush()
            print(os.getpid(), "child flushed", flush=True)
            os._exit(0)
        os.waitpid(child, 0)
        managedloop.otel.flush()
        print(os.getpid(), "parent flushed", flush=True)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    lines = [line.split(" ", 1) for line in out.splitlines()]
    parent = lines[-1][0]
    assert [text for _, text in lines] == [
        "child flushed",
        "ended execute_tool queued",
        "parent flushed",
    ]
    assert [pid for pid, text in lines if text.startswith("ended")] == [parent]


def test_the_exit_flushes_what_is_queued() -> None:
    """The provider's own exit hook (it shuts down at exit) runs after the flush."""
    script = _QUEUE_ONE + 'print(os.getpid(), "exiting", flush=True)\n'
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert [line.split(" ", 1)[1] for line in out.splitlines()] == [
        "exiting",
        "ended execute_tool queued",
    ]


class _Raising(SimpleSpanProcessor):
    """Fails on the end of the first ``chat`` span (a broken processor or exporter)."""

    failed = False

    def on_end(self, span: Any) -> None:
        if span.name.startswith("chat") and not self.failed:
            self.failed = True
            raise RuntimeError("processor bug")
        super().on_end(span)


async def test_a_failing_deferred_end_is_logged_and_the_rest_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    raising = _Raising(exporter)
    provider.add_span_processor(raising)
    managedloop.otel.instrument(provider)
    try:
        with ChatEmulator() as emu:
            local = Local(model="m1", base_url=emu.base_url, api_key=emu.api_key)
            agent = ml.AgentSpec(name="weather", tools=traced_tools(provider.get_tracer("t")))
            result = await ml.run(local, agent=agent, prompt="x")
    finally:
        managedloop.otel.uninstrument()
        provider.shutdown()
    assert result.terminal is ml.Terminal.END_TURN  # the session never notices
    assert raising.failed
    assert "failed ending a span" in caplog.text
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == sorted(  # all but the first chat span
        [
            "invoke_agent weather",
            "chat m1",
            "execute_tool get_weather",
            "weather lookup",
            "execute_tool get_time",
            "time lookup",
        ]
    )


def test_spans_started_before_instrument_are_not_ended() -> None:
    """Instrumenting inside open spans: their stops find no span and are ignored; a turn
    that starts afterwards is spanned (alone: ended at once) and, with no usage reported,
    records its duration only."""
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    meters = MeterProvider(metric_readers=[reader])

    async def body() -> None:
        with telemetry.span("session.request", {"agent": "a", "provider": "local"}):
            with (
                telemetry.span("session.turn", {"model": "m", "provider": "local"}),
                telemetry.span("tool", {"tool": "t", "provider": "local"}),
            ):
                managedloop.otel.instrument(provider, meter_provider=meters)
            with telemetry.span("session.turn", {"model": "m", "provider": "local"}) as x:
                x["stop_reason"] = "stop"
            assert [s.name for s in exporter.get_finished_spans()] == ["chat m"]

    try:
        asyncio.run(body())
    finally:
        managedloop.otel.uninstrument()
        provider.shutdown()
    assert [s.name for s in exporter.get_finished_spans()] == ["chat m"]
    points = _points(reader)
    assert [p[0] for p in points] == ["gen_ai.client.operation.duration"]
    meters.shutdown()
