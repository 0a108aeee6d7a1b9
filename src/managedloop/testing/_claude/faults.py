"""Fault injection for :class:`~managedloop.testing.ClaudeEmulator`.

Every fault is deterministic and bounded: each one fires a fixed number of times at a
fixed point (an event index, a request count), so a test that uses it is repeatable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["ClaudeFaults"]


@dataclass(kw_only=True)
class ClaudeFaults:
    """What the emulator does wrong, on purpose. Mutable: tests may change it mid-run."""

    drop_stream_after: Sequence[int] = ()
    """Cut every live SSE stream of the session abruptly once it has emitted this many
    events (1 = after the first event; 0 = before the first). Each value fires once. The
    events emitted after the cut reach the event history, not the dropped stream."""
    clean_close: bool = False
    """End dropped streams with a clean end-of-body instead of an abrupt reset."""
    stale_idle: bool = False
    """After the last result of a multi-call ``requires_action`` arrives, re-emit a stale
    ``session.status_idle`` (``requires_action``) naming the last call before resuming."""
    stale_idle_early: bool = False
    """With several results in one POST: emit a stale ``requires_action`` idle naming the
    last of them right after the first result's echo (before the others' echoes), as the
    live API does when an idle re-notifies on a result whose echo has not landed yet."""
    lose_results: int = 0
    """Acknowledge the next N tool results (200, with an echo id) but drop them: the echo is
    never emitted and the call stays open. If another result of the same POST lands, the
    next ``requires_action`` idle names the lost call again; if none does, nothing follows
    at all (the session waits, silent, for a result it believes it never got)."""
    split_requires_action: bool = False
    """Name one blocking call per ``requires_action`` idle, so later idles reference tool
    uses that arrived in an earlier batch (the sliding-window shape)."""
    rate_limit: int = 0
    """Answer the next N matching requests with 429 and ``retry-after``."""
    retry_after: str = "0"
    """The ``retry-after`` header value sent with injected 429s (seconds)."""
    server_errors: int = 0
    """Answer the next N matching requests with ``server_error_status`` (before handling)."""
    server_error_status: int = 500
    accept_then_fail: int = 0
    """For the next N event sends: apply the events, then answer 500 (an ambiguous failure:
    the client cannot tell whether the send landed)."""
    fault_path: str | None = None
    """Restrict ``rate_limit`` / ``server_errors`` to requests whose path contains this
    (``None``: every request except the event stream)."""
    fault_method: str | None = None
    """Restrict ``rate_limit`` / ``server_errors`` to this HTTP method."""
    event_delay: float = 0.0
    """Seconds between two events of a run (a slow stream)."""
    terminate_after: int | None = None
    """Terminate the session (``session.status_terminated``) once it has emitted this many
    events."""
    heartbeat: float | None = None
    """Send an SSE comment line this often while a stream is quiet."""
    before_request: Callable[[str, str], None] | None = None
    """Called as ``before_request(method, path)`` on the emulator's thread when a request
    arrives, after its credentials were checked and before any other fault applies (e.g.
    to rotate a bearer-token file between two attempts of one call)."""
    used_drops: set[int] = field(default_factory=set)
    """Drop points already fired (bookkeeping)."""

    def matches(self, method: str, path: str) -> bool:
        if self.fault_method is not None and method.upper() != self.fault_method.upper():
            return False
        if self.fault_path is None:
            return not path.endswith("/events/stream")
        return self.fault_path in path
