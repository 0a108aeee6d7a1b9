"""Telemetry: named events with measurements and metadata, delivered to attached listeners.

The event tree (names are dotted, prefixed ``managedloop.``)::

    request.start|stop|exception              every Claude API call (method, path, status)
    agent_core.request.start|stop|exception   every AgentCore call (operation, service, ...)
    agent_core.provision.poll|stop|exception  provisioning waits (harness_id, status, phase)
    stream.connected|event|done|error         host event streams (session_id, type, usage)
    tool.start|stop|exception                 each custom tool call (tool, session_id, is_error)
    session.tool_uses                         every turn (turn, tool_use_ids, tool_use_count)
    session.terminal                          every terminal (terminal, reason)

Listeners are plain callables ``listener(name, measurements, metadata)``. With none attached,
:func:`emit` costs one dict lookup, so the hot path pays nothing for telemetry it does not
use. Caller tags (``telemetry_metadata=``) are merged under the library's own keys: library
keys win. A raising listener is logged and the event goes on to the next listener; the
listener stays attached and the session never breaks. There is no built-in OpenTelemetry
bridge yet (the ``otel`` extra only installs the API): attach a listener that opens spans.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["EVENTS", "Listener", "attach", "detach", "emit", "enabled", "span", "span_enabled"]

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
    )
)

Listener = Callable[[str, Mapping[str, Any], Mapping[str, Any]], None]


@dataclass(frozen=True, slots=True)
class Attachment:
    """Handle returned by :func:`attach`; pass it to :func:`detach`."""

    listener: Listener
    events: frozenset[str] | None


_lock = threading.Lock()
# Copy-on-write: emit() reads a dict that is replaced, never mutated, so it needs no lock.
_by_event: dict[str, tuple[Attachment, ...]] = {}
_attachments: tuple[Attachment, ...] = ()


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
    """Remove a listener; ``False`` if it was not attached."""
    global _attachments
    with _lock:
        if attachment not in _attachments:
            return False
        _attachments = tuple(a for a in _attachments if a is not attachment)
        _rebuild()
    return True


def _rebuild() -> None:
    global _by_event
    _by_event = {
        name: tuple(a for a in _attachments if a.events is None or name in a.events)
        for name in EVENTS
    }
    _by_event = {k: v for k, v in _by_event.items() if v}


def enabled(name: str) -> bool:
    """Whether anything listens to ``name`` (so callers can skip building metadata)."""
    return bool(_by_event) and PREFIX + name in _by_event


def span_enabled(name: str) -> bool:
    """Whether anything listens to ``name.start``, ``name.stop`` or ``name.exception``."""
    return bool(_by_event) and (
        enabled(name + ".start") or enabled(name + ".stop") or enabled(name + ".exception")
    )


def emit(
    name: str,
    measurements: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    *,
    caller: Mapping[str, Any] | None = None,
) -> None:
    """Deliver one event. ``caller`` tags are merged first so library ``metadata`` wins."""
    listeners = _by_event.get(PREFIX + name)
    if not listeners:
        return
    meta = {**caller, **(metadata or {})} if caller else dict(metadata or {})
    for attachment in listeners:
        try:
            attachment.listener(PREFIX + name, measurements or {}, meta)
        except Exception:
            logger.exception("telemetry listener %r failed on %s", attachment.listener, name)


@contextmanager
def span(
    name: str, metadata: Mapping[str, Any], *, caller: Mapping[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """Emit ``name.start``, then ``name.stop`` or ``name.exception`` with a ``duration``.

    Yields a dict the body may fill with extra stop metadata (e.g. ``status``).
    """
    extra: dict[str, Any] = {}
    if not span_enabled(name):
        yield extra
        return
    emit(name + ".start", {"system_time": time.time()}, metadata, caller=caller)
    start = time.perf_counter()
    try:
        yield extra
    except BaseException as exc:
        emit(
            name + ".exception",
            {"duration": time.perf_counter() - start},
            {**metadata, **extra, "kind": type(exc).__name__},
            caller=caller,
        )
        raise
    emit(
        name + ".stop",
        {"duration": time.perf_counter() - start},
        {**metadata, **extra},
        caller=caller,
    )
