"""Pure helpers for Claude Managed Agents events: builders, classification, normalisation.

Protocol facts relied on (see ``cma-wire.md`` §2-§4):

* dispatch is on the ``type`` string, never on an SDK class (unknown types stay raw dicts);
* a turn ends at ``session.status_idle``, ``session.status_terminated``,
  ``session.deleted`` or a ``session.error`` whose ``retry_status`` is not ``retrying`` /
  ``exhausted`` (those are followed by a status event of their own);
* ``requires_action`` names the blocking event ids in ``stop_reason.event_ids``; they can
  refer to ``agent.custom_tool_use`` events of an *earlier* batch, so they are resolved
  against every tool use the connection has seen, not only the current turn's;
* usage is per model request, in ``span.model_request_end.model_usage``;
* an unknown idle stop reason ends the turn as ``terminated`` (as the SDK's runner does);
* a built-in ``agent.tool_use`` that a ``requires_action`` names with
  ``evaluated_permission: "allow"`` is a **self-hosted sandbox's** to answer (with a
  ``user.tool_result`` from the environment's worker): a cloud environment runs allowed
  built-in tools itself and never blocks on them, so such a use is neither a custom tool
  use nor a host approval. Only a use held with ``ask`` is a host approval (on a
  self-hosted environment too: once confirmed, the worker runs it).

Text: the text blocks of one ``agent.message`` are concatenated with no separator (they are
one message); the messages of a turn are joined with ``"\\n"``.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any

from managedloop.outcome import Outcome
from managedloop.results import (
    ApprovalRequest,
    Approve,
    Deny,
    RawEvent,
    Terminal,
    ToolResult,
    ToolUse,
    TurnResult,
    Usage,
)

__all__ = [
    "BOUNDARY_TYPES",
    "approval_request",
    "confirmation_event",
    "custom_tool_result",
    "define_outcome",
    "ends_turn",
    "event_key",
    "fresh",
    "interrupt",
    "is_sandbox_use",
    "message_text",
    "normalize",
    "terminal_of",
    "tool_confirmation",
    "tool_result",
    "tool_use_of",
    "unanswered_tool_uses",
    "user_message",
]

BOUNDARY_TYPES = frozenset(
    {"session.status_idle", "session.status_terminated", "session.error", "session.deleted"}
)
CUSTOM_TOOL_USE = "agent.custom_tool_use"
CUSTOM_TOOL_RESULT = "user.custom_tool_result"
SERVER_TOOL_USES = frozenset({"agent.tool_use", "agent.mcp_tool_use"})
SANDBOX_TOOL_USE = "agent.tool_use"
SANDBOX_TOOL_RESULT = "user.tool_result"
_NON_FINAL_ERRORS = frozenset({"retrying", "exhausted"})
_OUTCOME_TERMINAL = {
    "satisfied": Terminal.END_TURN,
    "max_iterations_reached": Terminal.END_TURN,
    "failed": Terminal.TERMINATED,
    "interrupted": Terminal.TERMINATED,
}


# -- builders -----------------------------------------------------------------------------
def user_message(text: str) -> dict[str, Any]:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


def custom_tool_result(tool_use_id: str, text: str, is_error: bool = False) -> dict[str, Any]:
    return {
        "type": CUSTOM_TOOL_RESULT,
        "custom_tool_use_id": tool_use_id,
        "content": [{"type": "text", "text": text}],
        "is_error": bool(is_error),
    }


def tool_result(tool_use_id: str, text: str, is_error: bool = False) -> dict[str, Any]:
    """``user.tool_result``: a self-hosted worker's answer to a built-in ``agent.tool_use``
    (valid only on a ``self_hosted`` environment)."""
    return {
        "type": SANDBOX_TOOL_RESULT,
        "tool_use_id": tool_use_id,
        "content": [{"type": "text", "text": text or "(no output)"}],
        "is_error": bool(is_error),
    }


def is_sandbox_use(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is a built-in tool use a self-hosted worker answers (see the
    module docstring): an ``agent.tool_use`` the host evaluated ``allow``."""
    return event.get("type") == SANDBOX_TOOL_USE and event.get("evaluated_permission") == "allow"


def result_event(result: ToolResult) -> dict[str, Any]:
    return custom_tool_result(result.tool_use_id, result.text, result.is_error)


def define_outcome(outcome: Outcome) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "user.define_outcome",
        "description": outcome.description,
        "rubric": {"type": "text", "content": outcome.rubric},
    }
    if isinstance(outcome.max_iterations, int):  # a None must never reach the wire
        event["max_iterations"] = outcome.max_iterations
    return event


