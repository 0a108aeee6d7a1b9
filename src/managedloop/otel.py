"""OpenTelemetry GenAI spans and metrics over the telemetry events (``managedloop[otel]``).

>>> import managedloop.otel
>>> managedloop.otel.instrument()  # the global tracer and meter providers
>>> from opentelemetry.sdk.metrics import MeterProvider  # or your own (the SDK's here)
>>> from opentelemetry.sdk.trace import TracerProvider
>>> managedloop.otel.instrument(TracerProvider(), meter_provider=MeterProvider())
>>> managedloop.otel.instrumented()
True
>>> managedloop.otel.uninstrument()
True

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

Attributes: ``gen_ai.operation.name``, ``gen_ai.provider.name`` (the API the session's
turns speak, as the host's connection reports it, ``Connection.gen_ai_provider``:
``openai`` for Local's Chat Completions and ``anthropic`` for its ``anthropic:`` models;
else the host's own: ``anthropic`` for Claude, ``aws.bedrock`` for AgentCore; a run's
``invoke_agent`` starts before the connection is open and takes the reported one at its
end), ``gen_ai.agent.name``/``gen_ai.agent.id``,
``gen_ai.conversation.id`` (the session id), ``gen_ai.request.model``,
``gen_ai.usage.input_tokens``/``output_tokens`` (and, where the host reported prompt-cache
use, ``gen_ai.usage.cache_read.input_tokens``/``cache_creation.input_tokens``; a cost has
no GenAI name and stays on the telemetry event), ``gen_ai.response.finish_reasons`` (the
host's raw stop reason), ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``gen_ai.tool.type``; a failure sets ``error.type`` (the error's stable ``code``, else
its type name) and an error status whose description is that type -- never the message,
which may quote what a server sent. A tool that answers with an error result is an
``execute_tool`` span with ``error.type = "tool_error"``. Message and tool content
(``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.tool.call.arguments``,
``gen_ai.tool.call.result``) is recorded only with ``capture_content=True``; a turn's
output message holds its text and a ``tool_call`` part (id, name, arguments) for each call
the model asked for. ``gen_ai.input.messages`` holds what the turn sends (the prompt, or
the tool results), not the whole history: on the managed hosts the history is the
server's, and on Local encoding it again on every turn would make each turn cost the
whole conversation; the previous ``chat`` spans of the trace hold the rest.

Metrics (histograms): ``gen_ai.client.token.usage`` (per ``chat``, by
``gen_ai.token.type``), ``gen_ai.client.operation.duration`` (seconds, per ``chat`` and
``invoke_agent``) and ``managedloop.tool.duration`` (seconds, per tool call; the GenAI
conventions define no client tool metric), with the conventions' explicit bucket
boundaries as advice (tokens 1, 4, 16 ... 4**13; seconds 0.01, 0.02 ... 81.92, the tool
histogram too); a ``View`` of the application's overrides them. A metric point keeps the
operation, provider, model and tool name; a model can invent tool names without end (each
call answered with an error result), so after 1,000 distinct names a new one is
``_OTHER`` in the tool-duration metric (the SDK's aggregation has no cardinality limit of
its own); spans keep every name.

How the nesting works (the invariant this module relies on): the bridge is a span hook
(:func:`managedloop.telemetry.attach_span`: no event dict is built for it; a turn's and a
tool call's stop hand it the session's ``TurnResult`` and ``ToolResult`` themselves, see
:func:`managedloop.telemetry.close_span`), hooks run synchronously in the emitting task,
and a span's start and stop are emitted in the same context (:mod:`managedloop.telemetry`).
On the start the bridge opens the span and makes it the current one (``context.attach``);
on the stop it detaches and ends it. The session driver emits ``session.turn`` around the
host's I/O, so HTTP client instrumentations parent their spans under ``chat``:
``HTTPX2ClientInstrumentor`` from ``opentelemetry-instrumentation-httpx`` for the
``anthropic`` SDK (it sends over ``httpx2``, its fork of httpx, which
``HTTPXClientInstrumentor`` does not see), ``AioHttpClientInstrumentor`` for AgentCore's
data plane and ``BotocoreInstrumentor`` for its calls (the control calls run in worker
threads that copy the context). A session's create, and Claude's stream attach, happen at
open, under ``invoke_agent``. Local's own transport has no instrumentation; its requests
run with ``chat`` current too. ``tool`` is emitted around the call in the task that runs
it, and anyio copies the context into the worker thread of a sync tool. The span tree of a
two-tool session on every host, the HTTP parents and a tool's own span under
``execute_tool`` are pinned in ``tests/telemetry/test_otel.py``, and what the real
instrumentations make of it in ``tests/telemetry/test_otel_http_instrumentations.py``; the
cost, in ``bench/otel.py``.

Cost: ``python -m bench otel`` (CPU and wall time) and ``python -m bench.otel_instructions``
(callgrind instructions, the bridge's own work against the SDK's calls in the same
session) print it; the figures are in ``bench/README.md``. On the API's no-op tracer and
meter providers nothing is attached at all (no span, no measurement: nothing a session
pays for); on the global providers the bridge always runs, since an SDK set later makes
them real. With the API's no-op meter alone, spans are made and no measurement.

Span ends are inline, in the task that stopped the operation.

Instrumenting or uninstrumenting while a session runs: a span that started before an
``uninstrument()`` still ends, and the caller's context is restored (a telemetry span
delivers its stop to the hooks that heard its start); a span whose start came before
an ``instrument()`` is not opened, and its stop is ignored. A timeout ends
``invoke_agent`` with ``error.type = "timeout"`` (the deadline's cancel stays inside it).
Provisioning and raw request events are not spanned (the HTTP instrumentations cover
them).

Only ``opentelemetry-api`` and ``opentelemetry-semantic-conventions`` are needed at run
time (the ``otel`` extra); ``import managedloop`` never imports this module.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from contextvars import ContextVar
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
from managedloop.results import ToolResult, TurnResult

__all__ = ["TOOL_DURATION", "instrument", "instrumented", "uninstrument"]


TOOL_DURATION = "managedloop.tool.duration"
# The GenAI metric conventions' ExplicitBucketBoundaries: token usage, and operation
# duration in seconds (the tool histogram uses the duration ones too).
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                  16777216, 67108864)  # fmt: skip
_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                     20.48, 40.96, 81.92)  # fmt: skip

# Plain strings, read once: an enum's ``.value`` costs a descriptor call per event.
_INVOKE_AGENT = gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
_CHAT = gen_ai.GenAiOperationNameValues.CHAT.value
_EXECUTE_TOOL = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
_ANTHROPIC = gen_ai.GenAiProviderNameValues.ANTHROPIC.value
_INPUT = gen_ai.GenAiTokenTypeValues.INPUT.value
_OUTPUT = gen_ai.GenAiTokenTypeValues.COMPLETION.value
_OPERATION = gen_ai.GEN_AI_OPERATION_NAME
_PROVIDER = gen_ai.GEN_AI_PROVIDER_NAME
_MODEL = gen_ai.GEN_AI_REQUEST_MODEL
_CONVERSATION = gen_ai.GEN_AI_CONVERSATION_ID
_TOOL_NAME = gen_ai.GEN_AI_TOOL_NAME
_TOOL_CALL_ID = gen_ai.GEN_AI_TOOL_CALL_ID
_INPUT_TOKENS = gen_ai.GEN_AI_USAGE_INPUT_TOKENS
_OUTPUT_TOKENS = gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
# Named by the GenAI conventions since semconv 0.59b0; spelled out for older packages.
_CACHE_READ_TOKENS = getattr(
    gen_ai, "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS", "gen_ai.usage.cache_read.input_tokens"
)
_CACHE_WRITE_TOKENS = getattr(
    gen_ai, "GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS", "gen_ai.usage.cache_creation.input_tokens"
)
_FINISH_REASONS = gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
# The attributes a metric point keeps (the span's identifying ones are too many series).
_METRIC_KEYS = (_OPERATION, _PROVIDER, _MODEL, _TOOL_NAME)
# The managed hosts run the agent remotely (a CLIENT span); Local runs it in process.
_REMOTE_AGENT = frozenset({"claude", "agentcore"})
_PROVIDER_NAMES = {
    "claude": _ANTHROPIC,
    "agentcore": gen_ai.GenAiProviderNameValues.AWS_BEDROCK.value,
    "local": gen_ai.GenAiProviderNameValues.OPENAI.value,  # the Chat Completions API
}
# Span shapes cached per (host, model) or (host, tool): a session's turns and tool calls
# repeat the same few. Bounded: cleared when a process sees more shapes than this.
_SHAPES_MAX = 512
# Tool names become metric attributes, and a model can invent any number of them (each is
# answered with an error result): past this many distinct names a new one is recorded as
# ``_OTHER`` in the metrics, so the SDK's aggregation (which has no cardinality limit)
# cannot grow without bound. Spans keep every name: they are not aggregated.
_TOOL_NAMES_MAX = 1000
_OTHER = "_OTHER"
# (span name, start attributes, metric attributes, span kind)
_Shape = tuple[str, dict[str, Any], Any, SpanKind]


def _provider_name(host: Any, model: Any) -> str:
    if host == "local" and isinstance(model, str) and model.startswith("anthropic:"):
        return _ANTHROPIC
    return _PROVIDER_NAMES.get(host, str(host))


def _metric_attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: attrs[k] for k in _METRIC_KEYS if k in attrs}


# -- span ends --------------------------------------------------------------------------


def _end(span: trace.Span, attrs: Mapping[str, Any] | None, error: str | None) -> None:
    """End ``span`` after its stop attributes (one call: the SDK takes its span lock per
    call) and, on a failure, its error status. The measurements of the operation are
    recorded after it, in the context current when it stopped (its parent's: an exemplar
    links a measurement to the span current then)."""
    if attrs:
        span.set_attributes(attrs)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


# -- the bridge --------------------------------------------------------------------------


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


def _output_messages(result: TurnResult) -> str:
    """The turn's output as one GenAI output message: its text, then the tool calls the
    model asked for (the text part is left out when it is empty and there are calls)."""
    text, uses = result.text, result.custom_tool_uses
    parts: list[dict[str, Any]] = []
    if text or not uses:
        parts.append({"type": "text", "content": text})
    parts.extend(
        {"type": "tool_call", "id": u.id, "name": u.name, "arguments": u.input} for u in uses
    )
    return _json([{"role": "assistant", "parts": parts}])


def _finish_reason(reason: Any, terminal: Any) -> str | None:
    """The finish reason of a request or turn: the host's raw stop reason (Claude's is an
    object, ``{"type": ...}``), else the terminal."""
    if isinstance(reason, Mapping):
        reason = reason.get("type")
    if not isinstance(reason, str) or not reason:
        reason = terminal
    return reason if isinstance(reason, str) else None


def _stop_attributes(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Usage and finish reason of a request or turn (a key the event lacks is left out)."""
    attrs: dict[str, Any] = {}
    value = meta.get("input_tokens")
    if isinstance(value, int):
        attrs[_INPUT_TOKENS] = value
    value = meta.get("output_tokens")
    if isinstance(value, int):
        attrs[_OUTPUT_TOKENS] = value
    # Cache counts only where a host reported some (the others have no cache to read).
    value = meta.get("cache_read_input_tokens")
    if isinstance(value, int) and value:
        attrs[_CACHE_READ_TOKENS] = value
    value = meta.get("cache_creation_input_tokens")
    if isinstance(value, int) and value:
        attrs[_CACHE_WRITE_TOKENS] = value
    reason = meta.get("stop_reason")
    if type(reason) is not str or not reason:  # the usual case is a string
        reason = _finish_reason(reason, meta.get("terminal"))
    if reason is not None:
        attrs[_FINISH_REASONS] = (reason,)
    return attrs


