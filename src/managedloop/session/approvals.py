"""Approvals: tool uses that wait for a decision instead of running.

Who holds a call:

* a custom tool of this process: ``@tool(requires_approval=True | predicate)``, or any
  handler's optional ``needs_approval(name, input, info)`` (sync or async; a reason string
  or ``True`` holds the call, ``None``/``False`` runs it). A check that raises holds the
  call (fail closed: a broken check must not run a risky tool);
* the host: a host-run tool its permission policy holds (Claude ``always_ask``, ``auto``
  with an ``ask`` verdict), surfaced as ``TurnResult.host_approvals``.

Every held call is offered to ``confirm=`` (sync or async, sees the
:class:`~managedloop.ApprovalRequest`: the tool use, the reason, the host's verdict and
evaluation) and to the decisions given with ``approvals=``. What nobody decides ends the
request: ``requires_action``, reason ``approval_required``, ``result.pending`` holding the
decisions needed, every custom tool use the host waits on, the results already computed
for the turn's other calls and any host-tool decisions already made. Nothing of the turn
is sent to the host until every decision is made, so each tool use is answered exactly
once on the wire, and the calls that needed no decision run once (their results travel
in ``pending``, they are never run again).

A decision: ``Approve()`` runs the custom tool (no second approval check) or lets the host
run its tool; ``Deny("why")`` answers a custom call with an error result naming the denial
(the tool never runs) or sends the host a ``deny`` with ``why`` as its message.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from managedloop.errors import InvalidOptionsError, ManagedLoopError
from managedloop.hosts import ToolResults
from managedloop.results import (
    ApprovalRequest,
    Approve,
    Deny,
    Pending,
    SessionInfo,
    ToolResult,
    ToolUse,
)

__all__ = [
    "APPROVAL_REQUIRED",
    "Confirm",
    "answer",
    "check_approvals",
    "denial",
    "hold_reason",
    "may_hold",
]

APPROVAL_REQUIRED = "approval_required"

Confirm = Callable[[ApprovalRequest], Any]
"""``confirm(request) -> Approve() | Deny("why") | None`` (or an awaitable of one);
``None`` leaves the decision pending."""

Decision = Approve | Deny


def denial(use: ToolUse, decision: Deny) -> ToolResult:
    """The error result a denied custom call answers the model with."""
    text = f"The call to {use.name!r} was denied"
    text += f": {decision.message}" if decision.message else "."
    return ToolResult(tool_use_id=use.id or "", text=text, is_error=True)


def may_hold(handler: Any) -> bool:
    """Whether ``handler`` can hold a custom call for a decision (it has a
    ``needs_approval`` and does not declare itself ``approval_free``); ``False`` means
    every call runs at once, on the plain path."""
    # approval_free first: a Toolset's is an attribute, not a bound method
    return not getattr(handler, "approval_free", False) and (
        getattr(handler, "needs_approval", None) is not None
    )


async def hold_reason(handler: Any, use: ToolUse, info: SessionInfo) -> str | None:
    """Why ``use`` must wait for a decision, or ``None`` to run it now."""
    check = getattr(handler, "needs_approval", None)
    if check is None or use.input_error is not None:
        return None  # an unreadable call is answered with its error, never held
    try:
        value = check(use.name, use.input, info)
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:  # fail closed: hold the call, say why
        return f"the approval check raised {type(exc).__name__}"
    if value is None or value is False:
        return None
    if isinstance(value, str) and value:
        return value
    return "requires_approval"


async def decide(confirm: Confirm | None, request: ApprovalRequest) -> Decision | None:
    if confirm is None:
        return None
    value = confirm(request)
    if inspect.isawaitable(value):
        value = await value
    if value is None or isinstance(value, Approve | Deny):
        return value
    raise ManagedLoopError(
        f"confirm= must return ml.Approve(), ml.Deny(...) or None, got {value!r}",
        code="invalid_decision",
        tool_use_id=request.id,
    )


async def answer(
    uses: Sequence[ToolUse],
    host_held: Sequence[ApprovalRequest],
    *,
    handler: Any,
    info: SessionInfo,
    run: Callable[[Sequence[ToolUse]], Awaitable[ToolResults]],
    approvals: Mapping[str, Decision],
    confirm: Confirm | None,
    carried: Pending | None = None,
    host_state: Callable[[], dict[str, Any] | None] | None = None,
) -> tuple[ToolResults | Pending, list[ToolUse]]:
    """Answer a turn's calls: the :class:`ToolResults` to send, or the :class:`Pending`
    state when a decision is still open; and the uses answered now (run or denied)."""
    slots: list[ToolResult | None] = [None] * len(uses)
    done = {r.tool_use_id: r for r in carried.results} if carried is not None else {}
    decided: dict[str, Decision] = dict(carried.decisions) if carried is not None else {}
    held: list[ApprovalRequest] = []
    run_at: list[int] = []
    answered: list[ToolUse] = []
    for i, use in enumerate(uses):
        uid = use.id
        if uid and uid in done:
            slots[i] = done[uid]
            continue
        decision = approvals.get(uid) if uid else None
        if decision is None:
            reason = await hold_reason(handler, use, info)
            if reason is None:
                run_at.append(i)
                continue
            request = ApprovalRequest(tool_use=use, source="tool", reason=reason)
            if not uid:  # nothing to decide on later: refuse rather than run unapproved
                slots[i] = denial(use, Deny("it needs approval and has no tool-use id"))
                answered.append(use)
                continue
            decision = await decide(confirm, request)
            if decision is None:
                held.append(request)
                continue
        if isinstance(decision, Deny):
            slots[i] = denial(use, decision)
            answered.append(use)
        else:
            run_at.append(i)
    for request in host_held:
        decision = approvals.get(request.id) or decided.get(request.id)
        if decision is None:
            decision = await decide(confirm, request)
        if decision is None:
            held.append(request)
        else:
            decided[request.id] = decision
    if run_at:
        ran = await run([uses[i] for i in run_at])
        for i, result in zip(run_at, ran.results, strict=True):
            slots[i] = result
        answered.extend(uses[i] for i in run_at)
    if held:
        return (
            Pending(
                approvals=held,
                tool_uses=list(uses),
                results=[r for r in slots if r is not None],
                decisions=decided,
                host_state=host_state() if host_state is not None else None,
            ),
            answered,
        )
    results = [r for r in slots if r is not None]
    assert len(results) == len(uses)  # every use was carried, denied or run
    return ToolResults(tool_uses=list(uses), results=results, decisions=decided), answered


def check_approvals(approvals: Any, confirm: Any, pending: Pending | None) -> dict[str, Decision]:
    """``approvals=`` checked against the parked state, before anything is opened: a
    decision for an id nobody waits on is ``unknown_approval``; a decision still needed
    with no ``confirm=`` to ask is ``approval_missing``."""
    if approvals is None and confirm is None and pending is None:
        return {}  # nothing given, nothing waiting (every run without resume=)
    if confirm is not None and not callable(confirm):
        raise InvalidOptionsError(f"confirm must be callable, got {confirm!r}", option="confirm")
    if approvals is None:
        approvals = {}
    if not isinstance(approvals, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Approve | Deny) for k, v in approvals.items()
    ):
        raise InvalidOptionsError(
            "approvals must map tool-use ids to ml.Approve() or ml.Deny(...)",
            option="approvals",
        )
    waiting = [a.id for a in pending.approvals] if pending is not None else []
    unknown = sorted(set(approvals) - set(waiting))
    if unknown:
        raise InvalidOptionsError(
            f"approvals has a decision for {unknown[0]!r}, which no pending approval of "
            f"resume= names (pending: {waiting or 'none'})",
            code="unknown_approval",
            option="approvals",
            tool_use_id=unknown[0],
        )
    missing = [i for i in waiting if i not in approvals]
    if missing and confirm is None:
        raise InvalidOptionsError(
            f"resume= waits on decisions for {missing}; give each one in approvals= "
            "(ml.Approve() or ml.Deny(...)) or pass confirm=",
            code="approval_missing",
            option="approvals",
            tool_use_ids=missing,
        )
    return dict(approvals)
