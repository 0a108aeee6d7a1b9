"""The OpenTelemetry bridge's own cost in situ, in instructions (callgrind; issue 27).

``python -m bench.otel_instructions`` runs the conversation of :mod:`bench.otel` (21
requests, 20 inline tool calls, against the chat emulator in a child process) under
``valgrind --tool=callgrind`` once per variant: ``WARM_UP`` conversations, then ``RUNS``
counted ones (callgrind collects only inside ``itertools.starmap``, which runs them; the
session's thread: the batch span processor's export thread is not counted, in the
session or in the floor), and prints the instructions per request: a figure load does not
move, and one that needs no tight-loop floor of the SDK's *time* (in situ the SDK's calls
take ~2.5x their tight-loop CPU time, see ``bench/otel.py``; their instruction count does
not change with the caches). Variants:

* ``off``: uninstrumented;
* ``events``: a listener that does nothing on the nine events the bridge listens to (the
  session's telemetry spans: what any listener pays before doing anything);
* ``noop``: ``managedloop.otel.instrument()`` on the API's no-op tracer and meter providers;
* ``standin``: the bridge on a *stand-in SDK* (:class:`StandInTracerProvider`,
  :class:`StandInMeterProvider`): recording spans and histograms whose every method
  returns at once. The bridge does all its work (it cannot tell the stand-in from an SDK),
  and the stand-in does none, so ``standin - off`` is the bridge's own cost plus the
  stand-in's calls, which ``floor_standin`` counts alone;
* ``sdk``: the SDK tracer with a ``BatchSpanProcessor`` and an exporter that drops every
  span, and the SDK meter with an in-memory reader (``bench/otel.py``'s "batch");
* ``floor_sdk`` / ``floor_standin``: exactly the calls the bridge makes on its providers for
  one request (:func:`bench.otel._sdk_floor`), without the bridge or a session.

It prints the bridge's own cost two ways, per request and as a fraction of an
uninstrumented request's client instructions (a stricter denominator than the request's
wall time, which adds the server, the kernel and the waiting): ``standin - off -
floor_standin`` and ``sdk - off - floor_sdk``. The second charges to the bridge whatever
the SDK does differently in a session than in the loop (the batch processor's thread
waking, the metric reader's aggregation state), so it is the upper bound; the first is the
bridge's work itself.

Not part of ``python -m bench`` (each variant takes a minute or two under valgrind).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from itertools import starmap
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.trace import NoOpTracerProvider
from opentelemetry.util.types import Attributes

import managedloop.otel
from bench.otel import _BRIDGE_EVENTS, TOOL_CALLS, _ignore, _providers, _run, _sdk_floor
from managedloop import telemetry
from managedloop.providers import Local

WARM_UP = 3
RUNS = 10  # conversations counted: 210 requests
VARIANTS = ("off", "events", "noop", "standin", "sdk", "floor_sdk", "floor_standin")


class StandInSpan(trace.Span):
    """A recording span that keeps nothing: every method returns at once."""

    __slots__ = ("_context",)

    def __init__(self, context: trace.SpanContext) -> None:
        self._context = context

    def get_span_context(self) -> trace.SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return True

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def add_event(self, name: str, attributes: Attributes = None, timestamp: Any = None) -> None:
        pass

    def add_link(self, context: trace.SpanContext, attributes: Attributes = None) -> None:
        pass

    def update_name(self, name: str) -> None:
        pass

    def set_status(self, status: Any, description: str | None = None) -> None:
        pass

    def record_exception(self, exception: BaseException, *args: Any, **kwargs: Any) -> None:
        pass

    def end(self, end_time: int | None = None) -> None:
        pass


_CONTEXT = trace.SpanContext(
    trace_id=0x0123456789ABCDEF0123456789ABCDEF,
    span_id=0x0123456789ABCDEF,
    is_remote=False,
    trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
)


class StandInTracer(trace.Tracer):
    def start_span(
        self, name: str, context: Context | None = None, *args: Any, **kwargs: Any
    ) -> trace.Span:
        return StandInSpan(_CONTEXT)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
        raise NotImplementedError


class StandInTracerProvider(trace.TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return StandInTracer()


class StandInHistogram(metrics.Histogram):
    def __init__(self) -> None:
        pass

    def record(self, amount: Any, attributes: Any = None, context: Any = None) -> None:
        pass


class StandInMeter(metrics.Meter):
    def __init__(self) -> None:
        super().__init__("standin")

    def create_histogram(self, *args: Any, **kwargs: Any) -> metrics.Histogram:
        return StandInHistogram()

    def _unused(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    create_counter = create_up_down_counter = create_observable_counter = _unused
    create_observable_gauge = create_observable_up_down_counter = create_gauge = _unused


class StandInMeterProvider(metrics.MeterProvider):
    def get_meter(self, *args: Any, **kwargs: Any) -> metrics.Meter:
        return StandInMeter()


def _child(variant: str, n: int) -> None:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from bench._server import serve

    providers: dict[str, Callable[[], tuple[Any, Any]]] = {
        "noop": lambda: (NoOpTracerProvider(), NoOpMeterProvider()),
        "standin": lambda: (StandInTracerProvider(), StandInMeterProvider()),
        "sdk": lambda: _providers(BatchSpanProcessor),
    }
    if variant.startswith("floor_"):
        tracer_provider, meter_provider = providers[variant.removeprefix("floor_")]()
        per = TOOL_CALLS + 1
        _sdk_floor(tracer_provider, meter_provider, n=WARM_UP * per)
        list(starmap(_sdk_floor, [(tracer_provider, meter_provider, n * per)]))  # counted
        return
    if variant in providers:
        tracer_provider, meter_provider = providers[variant]()
        managedloop.otel.instrument(tracer_provider, meter_provider=meter_provider)
    elif variant == "events":
        telemetry.attach(_ignore, _BRIDGE_EVENTS)
    loop = asyncio.new_event_loop()
    with serve(TOOL_CALLS) as (base_url, key):
        provider = Local(model="m", base_url=base_url, api_key=key)

        def conversation() -> None:
            assert loop.run_until_complete(_run(provider)) == TOOL_CALLS + 1

        for _ in range(WARM_UP):
            conversation()
        list(starmap(conversation, [()] * n))  # counted: callgrind collects in starmap_next
        loop.run_until_complete(provider.aclose())
    loop.close()


def _instructions(variant: str, n: int) -> int:
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            "--collect-atstart=no",
            "--toggle-collect=starmap_next",
            sys.executable,
            "-m",
            "bench.otel_instructions",
            "--child",
            variant,
            str(n),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = re.search(r"Collected : (\d+)", out.stderr)
    assert found, out.stderr[-500:]
    return int(found.group(1))


def measure(variants: Sequence[str] = VARIANTS) -> dict[str, float]:
    """Instructions per request of each variant (the floors: per request of calls)."""
    return {v: _instructions(v, RUNS) / (RUNS * (TOOL_CALLS + 1)) for v in variants}


def main() -> None:
    ir = measure()
    off = ir["off"]
    print(
        f"(otel, callgrind) instructions per request over HTTP, {TOOL_CALLS} tool calls, "
        f"{RUNS} conversations after {WARM_UP}"
    )
    for v in VARIANTS:
        extra = "" if v.startswith("floor_") else f"  {ir[v] / off:6.3f}x off  {ir[v] - off:+9,.0f}"
        print(f"  {v:14s} {ir[v]:10,.0f}{extra}")
    own_standin = ir["standin"] - off - ir["floor_standin"]
    own_sdk = ir["sdk"] - off - ir["floor_sdk"]
    events = ir["events"] - off
    print(
        f"  the session's telemetry spans to a no-op listener: {events:+,.0f} "
        f"= {events / off:.1%} of 'off'"
    )
    print(
        f"  the bridge's own cost (standin - off - floor_standin): {own_standin:,.0f} "
        f"= {own_standin / off:.1%} of 'off' (target <= 5 %: "
        f"{'met' if own_standin <= 0.05 * off else 'NOT met'})"
    )
    print(
        f"  upper bound (sdk - off - floor_sdk): {own_sdk:,.0f} = {own_sdk / off:.1%} of 'off'; "
        f"the SDK's calls alone {ir['floor_sdk']:,.0f} = {ir['floor_sdk'] / off:.1%}"
    )
    print(
        f"  the bridge on the API's no-op providers: {ir['noop'] / off:.3f}x 'off' "
        f"(target <= 1.05x: {'met' if ir['noop'] <= 1.05 * off else 'NOT met'})"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        main()
