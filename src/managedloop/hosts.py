"""The host contract: what a loop host implements (the public extension point).

A :class:`Provider` is configured once (clients, ids, options) and opens
:class:`Connection` s. A connection turns one :data:`TurnInput` into one turn: it yields
the turn's raw events as they arrive and ends with the turn's own :class:`TurnResult`,
normalized from what it yielded. The loop never asks whether the host streams (Claude: a
long-lived SSE stream read by a task inside the connection) or answers request/response
(AgentCore, Local: one call per turn), and never parses a raw event itself: a host is
never handed back what it yielded. ``docs/hosts.md`` writes a host from scratch (an echo
host, run by the test suite).

The items of a turn (:data:`TurnItem`): raw events (``dict``), :class:`TextDelta`,
:class:`ToolInputDelta`, :data:`RESTART` and, last, the :class:`TurnResult`.

Invariants a connection keeps (the loop relies on them; ``tests/test_hosts_contract.py``
checks each one on every host):

1. **One result, last.** ``turn()`` ends with exactly one :class:`TurnResult` and yields
   nothing after it. A turn that ends without one fails the request with
   ``ProviderError(code="host_contract")``.
2. **Nothing lost, nothing doubled.** ``turn()`` yields every raw event of the turn once,
   in order; ``TurnResult.events`` is exactly the raw events yielded since the last
   :data:`RESTART` (the same objects, in order; the loop checks the count, a mismatch is
   ``host_contract``). The loop keeps every raw event it is given and drops none: it
   de-duplicates nothing, so a host that may see an event twice (Claude's reconnect
   replays the history) drops the repeat itself, and a host may reuse an ``"id"`` across
   turns or requests freely.
3. **Restart.** When a request/response host retries an attempt that already yielded raw
   events, it yields :data:`RESTART` first: the loop discards the turn's events so far
   (events already handed to ``handle_event`` stay delivered: live delivery is
   at-least-once, while ``SessionResult.events`` is exactly-once).
4. **Text.** Streamed text goes out as :class:`TextDelta` items, the one way to stream
   text; they reach ``handle_event`` only, as ``{"type": "managedloop.text_delta",
   "text"}``, and are never recorded in ``SessionResult.events``. A host yields a delta
   after the raw event that carries the text (or, for text with no raw event of its own,
   as it arrives).
5. **One model call per turn.** The loop counts each turn against ``max_turns``, so a
   turn makes at most one model call (one host turn on a managed host).
6. **Cancellation** of ``turn()`` (a timeout, ``close()``: the loop closes the generator)
   tears down the in-flight request.
7. **Tool input.** A host that receives a tool call's arguments in pieces may yield each
   piece as a :class:`ToolInputDelta` as it arrives (optional: a host that never does
   loses nothing, and the loop never needs one). Like text deltas they are live only and
   never recorded in ``SessionResult.events``; the loop reads those of the output tool
   (``output=``, tool strategy) to stream partial typed outputs (the
   ``managedloop.output_partial`` events of ``handle_event``, ``partial_outputs()``) and
   ignores the rest; :attr:`OpenRequest.tool_input_deltas` names the tools it reads, so
   a host may skip the others' pieces. A host yields a piece after the raw event that
   carries it (or, with none of its own, as it arrives). The pieces of one call share its
   ``id`` and concatenate to the JSON text of the input its ``ToolUse`` ends with. After
   a :data:`RESTART` they start again; a host that retries a model call without one
   (Local: no raw event of the failed attempt went out) gives the retried call's pieces a
   new ``id``, so the loop starts that input again too.

Loop policy stays in the loop (:mod:`managedloop.session`): the turn budget, turn guards,
token budgets, terminal-tool re-prompts and at-most-once tool runs. A host only learns
what it must act on: :attr:`UserMessage.final_turn` / :attr:`ToolResults.final_turn` say
the budget allows no model call after this one (Local then tells the model), and
:attr:`UserMessage.reprompt` says a message belongs to the current request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from managedloop.errors import UnsupportedError
from managedloop.outcome import Outcome
from managedloop.results import (
    Approve,
    Deny,
    Pending,
    RawEvent,
    Terminal,
    ToolResult,
    ToolUse,
    TurnResult,
    Usage,
    fast_builder,
)

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
    "RawEvent",
    "RawInput",
    "Terminal",
    "TextDelta",
    "ToolInputDelta",
    "ToolResult",
    "ToolResults",
    "ToolUse",
    "TurnInput",
    "TurnItem",
    "TurnRestart",
    "TurnResult",
    "Usage",
    "UserMessage",
]


@dataclass(frozen=True, slots=True)
class UserMessage:
    """A user message (the kickoff prompt or a follow-up)."""

    text: str
    reprompt: bool = False
    """A re-prompt inside the current request (the terminal-tool reminder), not a new
    request: per-request host state (Local's duplicate-call and failure guards) carries
    on."""
    final_turn: bool = False
    """The loop's turn budget (``max_turns``) allows no model call after this one."""


@dataclass(frozen=True, slots=True)
class ToolResults:
    """Results for the custom tool uses the host is waiting on. Empty only after a turn
    with ``TurnResult.host_answered`` (the host answered its calls itself: ask again)."""

    tool_uses: Sequence[ToolUse]
    results: Sequence[ToolResult]
    final_turn: bool = False
    """The loop's turn budget (``max_turns``) allows no model call after this one."""
    decisions: Mapping[str, Approve | Deny] = field(default_factory=dict)
    """Decisions on the host-run tool uses the host held (``TurnResult.host_approvals``),
    by tool-use id; empty on hosts that hold none."""


_ToolResultsB = fast_builder(ToolResults, ("tool_uses", "results", "final_turn", "decisions"))


def make_tool_results(tool_uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> ToolResults:
    """``ToolResults(tool_uses=..., results=...)``, faster (the loop builds one per tool
    turn; see :mod:`managedloop.results` on the fast constructors)."""
    answer: Any = _ToolResultsB()
    answer.tool_uses = tool_uses
    answer.results = results
    answer.final_turn = False
    answer.decisions = {}
    answer.__class__ = ToolResults
    return answer  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class DefineOutcome:
    """Kick off a graded session with an outcome (hosts with ``supports_outcomes``)."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class RawInput:
    """Pre-built raw host events, sent verbatim (hosts with ``supports_raw_events``)."""

    events: Sequence[dict[str, Any]]


TurnInput = UserMessage | ToolResults | DefineOutcome | RawInput


class TurnRestart:
    """The type of :data:`RESTART` (invariant 3 in the module docstring)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "RESTART"


RESTART = TurnRestart()
"""Yielded by ``turn()`` when the host retries an attempt that already yielded events."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A chunk of streamed assistant text (invariant 4 in the module docstring)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolInputDelta:
    """A piece of a tool call's input JSON as the model writes it (invariant 7 in the
    module docstring)."""

    id: str
    """The call this piece belongs to, the same on each of its pieces: the host's tool-use
    id where it has one by the first piece, else a key of the host's own (Local:
    ``"#<index>"`` when the server sends no id). Not always the ``ToolUse.id`` the turn
    ends with (Local renames an id the session already used)."""
    name: str
    """The tool's name, as far as the host knows it (``""``: not yet)."""
    partial_json: str
    """The next piece of the input's JSON text: a call's pieces concatenate to it."""


