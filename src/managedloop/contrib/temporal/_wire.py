"""What crosses Temporal: the JSON payloads of the session workflow and its activities.

Everything here is plain data (dicts of JSON values), so Temporal's default converter
carries it unchanged and a workflow history stays readable in the Temporal UI. Secrets
never cross: a workflow names its provider and agent (``provider="claude-prod"``,
``agent="support"``), and the worker that runs the activity builds them from what it
registered — API keys and AWS credentials stay on the worker's machine and out of every
payload and history.

Local transcripts (the only host state the workers must carry: Claude and AgentCore keep
theirs) cross in one of two ways, chosen by the worker:

* **inline** (the default, no ``store=``): the transcript travels in the turn activity's
  input and result, so it lives in Temporal itself and any worker of the queue can take
  the next turn, or retry one whose worker died. Temporal caps a payload at 2 MB and warns
  about long histories; a transcript over :data:`INLINE_LIMIT` is a named, non-retryable
  failure (``transcript_too_large``) that says to configure a shared store;
* **by key** (``worker(store=...)``, a store every worker of the queue shares): the
  activity keeps the transcript under a key made from the workflow id and the turn number,
  and only the key crosses.

Either way a turn reads transcript *n* and writes transcript *n + 1*, so a retried turn
starts again from the same history and can never append a tool result twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from managedloop.hosts import ToolResults, TurnInput, UserMessage
from managedloop.results import Approve, Deny, ToolResult, ToolUse

__all__ = [
    "INLINE_LIMIT",
    "Carry",
    "OpenCall",
    "Opened",
    "OutputCall",
    "SessionStart",
    "ToolCall",
    "TurnCall",
    "TurnDone",
    "decision",
    "decode_input",
    "encode_input",
]


INLINE_LIMIT = 1024 * 1024
"""Bytes of JSON an inline transcript may take: half of Temporal's 2 MB payload cap, which
leaves room for the turn's own events in the same activity result."""

Transcript = list[dict[str, Any]]


@dataclass(kw_only=True)
class SessionStart:
    """The workflow's argument: which provider and agent (by name), the prompt, options."""

    provider: str
    agent: str
    prompt: str
    task_queue: str
    """Where the host activities (open, turn) run; tools run here too unless pinned."""
    tool_queues: dict[str, str] = field(default_factory=dict)
    """Tool name → task queue, for tools that must run on particular machines."""
    resume: str | None = None
    """A host session id to reattach to instead of opening a new session."""
    max_turns: int = 50
    terminal_tool: str | None = None
    require_terminal_tool: bool = False
    tool_timeout: float | None = None
    turn_timeout: float = 1800.0
    """Start-to-close bound of one host-turn activity; above the host's own budget."""
    heartbeat_timeout: float = 10.0
    """How soon a dead worker's activity is retried elsewhere (activities heartbeat)."""
    live: bool = False
    """Keep the session after its first request: follow-ups arrive as the
    ``managedloop.send`` update, until the ``managedloop.close`` signal."""
    requests_per_run: int | None = None
    """Continue as new after this many requests of a live session (besides whenever
    Temporal suggests it): bounds the history of a session that lives for weeks."""
    carry: Carry | None = None
    """State carried over a continue-as-new (``None`` on a fresh start)."""
    output: str | None = None
    """``output=``: the output type's import path (``"module:Qualname"``), which every
    worker imports; ``None``: no typed output."""
    output_strategy: str | None = None
    """The typed output's strategy (``"tool"`` unless the caller chose another)."""
    output_retries: int = 2
    output_validators: list[str] = field(default_factory=list)
    """``output_validator=``: each function's import path, which the workers import."""


@dataclass(kw_only=True)
class Carry:
    """What a live session needs after a continue-as-new: where the host session is,
    what the workflow has seen, and the follow-ups not yet served."""

    session_id: str | None
    transcript_key: str | None
    last_event_id: str
    transcript: Transcript | None = None
    inbox: list[str] = field(default_factory=list)
    tool_queues: dict[str, str] = field(default_factory=dict)
    requests: int = 0
    """Requests served before (the ``managedloop.result`` update numbers them)."""
    last: dict[str, Any] | None = None
    """The last request's result: the workflow's result if it is closed straight away."""