def tool_confirmation(
    tool_use_id: str, allow: bool, deny_message: str | None = None
) -> dict[str, Any]:
    """``user.tool_confirmation`` for a server tool use the agent holds with permission
    ``ask`` (send it with ``session.send_event(...)``)."""
    event: dict[str, Any] = {
        "type": "user.tool_confirmation",
        "tool_use_id": tool_use_id,
        "result": "allow" if allow else "deny",
    }
    if not allow and deny_message:
        event["deny_message"] = deny_message
    return event


def confirmation_event(tool_use_id: str, decision: Approve | Deny) -> dict[str, Any]:
    """``user.tool_confirmation`` for one decision (a deny carries its message)."""
    if isinstance(decision, Deny):
        return tool_confirmation(tool_use_id, False, decision.message or None)
    return tool_confirmation(tool_use_id, True)


def approval_request(event: Mapping[str, Any]) -> ApprovalRequest:
    """What ``confirm=`` sees of a host tool use held for confirmation: the use, the
    host's verdict (``evaluated_permission``) and its ``evaluation`` verbatim; the reason
    is the ``auto`` judgement's ``reason_code``, else the policy's type (``always_ask``)."""
    evaluation = event.get("evaluation")
    evaluation = dict(evaluation) if isinstance(evaluation, Mapping) else None
    reason: str | None = None
    if evaluation is not None:
        judged = evaluation.get("evaluated_permission")
        code = judged.get("reason_code") if isinstance(judged, Mapping) else None
        kind = evaluation.get("type")
        reason = code if isinstance(code, str) else kind if isinstance(kind, str) else None
    verdict = event.get("evaluated_permission")
    return ApprovalRequest(
        tool_use=tool_use_of(event),
        source="host",
        reason=reason,
        verdict=verdict if isinstance(verdict, str) else None,
        evaluation=evaluation,
    )


def interrupt(thread_id: str | None = None) -> dict[str, Any]:
    """``user.interrupt`` (of one multiagent thread when ``thread_id`` is given)."""
    event: dict[str, Any] = {"type": "user.interrupt"}
    if thread_id is not None:
        event["session_thread_id"] = thread_id
    return event


interrupt_event = interrupt
"""Public name of :func:`interrupt` (``session.send_event(interrupt_event(thread_id))``)."""


# -- dedupe ---------------------------------------------------------------------------------
def event_key(event: Mapping[str, Any]) -> Hashable:
    """What makes ``event`` the same event when it arrives again (stream, history page, a
    reconnect's history): its ``id``; for an event without one (the docs warn a
    ``user.interrupt`` may carry an empty id), its type and ``processed_at``."""
    eid = event.get("id")
    if isinstance(eid, str) and eid:
        return eid
    return ("no-id", str(event.get("type")), str(event.get("processed_at")))


def fresh(events: Iterable[RawEvent], seen: Collection[Hashable]) -> list[RawEvent]:
    """The events of ``events`` not yet seen: each key once (its first occurrence), in
    order, skipping keys in ``seen``. A pure fold, so merging a history page into what the
    stream already delivered is idempotent: ``fresh(fresh(x, s), s) == fresh(x, s)``, and
    nothing in ``x`` is lost (every key of ``x`` is in ``s`` or in the answer)."""
    out: list[RawEvent] = []
    taken: set[Hashable] = set()
    for event in events:
        key = event_key(event)
        if key in seen or key in taken:
            continue
        taken.add(key)
        out.append(event)
    return out


# -- classification -------------------------------------------------------------------------
def terminal_of(kind: Any) -> Terminal:
    """Uniform terminal for a raw idle stop-reason type (reference §1.3)."""
    if kind == "requires_action":
        return Terminal.REQUIRES_ACTION
    if kind in ("end_turn", "satisfied", "max_iterations_reached"):
        return Terminal.END_TURN
    return Terminal.TERMINATED


