"""Approvals in the loop (Local host on a scripted chat model: no server needed).

A tool held for a decision ends the request ``requires_action`` / ``approval_required``
with the pending state in the result; the turn's other calls run once and travel in that
state; a resume with ``approvals=`` runs the approved calls, answers denied ones with an
error result, and never runs anything twice. ``confirm=`` decides at once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import managedloop as ml
from managedloop.providers import Local
from managedloop.testing import ModelRequest, Reply, ScriptedChatModel, ToolCall, say

pytestmark = pytest.mark.anyio

RAN: list[str] = []


@ml.tool(requires_approval=True)
def transfer(amount: int) -> str:
    """Move money."""
    RAN.append(f"transfer {amount}")
    return f"moved {amount}"


@ml.tool(requires_approval=lambda args: "large amount" if args.get("amount", 0) > 100 else None)
def pay(amount: int) -> str:
    """Pay someone (amounts over 100 need a decision)."""
    RAN.append(f"pay {amount}")
    return f"paid {amount}"


@ml.tool
def balance() -> str:
    """The balance."""
    RAN.append("balance")
    return "42"


AGENT = ml.AgentSpec(name="bank", tools=[transfer, pay, balance])


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()


def both_calls() -> Reply:
    return Reply(
        tool_calls=[
            ToolCall(name="transfer", input={"amount": 5}, id="call_t"),
            ToolCall(name="balance", input={}, id="call_b"),
        ]
    )


def answer_with_results(request: ModelRequest) -> Reply:
    return say("; ".join(f"{r.tool_use_id}={r.text}" for r in request.tool_results))


def tool_messages(history: list[dict[str, Any]]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in history if m.get("role") == "tool"}


async def park(model: ScriptedChatModel, **options: Any) -> ml.SessionResult:
    return await ml.run(Local(model="m", chat=model), agent=AGENT, prompt="go", **options)


async def test_a_held_call_parks_the_request_with_the_pending_state() -> None:
    model = ScriptedChatModel([both_calls(), answer_with_results])
    parked = await park(model)
    assert parked.terminal is ml.Terminal.REQUIRES_ACTION
    assert parked.reason == "approval_required"
    assert parked.pending is not None
    (request,) = parked.pending.approvals
    assert (request.id, request.source, request.reason) == ("call_t", "tool", "requires_approval")
    assert request.tool_use.input == {"amount": 5}
    assert [u.id for u in parked.pending.tool_uses] == ["call_t", "call_b"]
    # The other call ran once; its result waits in the pending state, not on the wire.
    assert RAN == ["balance"]
    assert [(r.tool_use_id, r.text) for r in parked.pending.results] == [("call_b", "42")]
    assert [u.id for u in parked.custom_tool_uses] == ["call_b"]  # what ran
    assert parked.transcript is not None
    assert tool_messages(parked.transcript) == {}  # nothing answered yet
    assert len(model.requests) == 1
    # JSON round trip: the pending state survives to_dict / json / from_dict.
    again = ml.SessionResult.from_dict(json.loads(json.dumps(parked.to_dict())))
    assert again == parked


@pytest.mark.parametrize("as_dict", [False, True], ids=["result", "to_dict"])
async def test_approve_runs_the_call_once_and_keeps_the_other_result(as_dict: bool) -> None:
    model = ScriptedChatModel([both_calls(), answer_with_results])
    parked = await park(model)
    resume: Any = json.loads(json.dumps(parked.to_dict())) if as_dict else parked
    done = await park(model, resume=resume, approvals={"call_t": ml.Approve()})
    assert done.terminal is ml.Terminal.END_TURN
    assert done.text == "call_t=moved 5; call_b=42"
    assert RAN == ["balance", "transfer 5"]  # balance did not run again
    assert [u.id for u in done.custom_tool_uses] == ["call_t"]
    assert done.pending is None
    assert done.transcript is not None
    assert tool_messages(done.transcript) == {"call_t": "moved 5", "call_b": "42"}


async def test_deny_answers_the_model_with_an_error_result() -> None:
    model = ScriptedChatModel([both_calls(), answer_with_results])
    parked = await park(model)
    done = await park(model, resume=parked, approvals={"call_t": ml.Deny("not today")})
    assert RAN == ["balance"]  # the denied tool never ran
    assert done.transcript is not None
    content = tool_messages(done.transcript)["call_t"]
    assert json.loads(content) == {
        "error": "The call to 'transfer' was denied: not today",
        "isError": True,
    }
    (denied,) = [r for r in model.requests[1].tool_results if r.tool_use_id == "call_t"]
    assert denied.is_error


async def test_a_predicate_on_the_input_holds_only_what_it_says() -> None:
    model = ScriptedChatModel(
        [
            Reply(
                tool_calls=[
                    ToolCall(name="pay", input={"amount": 7}, id="small"),
                    ToolCall(name="pay", input={"amount": 700}, id="big"),
                ]
            ),
            answer_with_results,
        ]
    )
    parked = await park(model)
    assert parked.pending is not None
    assert [(a.id, a.reason) for a in parked.pending.approvals] == [("big", "large amount")]
    assert RAN == ["pay 7"]
    done = await park(model, resume=parked, approvals={"big": ml.Approve()})
    assert done.text == "small=paid 7; big=paid 700"
    assert RAN == ["pay 7", "pay 700"]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
async def test_confirm_decides_at_once(is_async: bool) -> None:
    seen: list[ml.ApprovalRequest] = []

    def decide(request: ml.ApprovalRequest) -> ml.Approve:
        seen.append(request)
        return ml.Approve()

    async def decide_async(request: ml.ApprovalRequest) -> ml.Approve:
        return decide(request)

    model = ScriptedChatModel([both_calls(), answer_with_results])
    done = await park(model, confirm=decide_async if is_async else decide)
    assert done.terminal is ml.Terminal.END_TURN
    assert done.text == "call_t=moved 5; call_b=42"
    assert [(r.id, r.tool_use.name) for r in seen] == [("call_t", "transfer")]
    assert sorted(RAN) == ["balance", "transfer 5"]


async def test_confirm_returning_none_leaves_the_decision_pending() -> None:
    model = ScriptedChatModel([both_calls(), answer_with_results])
    parked = await park(model, confirm=lambda request: None)
    assert parked.reason == "approval_required"
    assert parked.pending is not None
    assert [a.id for a in parked.pending.approvals] == ["call_t"]


async def test_a_partial_resume_keeps_what_was_decided() -> None:
    """Two held calls; the resume decides one by approvals= and confirm= leaves the other
    open: the approved one runs now, its result joins the pending state, the wire still
    gets nothing until the last decision."""
    model = ScriptedChatModel(
        [
            Reply(
                tool_calls=[
                    ToolCall(name="transfer", input={"amount": 1}, id="a"),
                    ToolCall(name="transfer", input={"amount": 2}, id="b"),
                ]
            ),
            answer_with_results,
        ]
    )
    parked = await park(model)
    assert parked.pending is not None
    assert [a.id for a in parked.pending.approvals] == ["a", "b"]
    still = await park(
        model, resume=parked, approvals={"a": ml.Approve()}, confirm=lambda request: None
    )
    assert still.reason == "approval_required"
    assert still.pending is not None
    assert [a.id for a in still.pending.approvals] == ["b"]
    assert [r.tool_use_id for r in still.pending.results] == ["a"]
    assert RAN == ["transfer 1"]
    assert len(model.requests) == 1  # nothing was sent to the model
    done = await park(model, resume=still, approvals={"b": ml.Deny()})
    assert done.text.startswith("a=moved 1; b=")
    assert RAN == ["transfer 1"]
    assert len(model.requests) == 2


async def test_a_handler_may_hold_a_call() -> None:
    calls: list[str] = []

    class Guarded:
        async def needs_approval(self, name: str, input: dict[str, Any], info: Any) -> str | None:
            return "ask the owner" if name == "delete" else None

        def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
            calls.append(name)
            return f"{name} done"

    tools = [ml.ToolDefinition(name="delete"), ml.ToolDefinition(name="look")]
    agent = ml.AgentSpec(name="h", tools=tools)
    model = ScriptedChatModel(
        [
            Reply(
                tool_calls=[
                    ToolCall(name="delete", id="d"),
                    ToolCall(name="look", id="l"),
                ]
            ),
            answer_with_results,
        ]
    )
    provider = Local(model="m", chat=model)
    parked = await ml.run(provider, agent=agent, prompt="go", handler=Guarded())
    assert parked.pending is not None
    assert [(a.id, a.reason) for a in parked.pending.approvals] == [("d", "ask the owner")]
    assert calls == ["look"]
    done = await ml.run(
        provider, agent=agent, handler=Guarded(), resume=parked, approvals={"d": ml.Approve()}
    )
    assert done.text == "d=delete done; l=look done"
    assert calls == ["look", "delete"]


async def test_an_approval_check_that_raises_holds_the_call() -> None:
    class Broken:
        def needs_approval(self, name: str, input: dict[str, Any], info: Any) -> bool:
            raise RuntimeError("policy service down")

        def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
            raise AssertionError("must not run")

    agent = ml.AgentSpec(name="h", tools=[ml.ToolDefinition(name="x")])
    model = ScriptedChatModel([Reply(tool_calls=[ToolCall(name="x", id="x1")])])
    parked = await ml.run(Local(model="m", chat=model), agent=agent, handler=Broken())
    assert parked.pending is not None
    assert parked.pending.approvals[0].reason == "the approval check raised RuntimeError"


async def test_confirm_returning_something_else_is_a_named_error() -> None:
    model = ScriptedChatModel([both_calls()])
    with pytest.raises(ml.ManagedLoopError) as info:
        await park(model, confirm=lambda request: True)
    assert info.value.code == "invalid_decision"
    assert RAN == []  # nothing ran on an invalid decision
    assert info.value.partial_result is not None


async def test_bad_decisions_are_named_errors_before_any_request() -> None:
    model = ScriptedChatModel([both_calls(), answer_with_results])
    parked = await park(model)
    asked = len(model.requests)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"resume": parked}, "approval_missing"),
        ({"resume": parked, "approvals": {}}, "approval_missing"),
        ({"resume": parked, "approvals": {"nope": ml.Approve()}}, "unknown_approval"),
        (
            {"resume": parked, "approvals": {"call_t": ml.Approve(), "x": ml.Deny()}},
            "unknown_approval",
        ),
        ({"approvals": {"call_t": ml.Approve()}}, "unknown_approval"),
        ({"resume": parked, "approvals": {"call_t": True}}, "invalid_opts"),
        ({"resume": parked, "approvals": ["call_t"]}, "invalid_opts"),
        ({"resume": parked, "confirm": "yes"}, "invalid_opts"),
        ({"resume": {"pending": "junk", "transcript": 5}}, "invalid_opts"),
    ]
    for options, code in cases:
        with pytest.raises(ml.InvalidOptionsError) as info:
            await park(model, **options)
        assert info.value.code == code, options
    assert len(model.requests) == asked  # no request was made
    assert RAN == ["balance"]


def test_decisions_round_trip_and_refuse_junk() -> None:
    from managedloop.results import decision_from_dict

    for decision in (ml.Approve(), ml.Deny(), ml.Deny("why")):
        assert decision_from_dict(json.loads(json.dumps(decision.to_dict()))) == decision
    with pytest.raises(ValueError):
        decision_from_dict({"decision": "maybe"})


def test_requires_approval_must_be_a_bool_or_a_predicate() -> None:
    with pytest.raises(ml.ToolDefinitionError):
        ml.tool(requires_approval="yes")(lambda: "x")  # type: ignore[arg-type]
