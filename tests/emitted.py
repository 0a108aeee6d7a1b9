"""Capture the telemetry events a block emits: ``with emitted() as got: ...``.

One helper for the tests outside ``tests/telemetry`` (which keeps its own ``Recorder``) that
check an event's presence, tags or secrets: each used to attach its own listener and detach
it in a ``finally``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from managedloop import telemetry

Event = tuple[str, dict[str, Any], dict[str, Any]]
"""One event: its full name (``managedloop.…``), its measurements, its metadata."""


@contextmanager
def emitted(names: list[str] | None = None) -> Iterator[list[Event]]:
    """Every telemetry event (or only those ``names``) emitted inside the block, in order;
    the listener is detached when the block ends, however it ends."""
    got: list[Event] = []
    attachment = telemetry.attach(lambda n, m, meta: got.append((n, dict(m), dict(meta))), names)
    try:
        yield got
    finally:
        telemetry.detach(attachment)