def ends_turn(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is a turn-boundary candidate (before the connection's checks)."""
    kind = event.get("type")
    if kind not in BOUNDARY_TYPES:
        return False
    if kind == "session.error":
        error = event.get("error")
        retry = error.get("retry_status") if isinstance(error, Mapping) else None
        status = retry.get("type") if isinstance(retry, Mapping) else None
        return status not in _NON_FINAL_ERRORS
    return True


def stop_reason_of(event: Mapping[str, Any]) -> Any:
    if event.get("type") == "session.status_idle":
        return event.get("stop_reason")
    if "stop_reason" in event:
        return event.get("stop_reason")
    if event.get("type") == "session.error":
        return event.get("error")
    return None


def tool_use_of(event: Mapping[str, Any]) -> ToolUse:
    raw_input = event.get("input")
    thread = event.get("session_thread_id")
    return ToolUse(
        id=event.get("id"),
        name=str(event.get("name") or ""),
        input=dict(raw_input) if isinstance(raw_input, Mapping) else {},
        thread_id=thread if isinstance(thread, str) and thread else None,
    )


def message_text(event: Mapping[str, Any]) -> str:
    content = event.get("content")
    if not isinstance(content, list):
        return ""
    return "".join(
        b["text"]
        for b in content
        if isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def unanswered_tool_uses(history: Iterable[Mapping[str, Any]]) -> list[ToolUse]:
    """Custom tool uses in ``history`` with no matching ``user.custom_tool_result``."""
    uses: dict[str, Mapping[str, Any]] = {}
    answered: set[str] = set()
    for event in history:
        kind = event.get("type")
        if kind == CUSTOM_TOOL_USE and isinstance(event.get("id"), str):
            uses[event["id"]] = event
        elif kind == CUSTOM_TOOL_RESULT and isinstance(event.get("custom_tool_use_id"), str):
            answered.add(event["custom_tool_use_id"])
    return [tool_use_of(e) for i, e in uses.items() if i not in answered]


def _usage(events: Sequence[Mapping[str, Any]]) -> Usage | None:
    raw: list[Any] = []
    inp = out = 0
    for event in events:
        if event.get("type") != "span.model_request_end":
            continue
        usage = event.get("model_usage") or event.get("usage")
        if not isinstance(usage, Mapping):
            continue
        raw.append(usage)
        inp += int(usage.get("input_tokens") or 0)
        out += int(usage.get("output_tokens") or 0)
    if not raw:
        return None
    return Usage(input_tokens=inp, output_tokens=out, raw=raw)


def normalize(
    events: Sequence[RawEvent],
    known_tool_uses: Mapping[str, Mapping[str, Any]] | None = None,
    answered: Iterable[str] = (),
    known_host_uses: Mapping[str, Mapping[str, Any]] | None = None,
) -> TurnResult:
    """One turn's :class:`TurnResult`; ``events`` are kept verbatim.

    ``known_tool_uses`` maps every custom tool-use id the connection has seen (any batch)
    to its event; ids in ``answered`` already have a result (or a confirmation) and are
    not surfaced again. ``known_host_uses`` does the same for built-in and MCP tool uses:
    one a ``requires_action`` names is held for a confirmation (``host_approvals``).
    """
    lookup: dict[str, Mapping[str, Any]] = dict(known_tool_uses or {})
    hosted: dict[str, Mapping[str, Any]] = dict(known_host_uses or {})
    for event in events:
        kind = event.get("type")
        if kind == CUSTOM_TOOL_USE and isinstance(event.get("id"), str):
            lookup.setdefault(event["id"], event)
        elif kind in SERVER_TOOL_USES and isinstance(event.get("id"), str):
            hosted.setdefault(event["id"], event)
    done = set(answered)
    boundary = next((e for e in reversed(events) if ends_turn(e)), None)
    terminal = Terminal.TERMINATED
    stop_reason: Any = None
    custom: list[ToolUse] = []
    held: list[ApprovalRequest] = []
    if boundary is not None:
        stop_reason = stop_reason_of(boundary)
        if boundary.get("type") == "session.status_idle" and isinstance(stop_reason, Mapping):
            terminal = terminal_of(stop_reason.get("type"))
            if terminal is Terminal.REQUIRES_ACTION:
                ids = stop_reason.get("event_ids")
                for eid in ids if isinstance(ids, list) else []:
                    if not isinstance(eid, str) or eid in done:
                        continue
                    if eid in lookup:
                        custom.append(tool_use_of(lookup[eid]))
                        done.add(eid)
                    elif eid in hosted and not is_sandbox_use(hosted[eid]):
                        held.append(approval_request(hosted[eid]))
                        done.add(eid)
    if terminal is Terminal.END_TURN:
        # An outcome's verdict decides a graded turn: "failed"/"interrupted" end it badly.
        verdict = next(
            (
                e.get("result")
                for e in reversed(events)
                if e.get("type") == "span.outcome_evaluation_end"
            ),
            None,
        )
        if verdict in _OUTCOME_TERMINAL:
            terminal = _OUTCOME_TERMINAL[verdict]
    texts = [message_text(e) for e in events if e.get("type") == "agent.message"]
    # A session budget spent (``session_budget``): ``terminated``, named for the caller.
    budget = isinstance(stop_reason, Mapping) and stop_reason.get("type") == "budget_reached"
    return TurnResult(
        terminal=terminal,
        reason="budget_reached" if budget else None,
        stop_reason=stop_reason,
        text="\n".join(t for t in texts if t),
        custom_tool_uses=custom,
        server_tool_uses=[tool_use_of(e) for e in events if e.get("type") in SERVER_TOOL_USES],
        usage=_usage(events),
        events=list(events),
        host_approvals=held,
    )
