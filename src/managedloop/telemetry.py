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
    "capture_content",
    "detach",
    "emit",
    "enabled",
    "enter_scope",
    "exit_scope",
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
_AGENT = ("agent", "agent_id", "model")
_TOKENS = ("input_tokens", "output_tokens")
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
    "session.request.start": (("system_time",), ("agent", "agent_id", "model", *_SESSION)),
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
        ("agent", "agent_id", "model", *_SESSION, "kind", "code"),
    ),
    "session.turn.start": (("system_time",), ("turn", "model", *_SESSION)),
    "session.turn.stop": (
        ("duration",),
        ("turn", "model", *_SESSION, "terminal", "stop_reason", "tool_use_count", *_TOKENS),
    ),
    "session.turn.exception": (("duration",), ("turn", "model", *_SESSION, "kind", "code")),
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


@dataclass(frozen=True, slots=True)
class Attachment:
    """Handle returned by :func:`attach`; pass it to :func:`detach`."""

    listener: Listener
    events: frozenset[str] | None


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
    global _by_event, _on, _spans_on
    by_event = {
        short: (
            full,
            tuple(a.listener for a in _attachments if a.events is None or full in a.events),
        )
        for short, full in _FULL.items()
    }
    _by_event = {k: v for k, v in by_event.items() if v[1]}
    _on = frozenset(_by_event)
    _spans_on = frozenset(span for span, names in _PHASES.items() if _on & set(names))


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


class _Span:
    """What :func:`span` returns: a class rather than a generator context manager, because
    the session driver enters one per turn and per tool call (a generator-based one costs
    several calls more on each side; the delivery loop is inlined for the same reason)."""

    __slots__ = ("_caller", "_extra", "_meta", "_metadata", "_name", "_start", "_stops")

    def __init__(
        self, name: str, metadata: Mapping[str, Any], caller: Mapping[str, Any] | None
    ) -> None:
        self._name = name
        self._metadata = metadata
        self._caller = caller
        self._meta: dict[str, Any] | None = None

    def __enter__(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        self._extra = extra
        if self._name not in _spans_on:
            return extra
        # The metadata is merged with the tags once: the stop reuses it.
        caller, scope = self._caller, _scope.get()
        if caller and caller is not scope:
            caller = {**caller, **scope} if scope else caller
        else:
            caller = scope
        meta = self._meta = {**caller, **self._metadata} if caller else dict(self._metadata)
        phases = _PHASES[self._name]
        # The listeners of the stop and the exception as attached now: a listener detached
        # while the body runs still hears the end of what it saw start.
        self._stops = (_by_event.get(phases[1]), _by_event.get(phases[2]))
        entry = _by_event.get(phases[0])
        if entry is not None:
            full, listeners = entry
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
        meta = self._meta
        if meta is None:
            return
        measurements = {"duration": _perf_counter() - self._start}
        if exc is None:
            entry = self._stops[0]
            if entry is None:
                return
            meta = {**meta, **self._extra}  # a new dict: a listener may keep the start's
        else:
            entry = self._stops[1]
            if entry is None:
                return
            code = getattr(exc, "code", None)
            meta = {
                **meta,
                **self._extra,
                "kind": type(exc).__name__,
                "code": code if isinstance(code, str) else None,
            }
        full, listeners = entry
        for listener in listeners:
            try:
                listener(full, measurements, meta)
            except Exception:
                logger.exception("telemetry listener %r failed on %s", listener, full)


def span(
    name: str, metadata: Mapping[str, Any], *, caller: Mapping[str, Any] | None = None
) -> _Span:
    """A context manager: emit ``name.start``, then ``name.stop`` or ``name.exception``
    with a ``duration`` (the exception propagates).

    It yields a dict the body may fill with extra stop metadata (e.g. ``status``).
    """
    return _Span(name, metadata, caller)
