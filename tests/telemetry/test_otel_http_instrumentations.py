"""The hosts' HTTP client spans, made by the real OpenTelemetry instrumentations, land
under the bridge's spans.

``tests/telemetry/test_otel.py`` checks which span is current when a host makes a request;
this module checks what a user's backend actually receives when they also run the
instrumentations of the libraries the hosts use (written by others, so they judge the
bridge's context handling rather than our own reading of it):

* Claude: the ``anthropic`` SDK sends over ``httpx2`` (its fork of httpx), instrumented by
  ``HTTPX2ClientInstrumentor``;
* AgentCore: botocore's control and data-plane calls (``BotocoreInstrumentor``) and the
  data plane's aiohttp stream (``AioHttpClientInstrumentor``).

The session create and the Claude event stream's attach happen at open, inside the run's
``invoke_agent``; each turn's requests nest under its ``chat`` span. (Local sends over its
own transport, which no instrumentation knows; ``test_otel.py`` pins that its requests run
with ``chat`` current.)
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor
from opentelemetry.sdk.trace import ReadableSpan

from host_models import BEDROCK_MODEL

from .otel_hosts import TREE, provider_into, run_agentcore, run_claude, tree_for
from .otel_kit import Otel

pytestmark = pytest.mark.anyio


def _ours(span: ReadableSpan) -> bool:
    """A span of the bridge or of the test's tools (the rest are the instrumentations')."""
    return span.instrumentation_scope is not None and span.instrumentation_scope.name in {
        "managedloop",
        "tools",
    }


def _parents(otel: Otel) -> list[tuple[str, str]]:
    """(what, the name of its parent span) of every span an instrumentation made, in start
    order; ``what`` is an HTTP span's method and URL path, or a botocore span's name."""
    spans = otel.spans()
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    out: list[tuple[str, str]] = []
    for s in spans:
        if _ours(s):
            continue
        assert s.kind is trace.SpanKind.CLIENT, s.name
        attrs = dict(s.attributes or {})
        url = attrs.get("url.full", attrs.get("http.url"))
        what = s.name
        if isinstance(url, str):
            method = attrs.get("http.request.method", attrs.get("http.method"))
            what = f"{method} {urlsplit(url).path}"
        assert s.parent is not None, f"{what} has no parent"
        parent = by_id.get(s.parent.span_id)
        assert parent is not None, f"{what}'s parent is not in the trace"
        out.append((what, parent.name))
    return out


def _bridge_tree(otel: Otel) -> list[str]:
    """The tree of the bridge's and tools' spans alone."""
    kept = [s for s in otel.spans() if _ours(s)]
    otel.exporter.clear()
    for s in kept:  # re-export just ours, so Otel.tree renders them
        otel.exporter.export([s])
    return otel.tree()


async def test_claude_httpx2_spans_nest_under_the_bridge(otel: Otel) -> None:
    provider = provider_into(otel)
    instrumentor = HTTPX2ClientInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        result = await run_claude(otel)
    finally:
        instrumentor.uninstrument()
    sid = result.session_id
    assert _parents(otel) == [
        ("POST /v1/sessions", "invoke_agent weather"),
        (f"GET /v1/sessions/{sid}/events/stream", "invoke_agent weather"),
        (f"POST /v1/sessions/{sid}/events", "chat claude-haiku-4-5"),
        (f"POST /v1/sessions/{sid}/events", "chat claude-haiku-4-5"),
    ]
    assert _bridge_tree(otel) == TREE
    # one trace: the instrumentations' spans share the bridge's trace id
    assert len({s.context.trace_id for s in otel.spans() if s.context is not None}) == 1


async def test_agentcore_botocore_and_aiohttp_spans_nest_under_the_bridge(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = provider_into(otel)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    botocore, aiohttp = BotocoreInstrumentor(), AioHttpClientInstrumentor()
    botocore.instrument(tracer_provider=provider)
    aiohttp.instrument(tracer_provider=provider)
    try:
        await run_agentcore(otel)
    finally:
        botocore.uninstrument()
        aiohttp.uninstrument()
    parents = _parents(otel)
    # at open, in a worker thread that copied the run's context
    assert parents[0] == ("Bedrock AgentCore Control.GetHarness", "invoke_agent weather")
    # each turn: botocore's InvokeHarness and the aiohttp POST of its stream, under chat
    per_turn = sorted(parents[1:])
    invoke = ("Bedrock AgentCore.InvokeHarness", f"chat {BEDROCK_MODEL}")
    post = next(p for p in per_turn if p[0].startswith("POST "))
    assert post[1] == f"chat {BEDROCK_MODEL}"
    assert per_turn == sorted([invoke, post] * 2)
    assert _bridge_tree(otel) == tree_for("agentcore")
    assert len({s.context.trace_id for s in otel.spans() if s.context is not None}) == 1
