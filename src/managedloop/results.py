"""The result vocabulary every host shares.

All types are frozen, keyword-only, slotted dataclasses and round-trip through JSON with
``to_dict`` / ``from_dict``. Raw provider data (``stop_reason``, ``events``, ``Usage.raw``)
is kept verbatim: normalisation is additive, never lossy.

This module imports nothing of managedloop: :mod:`managedloop.errors` carries a
:class:`SessionResult`, so a result type that must raise (the kickoff
:class:`~managedloop.Outcome`) lives above both, in :mod:`managedloop.outcome`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

__all__ = [
    "ApprovalRequest",
    "Approve",
    "Artifact",
    "CommandResult",
    "Deny",
    "OutputFailure",
    "Pending",
    "SessionInfo",
    "SessionResult",
    "Terminal",
    "ToolResult",
    "ToolUse",
    "TurnResult",
    "Usage",
]

RawEvent = dict[str, Any]
"""One provider event, exactly as the host sent it (decoded JSON)."""


class Terminal(enum.StrEnum):
    """How a turn (or a session) ended, uniform across hosts."""

    END_TURN = "end_turn"
    """The agent finished its turn."""
    REQUIRES_ACTION = "requires_action"
    """The agent is waiting for custom tool results."""
    TERMINATED = "terminated"
    """The host or the library stopped the session (see ``SessionResult.reason``)."""


class _Json:
    """``to_dict`` / ``from_dict`` for the vocabulary dataclasses."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _dump(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        result: Self = _from_fields(cls, data)
        return result


def _from_fields(cls: Any, data: Mapping[str, Any]) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {k: _load(names[k].type, v) for k, v in data.items() if k in names}
    return cls(**kwargs)


def _dump(value: Any) -> Any:
    if isinstance(value, _Json):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


_NESTED: dict[str, Any] = {}


def _load(annotation: Any, value: Any) -> Any:
    # Field annotations are strings (``from __future__ import annotations``); the few fields
    # holding nested vocabulary types are looked up by their annotation text.
    text = str(annotation)
    for name, kind in _NESTED.items():
        if text.startswith(f"list[{name}]") and isinstance(value, list):
            return [kind.from_dict(v) if isinstance(v, Mapping) else v for v in value]
        if text.startswith(name) and isinstance(value, Mapping):
            return kind.from_dict(value)
    if text.startswith("Terminal") and isinstance(value, str):
        return Terminal(value)
    if text.startswith("dict[str, Approve | Deny]") and isinstance(value, Mapping):
        return {k: decision_from_dict(v) for k, v in value.items()}
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolUse(_Json):
    """One tool call the model made (custom tools run here; server tools are observe-only)."""

    name: str
    """The tool's name."""
    id: str | None = None
    """The host's id for this call; tool results reference it."""
    input: dict[str, Any] = field(default_factory=dict)
    """Decoded arguments (``{}`` when ``input_error`` is set)."""
    thread_id: str | None = None
    """Multiagent thread the call came from (Claude), else ``None``."""
    input_error: str | None = None
    """Why the model's raw arguments could not be decoded (invalid JSON, ``null``, not an
    object, nested too deeply), else ``None``. A call with an ``input_error`` never runs:
    the model gets an error result naming the problem
    (:func:`managedloop.handler.decode_tool_input`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult(_Json):
    """What a tool returned; resumes the loop."""

    tool_use_id: str
    text: str = ""
    is_error: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage(_Json):
    """Token counts (and, where the host reports them, cost and active time), summed over
    turns; ``raw`` keeps each provider usage object verbatim.

    ``input_tokens`` is the input the host reports as such; where a host reports cache reads
    and writes apart from it (Anthropic, Bedrock), they are ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens``, and :attr:`total_tokens` (what ``max_total_tokens``
    budgets) adds them.
    ``cost_usd`` and ``active_seconds`` are ``None`` when no turn reported them (Claude's
    ``session.usage`` does; the other hosts do not), never a made-up zero.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float | None = None
    active_seconds: float | None = None
    raw: list[Any] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_input_tokens
            + self.cache_creation_input_tokens
        )

    def __add__(self, other: Usage | None) -> Usage:
        if other is None:
            return self
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_input_tokens=(
                self.cache_creation_input_tokens + other.cache_creation_input_tokens
            ),
            cost_usd=_add_optional(self.cost_usd, other.cost_usd),
            active_seconds=_add_optional(self.active_seconds, other.active_seconds),
            raw=[*self.raw, *other.raw],
        )


