"""Telemetry: named events with measurements and metadata, delivered to attached listeners.

The event tree (names are dotted, prefixed ``managedloop.``)::

    request.start|stop|exception              every Claude API call (method, path, status)
    agent_core.request.start|stop|exception   every AgentCore call (operation, service, ...)
    agent_core.provision.poll|stop|exception  provisioning waits (harness_id, status, phase)
    stream.connected|event|done|error         host event streams (session_id, type, usage)
    tool.start|stop|exception                 each custom tool call (tool, session_id, is_error)
    session.tool_uses                         every turn (turn, tool_use_ids, session_id, ...)
    session.terminal                          every terminal (terminal, reason)
    session.output                            each typed output checked (strategy, valid)
    session.request.start|stop|exception      each request of a session, open to terminal
    session.turn.start|stop|exception         each host turn (one model call on Local)

(the full table, every measurement and metadata key, is :data:`TABLE`).

Listeners are plain callables ``listener(name, measurements, metadata)``. With none attached,
:func:`emit` costs one dict lookup, so the hot path pays nothing for telemetry it does not
use. Caller tags (``telemetry_metadata=``) are merged under the library's own keys: library
keys win. A raising listener is logged and the event goes on to the next listener; the
listener stays attached and the session never breaks.

Caller tags reach every event a session causes, whichever layer emits it (a host's HTTP
client included), through :func:`session_scope`: the session driver sets the session's
tags in a context variable for the time it works, so an emitter needs no ``caller=``
plumbing. Context variables follow tasks and anyio worker threads, so an event emitted in
a task the session started, or in a worker thread, carries them too.

The session emits its turns' and tool calls' spans with :func:`open_span` and
:func:`close_span` (two calls per span, no context manager; a lone span hook, what
:mod:`managedloop.otel` attaches, is called with nothing else done, and gets the turn's or
call's result object as its stop); every other span is a ``with`` :func:`span`. What a
listener receives is the same either way (:data:`TABLE`).

Listeners run synchronously in the emitting task, and the ``start`` and ``stop`` (or
``exception``) of one span are emitted in the same context: :mod:`managedloop.otel` relies
on that to make its span the current one while the body runs. Message and tool content
(``arguments``, ``result``, ``input``, ``output``, and a turn's ``tool_calls``: id, name and
arguments of each call the model asked for) is in the metadata only while
:func:`set_capture_content` is on (``managedloop.otel.instrument(capture_content=True)``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EVENTS",
    "TABLE",
    "Listener",
    "attach",
    "attach_span",
    "capture_content",
    "close_span",
    "detach",
    "emit",
    "enabled",
    "enter_scope",
    "exit_scope",
    "open_span",
    "session_scope",
    "set_capture_content",
    "span",
    "span_enabled",
]

logger = logging.getLogger("managedloop.telemetry")

PREFIX = "managedloop."

EVENTS: tuple[str, ...] = tuple(
    PREFIX + name
    for name in (
        "request.start",
        "request.stop",
        "request.exception",
        "agent_core.request.start",
        "agent_core.request.stop",
        "agent_core.request.exception",
        "agent_core.provision.poll",
        "agent_core.provision.stop",
        "agent_core.provision.exception",
        "stream.connected",
        "stream.event",
        "stream.done",
        "stream.error",
        "tool.start",
        "tool.stop",
        "tool.exception",
        "session.tool_uses",
        "session.terminal",
        "session.output",
        "session.request.start",
        "session.request.stop",
        "session.request.exception",
        "session.turn.start",
        "session.turn.stop",
        "session.turn.exception",
    )
)

# What each event carries, beyond the caller's tags: (measurements, metadata keys). Keys a
# host cannot know are present with ``None`` (``status`` of a request that never got an
# answer); ``(+ stop)`` keys of a span's stop are also on its exception, which adds
# ``kind`` (the exception's type name) and ``code`` (its stable code, when it has one).
# The tests of every host pin their events against this table.
_REQUEST = ("method", "path")
_AC_REQUEST = ("operation", "service", "method", "path")
_SESSION = ("provider", "session_id")
# ``gen_ai_provider``: the API the host's turns speak, as the OpenTelemetry GenAI
# conventions name it (``openai``, ``anthropic``, ``aws.bedrock``), as the connection reports
# it (``Connection.gen_ai_provider``; ``None``: the host does not say, or, on a run's
# request start, the connection is not open yet).
_AGENT = ("agent", "agent_id", "model", "gen_ai_provider")
_TOKENS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "cost_usd",  # None unless the host reports cost (Claude's session.usage)
)
TABLE: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "request.start": (("system_time",), _REQUEST),
    "request.stop": (("duration",), (*_REQUEST, "status")),
    "request.exception": (("duration",), (*_REQUEST, "kind")),
    "agent_core.request.start": (("system_time",), _AC_REQUEST),
    "agent_core.request.stop": (("duration",), (*_AC_REQUEST, "status")),
    "agent_core.request.exception": (("duration",), (*_AC_REQUEST, "kind")),
    "agent_core.provision.poll": (("elapsed_ms", "poll_n"), ("harness_id", "status", "phase")),
    "agent_core.provision.stop": (("duration_ms", "polls"), ("harness_id", "phase", "result")),
    "agent_core.provision.exception": (("duration_ms",), ("harness_id", "phase", "kind", "result")),
    "stream.connected": ((), ("session_id",)),
    "stream.event": ((), ("session_id", "type")),  # + usage when the event has one
    "stream.done": ((), ("session_id",)),
    "stream.error": ((), ("session_id", "reason")),
    "tool.start": (("system_time",), ("tool", "tool_use_id", *_SESSION)),
    "tool.stop": (("duration",), ("tool", "tool_use_id", *_SESSION, "is_error")),
    "tool.exception": (("duration",), ("tool", "tool_use_id", *_SESSION, "kind")),
    "session.tool_uses": (("tool_use_count",), ("turn", "tool_use_ids", *_SESSION)),
    "session.terminal": ((), ("terminal", "reason", *_SESSION)),
    "session.output": (("error_count",), ("strategy", "valid", "turn", *_SESSION)),
    "session.request.start": (("system_time",), (*_AGENT, *_SESSION)),
    "session.request.stop": (
        ("duration",),
        (
            *_AGENT,
            *_SESSION,
            "terminal",
            "stop_reason",
            "reason",
            "turns",
            *_TOKENS,
            "output_strategy",
        ),
    ),
    "session.request.exception": (
        ("duration",),
        (*_AGENT, *_SESSION, "kind", "code"),
    ),
    "session.turn.start": (("system_time",), ("turn", "model", "gen_ai_provider", *_SESSION)),
    "session.turn.stop": (
        ("duration",),
        (
            "turn",
            "model",
            "gen_ai_provider",
            *_SESSION,
            "terminal",
            "stop_reason",
            "tool_use_count",
            *_TOKENS,
        ),
    ),
    "session.turn.exception": (
        ("duration",),
        ("turn", "model", "gen_ai_provider", *_SESSION, "kind", "code"),
    ),
}

Listener = Callable[[str, Mapping[str, Any], Mapping[str, Any]], None]

# Short name -> full name, and span name -> (its start, stop, exception) full names: built
# once, so emitting an event concatenates no strings.
_FULL: dict[str, str] = {name.removeprefix(PREFIX): name for name in EVENTS}
_PHASES: dict[str, tuple[str, str, str]] = {
    name[: -len(".start")]: (
        name,
        name[: -len("start")] + "stop",
        name[: -len("start")] + "exception",
    )
    for name in _FULL
    if name.endswith(".start")
}


# A span hook (see attach_span): start(metadata, tags) -> a state, or None to skip this span;
# stop(state, duration, the stop (the body's result or its stop metadata), exception or None).
SpanStart = Callable[[Mapping[str, Any], Mapping[str, Any] | None], Any]
SpanStop = Callable[[Any, float, Any, BaseException | None], None]


@dataclass(frozen=True, slots=True)
class Attachment:
    """Handle returned by :func:`attach` (or :func:`attach_span`); pass it to :func:`detach`."""

    listener: Listener | None
    events: frozenset[str] | None
    hook: tuple[str, SpanStart, SpanStop] | None = None


_lock = threading.Lock()
# The tags of the session working in this context (see session_scope); emit merges them.
_scope: ContextVar[Mapping[str, Any] | None] = ContextVar("managedloop_telemetry", default=None)
_content = False
# Copy-on-write: emit() reads structures that are replaced, never mutated, so it needs no
# lock. Keyed by short name ("tool.stop"): (full name, listeners) of each event that has
# listeners.
_by_event: dict[str, tuple[str, tuple[Listener, ...]]] = {}
_on: frozenset[str] = frozenset()  # the short names with a listener (enabled)
_spans_on: frozenset[str] = frozenset()  # the span names with a listener (span_enabled)
# Span name -> (its start, stop and exception entries of _by_event, its hooks), for each
# span with a listener or a hook: one lookup per span entered.
_spans: dict[str, tuple[Any, Any, Any, tuple[tuple[SpanStart, SpanStop], ...]]] = {}
# Span name -> its one hook, for each span with exactly one hook and no listener (what
# managedloop.otel attaches): open_span and close_span call it with nothing else to do.
_solo: dict[str, tuple[SpanStart, SpanStop]] = {}
_attachments: tuple[Attachment, ...] = ()
# A clock patchable in tests (durations); system_time stays the wall clock.
_perf_counter = time.perf_counter


def attach(listener: Listener, events: list[str] | None = None) -> Attachment:
    """Call ``listener`` for ``events`` (default: all). Unknown event names raise ValueError."""
    global _attachments
    if events is not None:
        unknown = [e for e in events if e not in EVENTS]
        if unknown:
            raise ValueError(f"unknown telemetry event(s): {unknown}")
    attachment = Attachment(listener, frozenset(events) if events is not None else None)
    with _lock:
        _attachments = (*_attachments, attachment)
        _rebuild()
    return attachment


def attach_span(name: str, start: SpanStart, stop: SpanStop) -> Attachment:
    """Call ``start(metadata, tags)`` when a :func:`span` named ``name`` (``"tool"``,
    ``"session.turn"``...) starts, and ``stop(state, duration, stop, exception)`` when it
    ends, with what ``start`` returned (``None``: nothing to stop).

    The hook of a listener that keeps state per span (``managedloop.otel``): ``metadata`` is
    the span's own metadata, not merged with the caller's tags (``tags``, the
    :func:`session_scope` tags or the span's ``caller``, carry the host's ``provider``; a
    live dict: read it, do not keep it). ``stop`` is what the body made: the session emits
    its ``session.turn`` and ``tool`` spans with :func:`open_span` and :func:`close_span`,
    and their stop is the turn's :class:`~managedloop.TurnResult` and the call's
    ``ToolResult`` (``None`` with an exception); for a :func:`span` entered with ``with``
    (``session.request``, the hosts' ``request`` spans), the dict its body filled (live:
    read it, do not keep it). No dict is merged and no event is built for a hook. Both run
    in the span's context, like a listener; what either raises is logged and the span goes
    on."""
    global _attachments
    if name not in _PHASES:
        raise ValueError(f"unknown telemetry span: {name!r}")
    attachment = Attachment(None, frozenset(), (name, start, stop))
    with _lock:
        _attachments = (*_attachments, attachment)
        _rebuild()
    return attachment


def detach(attachment: Attachment) -> bool:
    """Remove a listener; ``False`` if it was not attached. A :func:`span` that started
    while it was attached still delivers its stop (or exception) to it."""
    global _attachments
    with _lock:
        if attachment not in _attachments:
            return False
        _attachments = tuple(a for a in _attachments if a is not attachment)
        _rebuild()
    return True


def _rebuild() -> None:
    global _by_event, _on, _spans_on, _spans, _solo
    by_event: dict[str, tuple[str, tuple[Listener, ...]]] = {}
    for short, full in _FULL.items():
        listeners = tuple(
            a.listener
            for a in _attachments
            if a.listener is not None and (a.events is None or full in a.events)
        )
        if listeners:
            by_event[short] = (full, listeners)
    spans: dict[str, tuple[Any, Any, Any, tuple[tuple[SpanStart, SpanStop], ...]]] = {}
    for span, names in _PHASES.items():
        hooks = tuple((a.hook[1], a.hook[2]) for a in _attachments if a.hook and a.hook[0] == span)
        start, stop, exception = (by_event.get(name) for name in names)
        if hooks or start or stop or exception:
            spans[span] = (start, stop, exception, hooks)
    _solo = {
        span: hooks[0]
        for span, (start, stop, exception, hooks) in spans.items()
        if len(hooks) == 1 and start is None and stop is None and exception is None
    }
    _by_event, _spans = by_event, spans
    _on = frozenset(by_event)
    _spans_on = frozenset(spans)


def enabled(name: str) -> bool:
    """Whether anything listens to ``name`` (so callers can skip building metadata)."""
    return name in _on


def span_enabled(name: str) -> bool:
    """Whether anything listens to ``name.start``, ``name.stop`` or ``name.exception``."""
    return name in _spans_on


def capture_content() -> bool:
    """Whether events carry message and tool content (see :func:`set_capture_content`)."""
    return _content


def set_capture_content(on: bool) -> None:
    """Put message and tool content into the events that have some (off by default:
    content is the user's data, and an event listener may ship it anywhere)."""
    global _content
    _content = bool(on)


@contextmanager
def session_scope(caller: Mapping[str, Any]) -> Iterator[None]:
    """Within the block, every event emitted in this context (and in tasks and worker
    threads started from it) carries ``caller``'s tags under its own keys."""
    token = _scope.set(caller)
    try:
        yield
    finally:
        _scope.reset(token)


def enter_scope(caller: Mapping[str, Any]) -> Token[Mapping[str, Any] | None]:
    """:func:`session_scope` without a context manager (the driver's hot path): pass the
    token to :func:`exit_scope` in a ``finally``."""
    return _scope.set(caller)


def exit_scope(token: Token[Mapping[str, Any] | None]) -> None:
    _scope.reset(token)


def _tags(caller: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``caller``'s tags under the :func:`session_scope` tags in force (``None``: none).

    The driver passes the session's tags as ``caller`` inside the session's own scope: the
    same object, merged with nothing."""
    scope = _scope.get()
    if caller is None or caller is scope or not caller:
        return scope
    return {**caller, **scope} if scope else caller


def _deliver(
    full: str,
    listeners: tuple[Listener, ...],
    measurements: Mapping[str, Any],
    meta: Mapping[str, Any],
) -> None:
    for listener in listeners:
        try:
            listener(full, measurements, meta)
        except Exception:
            logger.exception("telemetry listener %r failed on %s", listener, full)


def emit(
    name: str,
    measurements: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    *,
    caller: Mapping[str, Any] | None = None,
) -> None:
    """Deliver one event. ``caller``'s tags, then the :func:`session_scope` tags in force
    (the session's: the caller's plus the library's ``provider``), are merged first, so
    library ``metadata`` wins."""
    entry = _by_event.get(name)
    if entry is None:
        return
    tags = _tags(caller)
    meta = {**tags, **(metadata or {})} if tags else dict(metadata or {})
    _deliver(entry[0], entry[1], measurements or {}, meta)


class span:  # noqa: N801 - called like the function it replaced
    """A context manager: emit ``name.start``, then ``name.stop`` or ``name.exception``
    with a ``duration`` (the exception propagates); a span hook (:func:`attach_span`) hears
    the same span without an event.

    It yields a dict the body may fill with extra stop metadata (e.g. ``status``).

    A class, not a function returning one or a generator context manager: the session
    driver enters one per turn and per tool call, and each layer costs a call on both
    sides (the delivery loops are inlined for the same reason)."""

    __slots__ = ("_caller", "_entries", "_extra", "_meta", "_metadata", "_name", "_start",
                 "_state", "_states", "_stop", "_value")  # fmt: skip

    def __init__(
        self, name: str, metadata: Mapping[str, Any], *, caller: Mapping[str, Any] | None = None
    ) -> None:
        self._name = name
        self._metadata = metadata
        self._caller = caller

    def __enter__(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        self._extra = self._value = extra  # the hooks' stop: the body's dict (see close_span)
        # The listeners and hooks as attached now: a listener detached while the body
        # runs still hears the end of what it saw start.
        entries = self._entries = _spans.get(self._name)
        if entries is None:
            return extra
        start_entry, stop_entry, exception_entry, hooks = entries
        caller, scope = self._caller, _scope.get()
        self._stop = self._states = None
        if hooks:
            tags = caller if caller is not None else scope
            if len(hooks) == 1:  # the usual case (managedloop.otel): no list of states
                start, self._stop = hooks[0]
                try:
                    self._state = start(self._metadata, tags)
                except Exception:
                    logger.exception("telemetry span hook %r failed on %s", start, self._name)
                    self._stop = None
                else:
                    if self._state is None:
                        self._stop = None
            else:
                states = []
                for start, stop in hooks:
                    try:
                        state = start(self._metadata, tags)
                    except Exception:
                        logger.exception("telemetry span hook %r failed on %s", start, self._name)
                        continue
                    if state is not None:
                        states.append((stop, state))
                self._states = states
        if start_entry is None and stop_entry is None and exception_entry is None:
            self._meta = None
        else:
            # The metadata is merged with the tags once: the stop reuses it.
            if caller and caller is not scope:
                caller = {**caller, **scope} if scope else caller
            else:
                caller = scope
            meta = {**caller, **self._metadata} if caller else dict(self._metadata)
            self._meta = meta
            if start_entry is not None:
                full, listeners = start_entry
                measurements = {"system_time": time.time()}
                for listener in listeners:
                    try:
                        listener(full, measurements, meta)
                    except Exception:
                        logger.exception("telemetry listener %r failed on %s", listener, full)
        self._start = _perf_counter()
        return extra

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, _tb: object
    ) -> None:
        entries = self._entries
        if entries is None:
            return
        duration = _perf_counter() - self._start
        stop = self._stop
        if stop is not None:
            try:
                stop(self._state, duration, self._value, exc)
            except Exception:
                logger.exception("telemetry span hook %r failed on %s", stop, self._name)
        elif self._states:
            for stop, state in self._states:
                try:
                    stop(state, duration, self._value, exc)
                except Exception:
                    logger.exception("telemetry span hook %r failed on %s", stop, self._name)
        meta = self._meta
        if meta is None:
            return
        if exc is None:
            entry = entries[1]
            if entry is None:
                return
            meta = {**meta, **self._extra}  # a new dict: a listener may keep the start's
        else:
            entry = entries[2]
            if entry is None:
                return
            code = getattr(exc, "code", None)
            meta = {
                **meta,
                **self._extra,
                "kind": type(exc).__name__,
                "code": code if isinstance(code, str) else None,
            }
        measurements = {"duration": duration}
        full, listeners = entry
        for listener in listeners:
            try:
                listener(full, measurements, meta)
            except Exception:
                logger.exception("telemetry listener %r failed on %s", listener, full)


# What open_span returns for close_span: a span with its one hook's state (the hook's stop,
# the state, the start's perf_counter), a span entered for its listeners or hooks, or None
# (nothing heard its start).
Opened = tuple[SpanStop, Any, float] | span | None


def open_span(
    name: str, metadata: Mapping[str, Any], caller: Mapping[str, Any] | None = None
) -> Opened:
    """Start a :func:`span` without a context manager (the driver's turns and tool calls:
    two calls per span instead of a constructor, an ``__enter__`` and an ``__exit__``).
    Pass what it returns to :func:`close_span`, on every path. ``metadata`` may be a dict
    the caller keeps: listeners get a merged copy, and a span hook must not keep it."""
    solo = _solo.get(name)
    if solo is not None:  # one span hook, no listener (managedloop.otel)
        start, stop = solo
        try:
            state = start(metadata, caller if caller is not None else _scope.get())
        except Exception:
            logger.exception("telemetry span hook %r failed on %s", start, name)
            return None
        if state is None:
            return None
        return stop, state, _perf_counter()
    if name not in _spans:
        return None
    opened = span(name, metadata, caller=caller)
    opened.__enter__()
    return opened


def close_span(
    opened: Opened,
    stop: Any,
    exc: BaseException | None = None,
    fields: Callable[[Any], dict[str, Any]] | None = None,
) -> None:
    """End what :func:`open_span` started. ``stop`` is what the body made (the session's
    :class:`~managedloop.TurnResult` of a turn, a tool call's ``ToolResult``), handed to the
    span hooks as it is, so a hook reads the object rather than a dict built for it;
    ``fields(stop)`` (``stop`` itself when ``fields`` is ``None``: a dict) is the stop's
    metadata for the listeners (:data:`TABLE`), built only when a listener hears it.
    ``exc``: the exception the body raised (``stop`` is then ``None``; the ``exception``
    event; it is not raised here)."""
    if opened is None:
        return
    if type(opened) is tuple:
        hook, state, started = opened
        try:
            hook(state, _perf_counter() - started, stop, exc)
        except Exception:
            logger.exception("telemetry span hook %r failed", hook)
        return
    assert isinstance(opened, span)
    opened._value = stop
    if stop is None:
        opened._extra = {}
    else:
        opened._extra = fields(stop) if fields is not None else stop
    opened.__exit__(None if exc is None else type(exc), exc, None)