class _Request:
    """The bridge's state for one ``session.request`` span (current in its context, so the
    turns and tool calls of the request find it): the GenAI provider its turns report
    (a run's request starts before the connection says) names its tool calls."""

    __slots__ = ("metric", "model", "parent", "provider", "span", "token", "var_token")

    def __init__(self, span: trace.Span, parent: Any, metric: Any, provider: str, model: Any):
        self.span = span
        self.parent = parent
        self.metric = metric
        self.provider = provider
        self.model = model
        self.token: Any = None
        self.var_token: Any = None


_request: ContextVar[_Request | None] = ContextVar("managedloop_otel_request", default=None)
# A turn's or a tool call's state, from its start hook to its stop hook: (span, the otel
# context token that made it current, the otel context it was opened in (its parent's,
# which detaching the token makes current again), its metric attributes).
_Node = tuple[trace.Span, Any, Any, Any]


class _Bridge:
    """The span hooks (:func:`managedloop.telemetry.attach_span`): spans in, OTel spans and
    measurements out.

    Each span kind has a start and a stop hook of its own (no dispatch per event), the
    attributes a span shares with the other turns or calls of its shape are built once
    (``_shapes``), and a hook reads the span's own metadata: no event dict is merged for
    it. On the API's no-op meter no measurement is recorded (``metrics`` off).
    """

    def __init__(
        self, tracer: trace.Tracer, meter: metrics.Meter, capture: bool, record: bool
    ) -> None:
        self.tracer = tracer
        self.capture = capture
        self.record = record
        # The conventions' bucket boundaries (the SDK's default ones, 0-10,000, would put
        # nearly every duration in seconds into the first bucket); semconv's create_*
        # helpers pass none, so the histograms are made here with its names.
        self.tokens = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.duration = meter.create_histogram(
            gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.tool_duration = meter.create_histogram(
            TOOL_DURATION,
            unit="s",
            description="Duration of custom tool calls.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        # (kind, GenAI provider, model or tool) -> its shape (see _shape)
        self._shapes: dict[tuple[str, str, Any], _Shape] = {}
        self._tool_names: set[Any] = set()  # the names the tool metric has kept (see _OTHER)

    def hooks(self) -> dict[str, tuple[telemetry.SpanStart, telemetry.SpanStop]]:
        return {
            "session.request": (self.request_start, self.request_stop),
            "session.turn": (self.turn_start, self.turn_stop),
            "tool": (self.tool_start, self.tool_stop),
        }

    def _shape(self, kind: str, provider: str, key: Any) -> _Shape:
        """(span name, start attributes, metric attributes, span kind) of a turn or a tool
        call."""
        attrs: dict[str, Any]
        if kind == "session.turn":
            attrs = {_OPERATION: _CHAT, _PROVIDER: provider}
            if key is not None:
                attrs[_MODEL] = key
            name = f"{_CHAT} {key}" if key else _CHAT
            span_kind = SpanKind.CLIENT
            point = _metric_attributes(attrs)
            metric: Any = (
                point,
                {**point, gen_ai.GEN_AI_TOKEN_TYPE: _INPUT},
                {**point, gen_ai.GEN_AI_TOKEN_TYPE: _OUTPUT},
            )
        else:  # a tool
            attrs = {_OPERATION: _EXECUTE_TOOL, _PROVIDER: provider}
            if key is not None:
                attrs[_TOOL_NAME] = key
            attrs[gen_ai.GEN_AI_TOOL_TYPE] = "function"
            name = f"{_EXECUTE_TOOL} {key}" if key else _EXECUTE_TOOL
            span_kind = SpanKind.INTERNAL
            metric = _metric_attributes(attrs)
            if key is not None and key not in self._tool_names:
                if len(self._tool_names) < _TOOL_NAMES_MAX:
                    self._tool_names.add(key)
                else:
                    metric = {**metric, _TOOL_NAME: _OTHER}
        if len(self._shapes) >= _SHAPES_MAX:
            self._shapes.clear()
        shape = self._shapes[kind, provider, key] = (name, attrs, metric, span_kind)
        return shape

    # -- the request ---------------------------------------------------------------------

    def request_start(self, meta: Mapping[str, Any], _tags: Any) -> _Request:
        host, model, agent = meta.get("provider"), meta.get("model"), meta.get("agent")
        provider = meta.get("gen_ai_provider") or _provider_name(host, model)
        attrs: dict[str, Any] = {_OPERATION: _INVOKE_AGENT, _PROVIDER: provider}
        for key, value in (
            (_CONVERSATION, meta.get("session_id")),
            (gen_ai.GEN_AI_AGENT_NAME, agent),
            (gen_ai.GEN_AI_AGENT_ID, meta.get("agent_id")),
            (_MODEL, model),
        ):
            if value is not None:
                attrs[key] = value
        name = f"{_INVOKE_AGENT} {agent}" if agent else _INVOKE_AGENT
        kind = SpanKind.CLIENT if host in _REMOTE_AGENT else SpanKind.INTERNAL
        parent = otel_context.get_current()
        span = self.tracer.start_span(name, parent, kind, attrs)
        request = _Request(span, parent, _metric_attributes(attrs), provider, model)
        request.token = otel_context.attach(trace.set_span_in_context(span, parent))
        request.var_token = _request.set(request)
        return request

    def request_stop(
        self, request: _Request, seconds: float, extra: Mapping[str, Any], exc: Any
    ) -> None:
        _request.reset(request.var_token)
        otel_context.detach(request.token)
        metric = request.metric
        if exc is not None:
            error = self._failed(request.span, exc)
            if self.record:
                self.duration.record(seconds, {**metric, ERROR_TYPE: error}, request.parent)
            return
        attrs = _stop_attributes(extra)
        session_id = extra.get("session_id")
        if session_id is not None:
            attrs[_CONVERSATION] = session_id
        # A run learns the model and the API the host sends after its start.
        model = extra.get("model")
        if isinstance(model, str) and model != request.model:
            attrs[_MODEL] = model
            metric = {**metric, _MODEL: model}
        provider = extra.get("gen_ai_provider") or request.provider
        if provider != metric[_PROVIDER]:
            attrs[_PROVIDER] = provider
            metric = {**metric, _PROVIDER: provider}
        _end(request.span, attrs, None)
        if self.record:
            self.duration.record(seconds, metric, request.parent)

    @staticmethod
    def _failed(span: trace.Span, exc: BaseException) -> str:
        """End ``span`` with the error type of ``exc`` (its stable code, else its type's
        name; never its message); that error type."""
        code = getattr(exc, "code", None)
        error = code if isinstance(code, str) and code else type(exc).__name__
        _end(span, {ERROR_TYPE: error}, error)
        return error

    # -- turns and tool calls: for every model call and tool call ----------------------

    def turn_start(self, meta: Mapping[str, Any], _tags: Any) -> _Node:
        model = meta.get("model")
        provider = meta.get("gen_ai_provider")
        if provider is None:
            provider = _provider_name(meta.get("provider"), model)
        request = _request.get()
        if request is not None and request.provider != provider:
            request.provider = provider  # the request's tool calls name it too
        shape = self._shapes.get(("session.turn", provider, model))
        if shape is None:
            shape = self._shape("session.turn", provider, model)
        attrs = shape[1].copy()
        session_id = meta.get("session_id")
        if session_id is not None:
            attrs[_CONVERSATION] = session_id
        if self.capture:
            messages = _input_messages(meta.get("input"))
            if messages is not None:
                attrs[gen_ai.GEN_AI_INPUT_MESSAGES] = messages
        return self._open(shape, attrs)

    def _open(self, shape: Any, attrs: dict[str, Any]) -> _Node:
        """Start ``shape``'s span (name, kind) under the current context and make it current;
        the node keeps what its stop needs (the span, the token, the parent, the metric
        attributes)."""
        parent = otel_context.get_current()
        # Positional: the API's order, and cheaper than keywords on every span.
        span = self.tracer.start_span(shape[0], parent, shape[3], attrs)
        return span, otel_context.attach(trace.set_span_in_context(span, parent)), parent, shape[2]

    def turn_stop(self, node: _Node, seconds: float, result: TurnResult, exc: Any) -> None:
        """The turn's span ends with what its :class:`TurnResult` says (the session hands
        the result itself, see :func:`managedloop.telemetry.close_span`)."""
        span, token, context, metric = node
        otel_context.detach(token)
        if exc is not None:
            error = self._failed(span, exc)
            if self.record:
                self.duration.record(seconds, {**metric[0], ERROR_TYPE: error}, context)
            return
        reason = result.stop_reason
        if type(reason) is not str or not reason:  # the usual case is a string
            reason = _finish_reason(reason, result.terminal._value_)
        attrs: dict[str, Any] = {_FINISH_REASONS: (reason,)} if reason is not None else {}
        usage = result.usage
        if usage is not None:
            inputs, outputs = usage.input_tokens, usage.output_tokens
            attrs[_INPUT_TOKENS] = inputs
            attrs[_OUTPUT_TOKENS] = outputs
            # Cache counts only where a host reported some (the others have no cache).
            if usage.cache_read_input_tokens:
                attrs[_CACHE_READ_TOKENS] = usage.cache_read_input_tokens
            if usage.cache_creation_input_tokens:
                attrs[_CACHE_WRITE_TOKENS] = usage.cache_creation_input_tokens
        if self.capture:
            attrs[gen_ai.GEN_AI_OUTPUT_MESSAGES] = _output_messages(result)
        if attrs:
            span.set_attributes(attrs)
        span.end()
        if not self.record:
            return
        self.duration.record(seconds, metric[0], context)
        if usage is not None:
            self.tokens.record(inputs, metric[1], context)
            self.tokens.record(outputs, metric[2], context)

    def tool_start(self, meta: Mapping[str, Any], tags: Mapping[str, Any] | None) -> _Node:
        request = _request.get()
        if request is not None:
            provider = request.provider
        else:  # instrumented while the request ran
            provider = _provider_name(tags.get("provider") if tags else None, None)
        name = meta.get("tool")
        shape = self._shapes.get(("tool", provider, name))
        if shape is None:
            shape = self._shape("tool", provider, name)
        attrs = shape[1].copy()
        session_id = meta.get("session_id")
        if session_id is not None:
            attrs[_CONVERSATION] = session_id
        call_id = meta.get("tool_use_id")
        if call_id:
            attrs[_TOOL_CALL_ID] = call_id
        if self.capture and "arguments" in meta:
            attrs[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = _json(meta["arguments"])
        return self._open(shape, attrs)

    def tool_stop(self, node: _Node, seconds: float, result: ToolResult, exc: Any) -> None:
        """The call's span ends with what its ``ToolResult`` says (the session hands the
        result itself, see :func:`managedloop.telemetry.close_span`)."""
        span, token, context, metric = node
        otel_context.detach(token)
        if exc is not None:
            failure = self._failed(span, exc)
            if self.record:
                self.tool_duration.record(seconds, {**metric, ERROR_TYPE: failure}, context)
            return
        if result.is_error or self.capture:
            attrs: dict[str, Any] = {}
            error = None
            if result.is_error:
                error = attrs[ERROR_TYPE] = "tool_error"
                metric = {**metric, ERROR_TYPE: error}
            if self.capture:
                attrs[gen_ai.GEN_AI_TOOL_CALL_RESULT] = str(result.text)
            _end(span, attrs, error)
        else:  # the usual call: no stop attributes
            span.end()
        if self.record:
            self.tool_duration.record(seconds, metric, context)


_lock = threading.Lock()
_attachments: list[telemetry.Attachment] = []
_on = False  # instrument() in force (on the no-op providers, with nothing attached)


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
    version = _version()
    tracer = trace.get_tracer("managedloop", version, tracer_provider=tracer_provider)
    meter = metrics.get_meter("managedloop", version, meter_provider=meter_provider)
    # On the API's no-op providers (not the global proxies, which an SDK set later makes
    # real) there is nothing to record: no span, no measurement, and no hook is attached,
    # so a session pays nothing. A no-op meter alone: spans without measurements.
    record = not isinstance(meter, metrics.NoOpMeter)
    bridge = _Bridge(tracer, meter, bool(capture_content), record)
    with _lock:
        global _on
        _detach()
        _on = True
        if record or not isinstance(tracer, trace.NoOpTracer):
            _attachments.extend(
                telemetry.attach_span(name, start, stop)
                for name, (start, stop) in bridge.hooks().items()
            )
        telemetry.set_capture_content(bool(capture_content))


def _detach() -> bool:
    global _on
    was, _on = _on, False
    for attachment in _attachments:
        telemetry.detach(attachment)
    _attachments.clear()
    return was


def uninstrument() -> bool:
    """Stop emitting spans and metrics; ``False`` if nothing was instrumented."""
    with _lock:
        if not _detach():
            return False
        telemetry.set_capture_content(False)
        return True


def instrumented() -> bool:
    """Whether :func:`instrument` is in force."""
    return _on
