"""OpenTelemetry GenAI spans and metrics over the telemetry events (``managedloop[otel]``).

::

    import managedloop.otel
    managedloop.otel.instrument()                  # the global tracer and meter providers
    managedloop.otel.instrument(provider, meter_provider=mp, capture_content=True)
    managedloop.otel.uninstrument()

Spans follow the OpenTelemetry GenAI semantic conventions (names and attribute keys are
the ``opentelemetry-semantic-conventions`` constants)::

    invoke_agent {agent}          one per session request, to its terminal (a run's covers
    │                             its open: the session create nests here; a live session's
    │                             open, in ``async with``, is outside every span)
    ├── chat {model}              one per host turn: one model call on Local; on the managed
    │   └── (HTTP client spans)   hosts one host turn, with the usage the host reports
    ├── execute_tool {tool}       one per custom tool call
    │   └── (the tool's spans)    a tool's own spans nest here, sync tools included
    └── chat {model} ...

Attributes: ``gen_ai.operation.name``, ``gen_ai.provider.name`` (``anthropic`` for Claude,
``aws.bedrock`` for AgentCore, ``openai`` for Local's Chat Completions or ``anthropic``
for its ``anthropic:`` models), ``gen_ai.agent.name``/``gen_ai.agent.id``,
``gen_ai.conversation.id`` (the session id), ``gen_ai.request.model``,
``gen_ai.usage.input_tokens``/``output_tokens``, ``gen_ai.response.finish_reasons`` (the
host's raw stop reason), ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.tool.type``; a failure sets ``error.type`` (the error's stable ``code``, else
its type name) and an error status whose description is that type -- never the message,
which may quote what a server sent. A tool that answers with an error result is an
``execute_tool`` span with ``error.type = "tool_error"``. Message and tool content
(``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.tool.call.arguments``,
``gen_ai.tool.call.result``) is recorded only with ``capture_content=True``.

Metrics (histograms): ``gen_ai.client.token.usage`` (per ``chat``, by
``gen_ai.token.type``), ``gen_ai.client.operation.duration`` (seconds, per ``chat`` and
``invoke_agent``) and ``managedloop.tool.duration`` (seconds, per tool call; the GenAI
conventions define no client tool metric).

How the nesting works (the invariant this module relies on): telemetry listeners run
synchronously in the emitting task, and a span's ``start`` and ``stop``/``exception`` are
emitted in the same context (:mod:`managedloop.telemetry`). On ``start`` the bridge opens
the span and makes it the current one (``context.attach``); on ``stop`` it detaches and
ends it. The session driver emits ``session.turn`` around the host's I/O, so HTTP client
instrumentations (httpx for the ``anthropic`` SDK, aiohttp for Local and AgentCore,
botocore's control calls, which run in worker threads that copy the context) parent their
spans under ``chat``; ``tool`` is emitted around the call in the task that runs it, and
anyio copies the context into the worker thread of a sync tool. The span tree of a two-tool
session on every host, the HTTP parents and a tool's own span under ``execute_tool`` are
pinned in ``tests/telemetry/test_otel.py``; the cost, in ``bench/otel.py``.

Limits: instrumenting or uninstrumenting while a session runs leaves that session's open
spans as they were (a stop with no start is ignored; a start whose stop is no longer
delivered stays current in its task until the task ends). Provisioning and raw request
events are not spanned (the HTTP instrumentations cover them).

Only ``opentelemetry-api`` and ``opentelemetry-semantic-conventions`` are needed at run
time (the ``otel`` extra); ``import managedloop`` never imports this module.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from importlib import metadata
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
    from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
    from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - the extra is installed in every test run
    raise ImportError(
        "managedloop.otel needs the otel extra: pip install 'managedloop[otel]'"
    ) from exc

from managedloop import telemetry

__all__ = ["TOOL_DURATION", "instrument", "instrumented", "uninstrument"]

TOOL_DURATION = "managedloop.tool.duration"

# Plain strings, read once: an enum's ``.value`` costs a descriptor call per event.
_INVOKE_AGENT = gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
_CHAT = gen_ai.GenAiOperationNameValues.CHAT.value
_EXECUTE_TOOL = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
_ANTHROPIC = gen_ai.GenAiProviderNameValues.ANTHROPIC.value
_TOKEN_TYPES = (
    (gen_ai.GenAiTokenTypeValues.INPUT.value, "input_tokens"),
    (gen_ai.GenAiTokenTypeValues.COMPLETION.value, "output_tokens"),
)
# The attributes a metric point keeps (the span's identifying ones are too many series).
_METRIC_KEYS = (
    gen_ai.GEN_AI_OPERATION_NAME,
    gen_ai.GEN_AI_PROVIDER_NAME,
    gen_ai.GEN_AI_REQUEST_MODEL,
    gen_ai.GEN_AI_TOOL_NAME,
)
_EVENTS = [
    telemetry.PREFIX + f"{kind}.{phase}"
    for kind in ("session.request", "session.turn", "tool")
    for phase in ("start", "stop", "exception")
]
# The managed hosts run the agent remotely (a CLIENT span); Local runs it in process.
_REMOTE_AGENT = frozenset({"claude", "agentcore"})
_PROVIDER_NAMES = {
    "claude": _ANTHROPIC,
    "agentcore": gen_ai.GenAiProviderNameValues.AWS_BEDROCK.value,
    "local": gen_ai.GenAiProviderNameValues.OPENAI.value,  # the Chat Completions API
}


def _provider_name(host: Any, model: Any) -> str:
    if host == "local" and isinstance(model, str) and model.startswith("anthropic:"):
        return _ANTHROPIC
    return _PROVIDER_NAMES.get(host, str(host))


@dataclass(slots=True)
class _Open:
    kind: str
    span: trace.Span
    token: Any  # the otel context token that made ``span`` current
    attrs: dict[str, Any]  # the metric attributes


# The spans this context opened and has not ended yet, innermost last. A context variable:
# each task (each concurrent tool call) has its own stack.
_stack: ContextVar[tuple[_Open, ...]] = ContextVar("managedloop_otel_spans", default=())


def _set(attrs: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        attrs[key] = value


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _input_messages(content: Any) -> str | None:
    """The driver's turn input as GenAI input messages (role + parts)."""
    if not isinstance(content, list):
        return None
    messages: list[dict[str, Any]] = []
    for item in content:
        if item.get("role") == "tool":
            part = {
                "type": "tool_call_response",
                "id": item.get("tool_use_id"),
                "response": item.get("content"),
            }
            messages.append({"role": "tool", "parts": [part]})
        else:
            part = {"type": "text", "content": item.get("content")}
            messages.append({"role": "user", "parts": [part]})
    return _json(messages)