@dataclass(kw_only=True)
class OpenCall:
    provider: str
    agent: str
    session_id: str | None
    transcript_key: str
    output: str | None = None
    output_strategy: str | None = None


@dataclass(kw_only=True)
class Opened:
    session_id: str | None
    transcript_key: str | None
    """The key the opening transcript was stored under (``None``: the host holds history,
    or the worker has no store and the transcript is :attr:`transcript`)."""
    transcript: Transcript | None = None
    """The opening transcript itself, when the worker keeps transcripts inline."""
    pending: list[dict[str, Any]] = field(default_factory=list)
    """Tool uses a reattached session still waits on (``ToolUse.to_dict()`` each)."""
    tool_queues: dict[str, str] = field(default_factory=dict)
    """The task queues the worker's tools pin themselves to (``worker(tool_queues=...)``)."""


@dataclass(kw_only=True)
class TurnCall:
    provider: str
    agent: str
    session_id: str | None
    transcript_in: str | None
    transcript_out: str
    input: dict[str, Any]
    transcript: Transcript | None = None
    """Transcript *n* itself, when it travels inline (then ``transcript_in`` is ``None``)."""
    last_event_id: str = ""
    """The id of the last raw event the workflow holds (``""``: none yet): a retried turn
    replays the host's history after it (``OpenRequest.replay_from``)."""
    output: str | None = None
    output_strategy: str | None = None


@dataclass(kw_only=True)
class OutputCall:
    """Validate a typed output on a worker (which imports the type by its path)."""

    provider: str
    agent: str
    output: str
    output_strategy: str
    payloads: list[dict[str, Any]]
    """``{"payload", "input_error"}`` of each output call (the first valid one wins), or
    the answer's text as the one payload."""
    output_validators: list[str] = field(default_factory=list)
    """The output validators' import paths (they run after pydantic, in order)."""


@dataclass(kw_only=True)
class TurnDone:
    turn: dict[str, Any]
    """``TurnResult.to_dict()``."""
    session_id: str | None
    transcript_key: str | None
    transcript: Transcript | None = None
    """Transcript *n + 1* itself, when the worker keeps transcripts inline."""


@dataclass(kw_only=True)
class ToolCall:
    agent: str
    use: dict[str, Any]
    session_id: str | None
    provider: str
    timeout: float | None = None
    decided: bool = False
    """Approved by a person: run it without asking the approval rule again."""


def encode_input(value: TurnInput) -> dict[str, Any]:
    if isinstance(value, UserMessage):
        return {
            "kind": "message",
            "text": value.text,
            "reprompt": value.reprompt,
            "final_turn": value.final_turn,
        }
    if isinstance(value, ToolResults):
        return {
            "kind": "tool_results",
            "tool_uses": [u.to_dict() for u in value.tool_uses],
            "results": [r.to_dict() for r in value.results],
            "final_turn": value.final_turn,
            "decisions": {k: d.to_dict() for k, d in value.decisions.items()},
        }
    raise TypeError(f"a durable session does not carry {type(value).__name__} inputs")


def decode_input(data: dict[str, Any]) -> TurnInput:
    if data["kind"] == "message":
        return UserMessage(data["text"], reprompt=data["reprompt"], final_turn=data["final_turn"])
    return ToolResults(
        tool_uses=[ToolUse.from_dict(u) for u in data["tool_uses"]],
        results=[ToolResult.from_dict(r) for r in data["results"]],
        final_turn=data["final_turn"],
        decisions={k: decision(d) for k, d in data.get("decisions", {}).items()},
    )


def decision(data: Any) -> Approve | Deny:
    """``Approve().to_dict()`` / ``Deny("why").to_dict()`` back; anything else is refused."""
    if isinstance(data, dict) and data.get("decision") == "approve":
        return Approve()
    if isinstance(data, dict) and data.get("decision") == "deny":
        return Deny(str(data.get("message") or ""))
    raise ValueError(f"not a decision: {data!r} (want Approve().to_dict() or Deny(...).to_dict())")