TurnItem = RawEvent | TextDelta | ToolInputDelta | TurnRestart | TurnResult
"""What ``turn()`` yields: raw events, text and tool-input deltas, restarts, and last the
turn's result."""


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
    environment: Any = None
    """``environment=`` exactly as given to ``run``/``start`` (a handle, its dict or an
    id), or ``None``. A host with environments uses it over its own; a host without
    refuses it (``InvalidOptionsError(option="environment")``) rather than ignore it."""
    replay_from: str | None = None
    """On reattach (``session_id``) to a host that keeps the history: the id of the last
    raw event the caller already holds (``""``: none). The next turn then yields the
    history's events after it first, and does not send again an input it finds among
    them — how a durable turn retried after its worker died picks up a turn the dead
    attempt started, without a second prompt or result on the wire. ``None`` (the
    default): the history is old news, as for any reattach. Hosts with no history ignore
    it."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Caller telemetry tags, for the events the connection emits itself."""
    pending: Pending | None = None
    """The parked state being resumed (``resume=`` a result with ``pending``): a host that
    needs more than the session id to answer its tool uses reads ``pending.host_state``
    (what its connection's ``pending_state()`` returned)."""
    tool_input_deltas: frozenset[str] = frozenset()
    """The tools whose streamed input the loop reads (:class:`ToolInputDelta`, invariant
    7): the output tool under ``output=``'s tool strategy. A host may leave out every
    other call's pieces, and yield none when it is empty (the usual case); yielding them
    anyway is harmless, the loop ignores them."""