class _Bridge:
    """The telemetry listener: events in, spans and measurements out."""

    def __init__(self, tracer: trace.Tracer, meter: metrics.Meter, capture: bool) -> None:
        self.tracer = tracer
        self.capture = capture
        self.tokens = gen_ai_metrics.create_gen_ai_client_token_usage(meter)
        self.duration = gen_ai_metrics.create_gen_ai_client_operation_duration(meter)
        self.tool_duration = meter.create_histogram(
            TOOL_DURATION, unit="s", description="Duration of custom tool calls."
        )
        self._dispatch = {
            telemetry.PREFIX + "session.request.start": self._request_start,
            telemetry.PREFIX + "session.turn.start": self._turn_start,
            telemetry.PREFIX + "tool.start": self._tool_start,
            telemetry.PREFIX + "session.request.stop": self._request_stop,
            telemetry.PREFIX + "session.turn.stop": self._turn_stop,
            telemetry.PREFIX + "tool.stop": self._tool_stop,
        }

    def __call__(self, name: str, measurements: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        handler = self._dispatch.get(name)
        if handler is not None:
            handler(measurements, meta)
        else:  # an ``.exception``
            self._failed(name.removeprefix(telemetry.PREFIX).rsplit(".", 1)[0], measurements, meta)

    # -- opening -----------------------------------------------------------------------

    def _open(self, kind: str, name: str, span_kind: SpanKind, attrs: dict[str, Any]) -> None:
        span = self.tracer.start_span(name, kind=span_kind, attributes=attrs)
        token = otel_context.attach(trace.set_span_in_context(span))
        metric_attrs = {k: attrs[k] for k in _METRIC_KEYS if k in attrs}
        _stack.set((*_stack.get(), _Open(kind, span, token, metric_attrs)))

    def _base(self, op: str, meta: Mapping[str, Any]) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: op,
            gen_ai.GEN_AI_PROVIDER_NAME: _provider_name(meta.get("provider"), meta.get("model")),
        }
        _set(attrs, gen_ai.GEN_AI_CONVERSATION_ID, meta.get("session_id"))
        return attrs

    def _request_start(self, _m: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        attrs = self._base(_INVOKE_AGENT, meta)
        _set(attrs, gen_ai.GEN_AI_AGENT_NAME, meta.get("agent"))
        _set(attrs, gen_ai.GEN_AI_AGENT_ID, meta.get("agent_id"))
        _set(attrs, gen_ai.GEN_AI_REQUEST_MODEL, meta.get("model"))
        agent = meta.get("agent")
        name = f"{_INVOKE_AGENT} {agent}" if agent else _INVOKE_AGENT
        remote = meta.get("provider") in _REMOTE_AGENT
        self._open("session.request", name, SpanKind.CLIENT if remote else SpanKind.INTERNAL, attrs)

    def _turn_start(self, _m: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        attrs = self._base(_CHAT, meta)
        model = meta.get("model")
        _set(attrs, gen_ai.GEN_AI_REQUEST_MODEL, model)
        if self.capture:
            _set(attrs, gen_ai.GEN_AI_INPUT_MESSAGES, _input_messages(meta.get("input")))
        name = f"{_CHAT} {model}" if model else _CHAT
        self._open("session.turn", name, SpanKind.CLIENT, attrs)

    def _tool_start(self, _m: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        attrs = self._base(_EXECUTE_TOOL, meta)
        tool = meta.get("tool")
        _set(attrs, gen_ai.GEN_AI_TOOL_NAME, tool)
        _set(attrs, gen_ai.GEN_AI_TOOL_CALL_ID, meta.get("tool_use_id") or None)
        attrs[gen_ai.GEN_AI_TOOL_TYPE] = "function"
        if self.capture and "arguments" in meta:
            attrs[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = _json(meta["arguments"])
        name = f"{_EXECUTE_TOOL} {tool}" if tool else _EXECUTE_TOOL
        self._open("tool", name, SpanKind.INTERNAL, attrs)

    # -- closing -----------------------------------------------------------------------

    def _close(self, kind: str) -> _Open | None:
        stack = _stack.get()
        if not stack or stack[-1].kind != kind:
            return None  # instrumented after this span started: nothing to end
        _stack.set(stack[:-1])
        top = stack[-1]
        otel_context.detach(top.token)
        return top

    def _request_stop(self, m: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        top = self._close("session.request")
        if top is None:
            return
        span = top.span
        attrs = _stop_attributes(meta)
        _set(attrs, gen_ai.GEN_AI_CONVERSATION_ID, meta.get("session_id"))
        span.set_attributes(attrs)  # one call: the SDK takes its span lock per call
        span.end()
        self.duration.record(_seconds(m), top.attrs)

    def _turn_stop(self, m: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        top = self._close("session.turn")
        if top is None:
            return
        span = top.span
        attrs = _stop_attributes(meta)
        if self.capture and meta.get("output") is not None:
            output = [{"role": "assistant", "parts": [{"type": "text", "content": meta["output"]}]}]
            attrs[gen_ai.GEN_AI_OUTPUT_MESSAGES] = _json(output)
        span.set_attributes(attrs)
        span.end()
        self.duration.record(_seconds(m), top.attrs)
        for token_type, key in _TOKEN_TYPES:
            count = meta.get(key)
            if isinstance(count, int):
                self.tokens.record(count, {**top.attrs, gen_ai.GEN_AI_TOKEN_TYPE: token_type})

    def _tool_stop(self, m: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        top = self._close("tool")
        if top is None:
            return
        span = top.span
        attrs = top.attrs
        if meta.get("is_error"):
            span.set_attribute(ERROR_TYPE, "tool_error")
            span.set_status(Status(StatusCode.ERROR, "tool_error"))
            attrs = {**attrs, ERROR_TYPE: "tool_error"}
        if self.capture and "result" in meta:
            span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_RESULT, str(meta["result"]))
        span.end()
        self.tool_duration.record(_seconds(m), attrs)

    def _failed(self, kind: str, m: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
        top = self._close(kind)
        if top is None:
            return
        error = str(meta.get("code") or meta.get("kind") or "error")
        top.span.set_attribute(ERROR_TYPE, error)
        top.span.set_status(Status(StatusCode.ERROR, error))
        top.span.end()
        attrs = {**top.attrs, ERROR_TYPE: error}
        if kind == "tool":
            self.tool_duration.record(_seconds(m), attrs)
        else:
            self.duration.record(_seconds(m), attrs)


def _seconds(m: Mapping[str, Any]) -> float:
    value = m.get("duration")
    return float(value) if isinstance(value, int | float) else 0.0


def _stop_attributes(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Usage and finish reason of a request or turn (a key the event lacks is left out)."""
    attrs: dict[str, Any] = {}
    value = meta.get("input_tokens")
    if isinstance(value, int):
        attrs[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] = value
    value = meta.get("output_tokens")
    if isinstance(value, int):
        attrs[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] = value
    reason = meta.get("stop_reason")
    if isinstance(reason, Mapping):  # Claude's stop_reason object: {"type": ...}
        reason = reason.get("type")
    if not isinstance(reason, str) or not reason:
        reason = meta.get("terminal")
    if isinstance(reason, str):
        attrs[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] = (reason,)
    return attrs


_lock = threading.Lock()
_attachment: telemetry.Attachment | None = None


def _version() -> str:
    try:
        return metadata.version("managedloop")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return ""


def instrument(
    tracer_provider: trace.TracerProvider | None = None,
    *,
    meter_provider: metrics.MeterProvider | None = None,
    capture_content: bool = False,
) -> None:
    """Emit GenAI spans and metrics for every session from now on (see the module doc).

    ``None`` providers mean the global ones (``opentelemetry.trace.set_tracer_provider``).
    Calling it again replaces the previous instrumentation.
    """
    global _attachment
    version = _version()
    tracer = trace.get_tracer("managedloop", version, tracer_provider=tracer_provider)
    meter = metrics.get_meter("managedloop", version, meter_provider=meter_provider)
    bridge = _Bridge(tracer, meter, bool(capture_content))
    with _lock:
        if _attachment is not None:
            telemetry.detach(_attachment)
        _attachment = telemetry.attach(bridge, _EVENTS)
        telemetry.set_capture_content(bool(capture_content))


def uninstrument() -> bool:
    """Stop emitting spans and metrics; ``False`` if nothing was instrumented."""
    global _attachment
    with _lock:
        if _attachment is None:
            return False
        telemetry.detach(_attachment)
        _attachment = None
        telemetry.set_capture_content(False)
        return True


def instrumented() -> bool:
    """Whether :func:`instrument` is in force."""
    return _attachment is not None
