"""The contract between the session loop and a loop host.

A :class:`Provider` is configured once (clients, ids, options) and opens
:class:`Connection` s. A connection turns one :data:`TurnInput` into the raw events of one
turn, ending at the host's turn boundary. The loop never asks whether the host streams
(Claude: a long-lived SSE stream read by a task inside the connection) or answers
request/response (AgentCore, Local: one call per turn).

Invariants a connection must keep (the loop relies on them):

* ``turn()`` yields every raw event of the turn, in order, each once, and returns at the
  boundary; a stream drop that the connection can recover from (reconnect, page the
  history, drop what it already yielded) stays inside ``turn()``;
* when a request/response host retries an attempt that already yielded events, it yields
  :data:`RESTART` first: the loop then discards the turn's buffer (events already handed
  to ``handle_event`` stay delivered: live delivery is at-least-once, while
  ``SessionResult.events`` is exactly-once);
* ``normalize()`` is pure and keeps the raw events verbatim in ``TurnResult.events``;
* a connection may yield :class:`TextDelta` chunks between raw events (streamed text that
  has no raw event of its own);
* cancellation of ``turn()`` (a timeout, ``close()``) tears down the in-flight request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from managedloop.errors import UnsupportedError
from managedloop.results import Outcome, RawEvent, ToolResult, ToolUse, TurnResult

if TYPE_CHECKING:
    from managedloop.provisioning.specs import AgentSpec
    from managedloop.tools import ToolDefinition

__all__ = [
    "RESTART",
    "Connection",
    "ConnectionBase",
    "DefineOutcome",
    "OpenRequest",
    "Provider",
    "RawInput",
    "TextDelta",
    "ToolResults",
    "TurnInput",
    "TurnRestart",
    "UserMessage",
]


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A user message (the kickoff prompt or a follow-up)."""

    text: str
    reprompt: bool = False
    """A re-prompt inside the current request (the terminal-tool reminder), not a new
    request: per-request host state (Local's guards and call count) carries on."""


@dataclass(frozen=True, slots=True)
class ToolResults:
    """Results for the custom tool uses the host is waiting on. Empty only after a turn
    with ``TurnResult.host_answered`` (the host answered its calls itself: ask again)."""

    tool_uses: Sequence[ToolUse]
    results: Sequence[ToolResult]


@dataclass(frozen=True, slots=True)
class DefineOutcome:
    """Kick off a graded session with an outcome (hosts with ``supports_outcomes``)."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class RawInput:
    """Pre-built raw host events, sent verbatim (streaming hosts only)."""

    events: Sequence[dict[str, Any]]


TurnInput = UserMessage | ToolResults | DefineOutcome | RawInput


class TurnRestart:
    """Marker yielded by ``turn()`` when the host retries an attempt (see module doc)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "RESTART"


RESTART = TurnRestart()


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A streamed text chunk that is not itself a raw event (e.g. Chat Completions SSE).

    The loop hands it to ``handle_event`` as ``{"type": "managedloop.text_delta", ...}``
    and does not record it in ``SessionResult.events``.
    """

    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class OpenRequest:
    """Everything the loop knows when it opens a connection."""

    spec: AgentSpec | None = None
    """The agent spec when ``agent=`` was a spec; ``None`` when it was a handle or id."""
    agent: Any = None
    """``agent=`` exactly as given (a spec, a provisioned handle, or a raw id)."""
    tools: Sequence[ToolDefinition] = ()
    """Custom tools the host may call (their implementations stay in this process)."""
    session_id: str | None = None
    """Reattach to this existing session instead of creating one."""
    transcript: list[dict[str, Any]] | None = None
    """Client-held history to reattach (hosts that keep history client-side)."""
    max_turns: int = 50
    metadata: dict[str, Any] = field(default_factory=dict)
    """Caller telemetry tags, for the events the connection emits itself."""


@runtime_checkable
class Connection(Protocol):
    """One session on one host."""

    session_id: str | None
    resumed: bool
    """``True`` when ``open`` attached to an existing session rather than creating one."""
    pending_tool_uses: list[ToolUse]
    """On a resumed session: custom tool uses still waiting for a result."""

    def turn(self, input: TurnInput) -> AsyncIterator[RawEvent | TurnRestart | TextDelta]: ...

    def normalize(self, events: Sequence[RawEvent]) -> TurnResult: ...

    def text_delta(self, event: RawEvent) -> str | None: ...

    def transcript(self) -> list[dict[str, Any]] | None: ...

    async def interrupt(self) -> None: ...

    async def aclose(self) -> None: ...


class ConnectionBase:
    """Defaults for the optional parts of :class:`Connection`."""

    session_id: str | None = None
    resumed: bool = False
    pending_tool_uses: list[ToolUse]

    def __init__(self) -> None:
        self.pending_tool_uses = []

    def text_delta(self, event: RawEvent) -> str | None:
        return None

    def transcript(self) -> list[dict[str, Any]] | None:
        return None

    async def interrupt(self) -> None:
        raise UnsupportedError("this host does not support interrupts")

    async def aclose(self) -> None:
        return None


@runtime_checkable
class Provider(Protocol):
    """A loop host, configured once."""

    name: ClassVar[str]
    """Short host name: ``"local"``, ``"claude"``, ``"agentcore"``."""
    supports_outcomes: ClassVar[bool]
    supports_raw_events: ClassVar[bool]

    async def open(self, request: OpenRequest) -> Connection: ...
