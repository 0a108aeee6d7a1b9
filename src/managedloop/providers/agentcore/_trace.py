"""The current trace context as ``InvokeHarness`` headers, so the harness's spans join ours.

When an OpenTelemetry span is current (the :mod:`managedloop.otel` bridge makes its
``agent_core.request`` span current while the request is prepared; a caller's own span
works the same), each ``InvokeHarness`` carries the W3C ``traceparent``, ``tracestate``
and ``baggage`` (``traceParent``, ``traceState``, ``baggage``) and the X-Ray form of the
same ids (``traceId``: ``Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>``).

OpenTelemetry is optional: it is never imported here. If nobody imported it, no span can
be current, so there is nothing to send; otherwise the global propagator writes the W3C
headers (its default is trace context plus baggage) and the X-Ray header is built from the
current span's context.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["trace_params"]

_LIMITS = {"traceParent": 1024, "traceState": 512, "traceId": 1024, "baggage": 8192}
# (the service's max lengths: a longer header is left out rather than refused)


def trace_params() -> dict[str, str]:
    """``InvokeHarness`` trace members for the current span (``{}`` when none is current)."""
    if "opentelemetry.trace" not in sys.modules:
        return {}
    from opentelemetry import propagate, trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    carrier: dict[str, Any] = {}
    propagate.inject(carrier)
    params: dict[str, str] = {}
    for header, member in (
        ("traceparent", "traceParent"),
        ("tracestate", "traceState"),
        ("baggage", "baggage"),
    ):
        value = carrier.get(header)
        if isinstance(value, str) and value:
            params[member] = value
    trace_id = f"{context.trace_id:032x}"
    sampled = 1 if context.trace_flags.sampled else 0
    params["traceId"] = (
        f"Root=1-{trace_id[:8]}-{trace_id[8:]};Parent={context.span_id:016x};Sampled={sampled}"
    )
    return {k: v for k, v in params.items() if len(v) <= _LIMITS[k]}
