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
* ``hooks``: a span hook (``telemetry.attach_span``, what the bridge is) that does nothing
  on the three spans: what the session pays to emit its spans to any hook (the span
  metadata the driver's loop and ``handler.run_one_call`` build, ``telemetry.open_span``
  and ``close_span``), before the bridge does anything;
* ``noop``: ``managedloop.otel.instrument()`` on the API's no-op tracer and meter providers;
* ``standin``: the bridge on a *stand-in SDK* (:class:`bench.otel.StandInTracerProvider`,
  :class:`bench.otel.StandInMeterProvider`): recording spans and histograms whose every method
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
import sys
from collections.abc import Callable, Sequence
from itertools import starmap
from typing import Any

from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.trace import NoOpTracerProvider

import managedloop.otel
from bench.instructions import callgrind
from bench.otel import (
    _BRIDGE_EVENTS,
    TOOL_CALLS,
    StandInMeterProvider,
    StandInTracerProvider,
    _ignore,
    _providers,
    _run,
    _sdk_floor,
)
from managedloop import telemetry
from managedloop.providers import Local

WARM_UP = 3
RUNS = 10  # conversations counted: 210 requests
VARIANTS = ("off", "events", "hooks", "noop", "standin", "sdk", "floor_sdk", "floor_standin")


def _hook_start(_meta: Any, _tags: Any) -> Any:
    return True


def _hook_stop(*_args: Any) -> None:
    pass


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
    elif variant == "hooks":
        for span in ("session.request", "session.turn", "tool"):
            telemetry.attach_span(span, _hook_start, _hook_stop)
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
    # Only the measured conversations count: collection toggles on inside them.
    return callgrind(
        "bench.otel_instructions",
        ["--child", variant, str(n)],
        ["--collect-atstart=no", "--toggle-collect=starmap_next"],
    )


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
    hooks = ir["hooks"] - off
    print(
        f"  the session's spans to a no-op span hook: {hooks:+,.0f} = {hooks / off:.1%} of 'off' "
        f"(of the bridge's own cost below; the bridge's logic: {own_standin - hooks:,.0f})"
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