@runtime_checkable
class Connection(Protocol):
    """One session on one host."""

    session_id: str | None
    resumed: bool
    """``True`` when ``open`` attached to an existing session rather than creating one."""
    pending_tool_uses: list[ToolUse]
    """On a resumed session: custom tool uses still waiting for a result."""

    def turn(self, input: TurnInput) -> AsyncIterator[TurnItem]:
        """One turn: its raw events (and text deltas, restarts), then its result."""
        ...

    def transcript(self) -> list[dict[str, Any]] | None:
        """Client-held history to reattach with, or ``None`` (the host holds it)."""
        ...

    async def interrupt(self) -> None:
        """Ask the host to stop the agent's current work."""
        ...

    async def aclose(self) -> None:
        """Release what the connection holds (idempotent; the session stays on the host)."""
        ...


class ConnectionBase:
    """Defaults for the optional parts of :class:`Connection`: no pending tool uses, no
    client-held transcript, no interrupts, nothing to close.

    Optional parts the loop looks for (``getattr``), so a host from outside needs none:

    * ``interrupts_by_cancel = True``: the host's work is this process's own request (a
      request/response host), so the loop interrupts by cancelling the in-flight turn and
      tool calls itself (the request ends ``terminated``, reason ``interrupted``) and then
      calls ``interrupted()`` so the host can make its state consistent (Local answers
      every open tool call in its history). Otherwise ``interrupt()`` asks the host.
    * ``pending_state() -> dict | None``: what the host needs, besides the session id, to
      answer its tool uses from another process (kept in ``Pending.host_state``).
    * ``model -> str | None``: the model id the connection's turns ask for, as the host
      sends it (``None``: the host does not say, e.g. a server-side agent's own model).
      Telemetry reports it (``gen_ai.request.model``); the loop works it out nowhere else.
    * ``gen_ai_provider -> str | None``: the API the connection's turns speak, as the
      OpenTelemetry GenAI conventions name it (``gen_ai.provider.name``: ``openai``,
      ``anthropic``, ``aws.bedrock``...); ``None``: telemetry names the host's own (Local
      reports ``anthropic`` for its ``anthropic:`` models, ``openai`` otherwise).
    """

    session_id: str | None = None
    resumed: bool = False
    pending_tool_uses: list[ToolUse]
    interrupts_by_cancel: ClassVar[bool] = False

    def __init__(self) -> None:
        self.pending_tool_uses = []

    def transcript(self) -> list[dict[str, Any]] | None:
        return None

    @property
    def model(self) -> str | None:
        """The model id this connection's turns send (``None``: the host does not say)."""
        return None

    @property
    def gen_ai_provider(self) -> str | None:
        """The GenAI provider name of the API this connection's turns speak (``None``: the
        host's own, see the class doc)."""
        return None

    async def interrupt(self) -> None:
        raise UnsupportedError("this host does not support interrupts")

    def interrupted(self) -> None:
        """The loop cancelled a turn for an interrupt (``interrupts_by_cancel`` hosts)."""
        return

    def pending_state(self) -> dict[str, Any] | None:
        return None

    async def aclose(self) -> None:
        return None


@runtime_checkable
class Provider(Protocol):
    """A loop host, configured once."""

    name: ClassVar[str]
    """Short host name: ``"local"``, ``"claude"``, ``"agentcore"``."""
    supports_outcomes: ClassVar[bool]
    """Whether ``open``'d connections take :class:`DefineOutcome`."""
    supports_raw_events: ClassVar[bool]
    """Whether ``open``'d connections take :class:`RawInput`."""

    async def open(self, request: OpenRequest) -> Connection:
        """A connection to a new session, or to ``request.session_id`` (reattached)."""
        ...