def _add_optional(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnResult(_Json):
    """One turn, normalised from the host's raw events (which it keeps in ``events``)."""

    terminal: Terminal = Terminal.TERMINATED
    stop_reason: Any = None
    """The host's raw stop reason, verbatim (a dict on Claude, a string elsewhere)."""
    text: str = ""
    custom_tool_uses: list[ToolUse] = field(default_factory=list)
    server_tool_uses: list[ToolUse] = field(default_factory=list)
    usage: Usage | None = None
    """``None`` means this turn reported no usage."""
    events: list[RawEvent] = field(default_factory=list)
    host_answered: bool = False
    """``requires_action`` whose calls the host answered itself (Local: every call repeated
    an earlier one): nothing to run, and the loop asks the model again (another turn)."""
    host_approvals: list[ApprovalRequest] = field(default_factory=list)
    """Host-run tool uses the host holds for a decision (Claude: a permission policy said
    ``ask``), answered with :attr:`~managedloop.hosts.ToolResults.decisions`."""
    reason: str | None = None
    """A host stop the library names (Claude: ``budget_reached``); becomes the result's
    ``reason`` when this turn ends the request."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionResult(_Json):
    """How a session request ended. The same shape for every host."""

    terminal: Terminal = Terminal.TERMINATED
    """The uniform signal to branch on."""
    stop_reason: Any = None
    """The last turn's raw stop reason from the host, verbatim."""
    reason: str | None = None
    """Machine-readable cause of a stop the *library* made (``max_turns``,
    ``unresolved_requires_action``, ``no_terminal_tool``, ``token_budget``, or a turn
    guard's reason) or of a host stop it names (``budget_reached``: a Claude session hit
    its ``session_budget``; terminal ``terminated``), else ``None``."""
    session_id: str | None = None
    text: str = ""
    """The last turn's assistant text (earlier turns' text is in ``events``)."""
    custom_tool_uses: list[ToolUse] = field(default_factory=list)
    server_tool_uses: list[ToolUse] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    events: list[RawEvent] = field(default_factory=list)
    """Every raw event of this request, exactly once, in arrival order."""
    transcript: list[dict[str, Any]] | None = None
    """Client-held history (Local) for reattaching; ``None`` on server-held hosts."""
    pending: Pending | None = None
    """With ``reason="approval_required"``: the decisions the session waits on and what
    it needs to carry on (``resume=result, approvals={...}``), else ``None``."""
    output: Any = None
    """With ``output=``: the validated instance of the output type the model produced
    (``None`` unless it produced one). ``to_dict`` keeps it as JSON; ``from_dict(data,
    output=Type)`` validates it again."""
    output_strategy: str | None = None
    """With ``output=``: how the typed output was asked for: ``"tool"`` (an output tool),
    ``"native"`` (the server's structured output) or ``"text"`` (JSON text), else ``None``."""
    output_failure: OutputFailure | None = None
    """With ``reason="output_invalid"`` (or on a partial result): the model's last invalid
    output and why it was refused, else ``None``."""

    def to_dict(self) -> dict[str, Any]:
        data = _Json.to_dict(self)
        if self.output is not None:  # an instance of the user's type: as JSON
            import pydantic_core  # output= loaded pydantic already

            data["output"] = pydantic_core.to_jsonable_python(self.output)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], output: Any = None) -> Self:
        """A result from its ``to_dict()``; with ``output`` (the type given to ``output=``)
        the JSON output is validated into an instance of it again (a ``ValidationError``
        if it no longer fits the type)."""
        result: Self = _from_fields(cls, data)
        if output is not None and result.output is not None:
            import pydantic

            value = pydantic.TypeAdapter(output).validate_python(result.output)
            object.__setattr__(result, "output", value)
        return result


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputFailure(_Json):
    """The typed output the model last produced that could not be accepted."""

    payload: Any = None
    """What the model produced: the output tool's input, or the text it answered with."""
    errors: list[dict[str, Any]] = field(default_factory=list)
    """Why it was refused: ``{"loc": [...], "msg": ..., "type": ...}`` each (pydantic's
    validation errors, ``model_retry`` for an ``output_validator``'s ``ModelRetry``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Approve(_Json):
    """A decision: run this tool use (custom tool) or let the host run it (host tool)."""

    def to_dict(self) -> dict[str, Any]:
        return {"decision": "approve"}


@dataclass(frozen=True, slots=True, init=False)
class Deny(_Json):
    """A decision: do not run this tool use. The model gets an error result saying so,
    with ``message`` (a host tool: the host's ``deny_message``)."""

    message: str = ""

    def __init__(self, message: str = "") -> None:
        # Positional on purpose: ``ml.Deny("why")`` reads as what it is.
        object.__setattr__(self, "message", message)

    def to_dict(self) -> dict[str, Any]:
        return {"decision": "deny", "message": self.message}


Decision = Approve | Deny


def decision_from_dict(data: Any) -> Approve | Deny:
    """An :class:`Approve` or :class:`Deny` from its ``to_dict`` form (or itself)."""
    if isinstance(data, Approve | Deny):
        return data
    if isinstance(data, Mapping):
        kind = data.get("decision")
        if kind == "approve":
            return Approve()
        if kind == "deny":
            message = data.get("message")
            return Deny(message if isinstance(message, str) else "")
    raise ValueError(f"not a decision: {data!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRequest(_Json):
    """One tool use waiting for a decision (``Approve()`` or ``Deny("why")``).

    ``source`` says who holds it: ``"tool"`` -- a custom tool of this process
    (``@tool(requires_approval=...)`` or the handler's ``needs_approval``); ``"host"`` -- a
    host-run tool the host's permission policy holds (Claude ``always_ask``, or ``auto``
    when its evaluation says ask).
    """

    tool_use: ToolUse
    source: str = "tool"
    reason: str | None = None
    """Why a decision is needed: the tool's or handler's reason; for a host tool the
    evaluation's ``reason_code`` (``auto``) or the policy's name (``always_ask``)."""
    verdict: str | None = None
    """The host's evaluated permission (``"ask"``); ``None`` for a custom tool."""
    evaluation: dict[str, Any] | None = None
    """The host's ``evaluation`` object, verbatim (Claude), else ``None``."""

    @property
    def id(self) -> str:
        return self.tool_use.id or ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Pending(_Json):
    """What a session parked on ``approval_required`` waits on; JSON round-trippable, so
    another process resumes it (``ml.run(..., resume=result.to_dict(), approvals=...)``)."""

    approvals: list[ApprovalRequest] = field(default_factory=list)
    """The decisions needed, one per tool use id."""
    tool_uses: list[ToolUse] = field(default_factory=list)
    """Every custom tool use the host waits on, in the host's order (those held for a
    decision and the others)."""
    results: list[ToolResult] = field(default_factory=list)
    """Results already computed for the other uses of the turn: sent with the decisions,
    never computed again."""
    decisions: dict[str, Approve | Deny] = field(default_factory=dict)
    """Host-tool decisions already made (by ``confirm=``) while others were still open."""
    host_state: dict[str, Any] | None = None
    """What the host needs to answer the uses from another process (AgentCore: the
    assistant message's text and reasoning blocks), else ``None``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionInfo(_Json):
    """Runtime identity handed to tools and handlers."""

    session_id: str | None = None
    provider: str | None = None
    """The host's name: ``"local"``, ``"claude"`` or ``"agentcore"``."""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class Artifact(_Json):
    """A file an agent wrote, in a provider-native store."""

    name: str
    size: int | None = None
    ref: str | None = None
    """The store's own handle (a file id, a path)."""
    raw: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CommandResult(_Json):
    """A shell command's result; a non-zero exit code is a result, not an error."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None


_NESTED.update(
    {
        "ToolUse": ToolUse,
        "ToolResult": ToolResult,
        "Usage": Usage,
        "ApprovalRequest": ApprovalRequest,
        "Pending": Pending,
        "OutputFailure": OutputFailure,
    }
)


# -- Fast construction on the hot path ---------------------------------------------------
#
# A frozen dataclass's generated ``__init__`` parses keyword arguments and sets every field
# through ``object.__setattr__`` (a slot wrapper call per field, ~1k instructions each).
# The loop builds a ToolUse, a ToolResult, a TurnResult, a Usage and more per tool call,
# so the hosts, the handler and the loop build them with the functions below: the same
# objects with the same field values (the dataclasses check nothing in ``__init__``, so
# nothing is skipped).
#
# How: each class has a *builder*, a plain class with the same base and the same slots.
# A builder instance takes ordinary attribute stores (no frozen ``__setattr__``), then
# becomes an instance of the dataclass by ``__class__`` assignment, which Python allows
# only between classes of the same layout (same base, same slots; it checks, and raises
# TypeError otherwise). From then on it *is* the frozen dataclass instance (``type()``,
# ``==``, ``repr``, ``FrozenInstanceError`` on assignment). Every field is set: the
# builder's field list is checked against ``dataclasses.fields`` at import, and an unset
# slot would raise AttributeError on read (the tests read every field). A builder is made
# by calling it, ``_XB()``, which runs ``object``'s own ``__new__`` and ``__init__`` only
# (checked at import): cheaper than ``object.__new__(_XB)`` (~300 instructions), whose
# slot wrapper checks its arguments first.


def fast_builder(cls: type, names: tuple[str, ...]) -> type:
    """The builder of frozen slotted dataclass ``cls``, whose fields are ``names``."""
    slots = tuple(cls.__dict__.get("__slots__", ()))
    if names != tuple(f.name for f in dataclasses.fields(cls)) or slots != names:
        raise RuntimeError(f"{cls.__name__}'s fast constructor does not set every field")
    builder = type(f"_{cls.__name__}Builder", cls.__bases__, {"__slots__": names})
    if any("__new__" in vars(b) or "__init__" in vars(b) for b in builder.__mro__[:-1]):
        raise RuntimeError(f"{cls.__name__}'s builder would run a base's __new__ or __init__")
    probe: Any = builder()
    probe.__class__ = cls  # the layouts agree (TypeError at import otherwise)
    return builder


_ToolUseB = fast_builder(ToolUse, ("name", "id", "input", "thread_id", "input_error"))
_ToolResultB = fast_builder(ToolResult, ("tool_use_id", "text", "is_error"))
_UsageB = fast_builder(
    Usage,
    (
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "cost_usd",
        "active_seconds",
        "raw",
    ),
)
_TurnResultB = fast_builder(
    TurnResult,
    (
        "terminal",
        "stop_reason",
        "text",
        "custom_tool_uses",
        "server_tool_uses",
        "usage",
        "events",
        "host_answered",
        "host_approvals",
        "reason",
    ),
)
_SessionResultB = fast_builder(
    SessionResult,
    (
        "terminal",
        "stop_reason",
        "reason",
        "session_id",
        "text",
        "custom_tool_uses",
        "server_tool_uses",
        "usage",
        "turns",
        "events",
        "transcript",
        "pending",
        "output",
        "output_strategy",
        "output_failure",
    ),
)


def make_session_result(  # noqa: PLR0917 (positional: every field, in field order)
    terminal: Terminal,
    stop_reason: Any,
    reason: str | None,
    session_id: str | None,
    text: str,
    custom_tool_uses: list[ToolUse],
    server_tool_uses: list[ToolUse],
    usage: Usage,
    turns: int,
    events: list[RawEvent],
    transcript: list[dict[str, Any]] | None,
    pending: Pending | None = None,
) -> SessionResult:
    """``SessionResult(...)`` with every field given, faster (one or two per request)."""
    result: Any = _SessionResultB()
    result.terminal = terminal
    result.stop_reason = stop_reason
    result.reason = reason
    result.session_id = session_id
    result.text = text
    result.custom_tool_uses = custom_tool_uses
    result.server_tool_uses = server_tool_uses
    result.usage = usage
    result.turns = turns
    result.events = events
    result.transcript = transcript
    result.pending = pending
    result.output = None
    result.output_strategy = None
    result.output_failure = None
    result.__class__ = SessionResult
    return result  # type: ignore[no-any-return]


def make_tool_use(
    name: str,
    id: str | None,
    input: dict[str, Any],
    input_error: str | None = None,
    thread_id: str | None = None,
) -> ToolUse:
    """``ToolUse(name=..., id=..., input=..., input_error=..., thread_id=...)``, faster."""
    use: Any = _ToolUseB()
    use.name = name
    use.id = id
    use.input = input
    use.thread_id = thread_id
    use.input_error = input_error
    use.__class__ = ToolUse
    return use  # type: ignore[no-any-return]


def make_tool_result(tool_use_id: str, text: str, is_error: bool = False) -> ToolResult:
    """``ToolResult(tool_use_id=..., text=..., is_error=...)``, faster."""
    result: Any = _ToolResultB()
    result.tool_use_id = tool_use_id
    result.text = text
    result.is_error = is_error
    result.__class__ = ToolResult
    return result  # type: ignore[no-any-return]


def make_usage(input_tokens: int, output_tokens: int, raw: list[Any]) -> Usage:
    """``Usage(input_tokens=..., output_tokens=..., raw=...)``, faster."""
    usage: Any = _UsageB()
    usage.input_tokens = input_tokens
    usage.output_tokens = output_tokens
    usage.cache_read_input_tokens = 0
    usage.cache_creation_input_tokens = 0
    usage.cost_usd = None
    usage.active_seconds = None
    usage.raw = raw
    usage.__class__ = Usage
    return usage  # type: ignore[no-any-return]


def make_turn_result(  # noqa: PLR0917 (positional: one call per turn on the hot path)
    terminal: Terminal,
    stop_reason: Any,
    text: str,
    custom_tool_uses: list[ToolUse],
    usage: Usage | None,
    events: list[RawEvent],
    host_answered: bool = False,
    server_tool_uses: list[ToolUse] | None = None,
    reason: str | None = None,
) -> TurnResult:
    """``TurnResult(...)`` with every field given (``server_tool_uses`` ``None``: a new
    empty list, as the dataclass default; no ``host_approvals``: Local holds none), faster."""
    turn: Any = _TurnResultB()
    turn.terminal = terminal
    turn.stop_reason = stop_reason
    turn.text = text
    turn.custom_tool_uses = custom_tool_uses
    turn.server_tool_uses = [] if server_tool_uses is None else server_tool_uses
    turn.usage = usage
    turn.events = events
    turn.host_answered = host_answered
    turn.host_approvals = []
    turn.reason = reason
    turn.__class__ = TurnResult
    return turn  # type: ignore[no-any-return]
