"""Loop guards for weak local models (reference §9 ``providers/local_guards_test``, §4.6).

Deliberate changes from the reference, pinned here:

* **duplicate-only turns continue the loop** (reference §11 item 1): when every call of a
  response is a duplicate, the connection answers them itself and makes the next model call
  inside the same turn, so a real session reaches ``end_turn`` instead of failing with
  ``unresolved_requires_action``. The reference's "requires_action with zero uses" turn
  only remains when the per-request bound (``max_turns`` model calls) is hit;
* ``max_turns=N`` allows exactly N turns (the core's rule), and the final-turn directive
  fires at most once per request, before the model call that would reach ``max_turns``
  (the loop marks that call's input ``final_turn``; the host keeps no count of its own).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests_local_helpers import RecordingChat, completion, drive, open_conn, tc

import managedloop as ml
from managedloop.hosts import ToolResults, UserMessage
from managedloop.providers.local import (
    Local,
    corrective_text,
    duplicate_text,
    final_turn_text,
)
from managedloop.results import ToolResult
from managedloop.testing import ScriptedChatModel, call, calls, say

pytestmark = pytest.mark.anyio


@ml.tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


@ml.tool
def finish(answer: str) -> str:
    """Finish with an answer."""
    return "ok"


SPEC = ml.AgentSpec(tools=[lookup, finish], terminal_tool="finish")


async def test_duplicate_call_is_self_answered_and_the_next_call_sees_the_directive() -> None:
    chat = RecordingChat(
        [
            completion(None, "tool_calls", [tc("c1", "lookup", '{"q":"x"}')]),
            completion(None, "tool_calls", [tc("c2", "lookup", '{"q": "x"}')]),  # same key
            completion("done"),
        ]
    )
    conn = await open_conn(Local(model="m", chat=chat), SPEC)
    turn = (await drive(conn, UserMessage("go"))).result
    events = await drive(
        conn, ToolResults(turn.custom_tool_uses, [ToolResult(tool_use_id="c1", text="found x")])
    )
    # one turn, one model call: the duplicate response and its self-answer
    assert [e["type"] for e in events] == ["local.duplicate_tool_call", "local.model_response"]
    assert events[0] == {
        "type": "local.duplicate_tool_call",
        "tool_call_id": "c2",
        "name": "lookup",
        "input": {"q": "x"},
    }
    assert "tool_calls" not in events[1]["message"]  # only fresh calls are shown
    assert events[1]["duplicates"] == 1
    turn = events.result
    assert turn.terminal is ml.Terminal.REQUIRES_ACTION
    assert turn.host_answered
    assert turn.custom_tool_uses == []
    assert len(chat.requests) == 2
    # the loop asks again with an empty resume: that is the next turn and model call
    events = await drive(conn, ToolResults([], []))
    assert [e["type"] for e in events] == ["local.model_response"]
    last_sent = chat.requests[2]["messages"]
    assert last_sent[-1] == {
        "role": "tool",
        "tool_call_id": "c2",
        "content": json.dumps({"duplicate": True, "message": duplicate_text("finish")}),
    }
    assert "call your terminal tool (finish) now" in duplicate_text("finish")
    turn = events.result
    assert turn.terminal is ml.Terminal.END_TURN
    assert turn.text == "done"
    assert not turn.host_answered


async def test_mixed_turn_surfaces_only_fresh_calls() -> None:
    chat = RecordingChat(
        [
            completion(None, "tool_calls", [tc("c1", "lookup", '{"q":"x"}')]),
            completion(
                None, "tool_calls", [tc("c2", "lookup", '{"q":"x"}'), tc("c3", "lookup", "{}")]
            ),
        ]
    )
    conn = await open_conn(Local(model="m", chat=chat), SPEC)
    turn = (await drive(conn, UserMessage("go"))).result
    events = await drive(
        conn, ToolResults(turn.custom_tool_uses, [ToolResult(tool_use_id="c1", text="r")])
    )
    turn = events.result
    assert turn.terminal is ml.Terminal.REQUIRES_ACTION
    assert [u.id for u in turn.custom_tool_uses] == ["c3"]
    assert len(chat.requests) == 2  # fresh calls exist: no extra model call
    # the history keeps the assistant message with all its calls
    assistant = [m for m in conn.history if m["role"] == "assistant"][-1]
    assert [c["id"] for c in assistant["tool_calls"]] == ["c2", "c3"]


def test_duplicate_only_turn_continues_a_real_session() -> None:
    """Reference §11 item 1: the reference ended here with unresolved_requires_action."""
    model = ScriptedChatModel(
        [
            call("lookup", {"q": "x"}),
            call("lookup", {"q": "x"}),  # a duplicate: answered by the guard
            call("lookup", {"q": "x"}),  # and again
            say("the answer"),
        ]
    )
    result = ml.run_sync(Local(model="m", chat=model), agent=SPEC, prompt="go")
    assert result.terminal is ml.Terminal.END_TURN
    assert result.reason is None
    assert result.text == "the answer"
    assert result.turns == 4  # every model call is a turn, the re-asks included
    assert [u.input for u in result.custom_tool_uses] == [{"q": "x"}]
    kinds = [e["type"] for e in result.events]
    assert kinds.count("local.duplicate_tool_call") == 2
    assert kinds.count("local.model_response") == 4
    for request in model.requests[2:]:  # each follow-up call sees its duplicate answered
        assert [json.loads(r.text)["duplicate"] for r in request.tool_results] == [True]


def test_duplicate_loop_is_bounded_by_max_turns() -> None:
    model = ScriptedChatModel([call("lookup", {"q": "x"})] * 10)
    result = ml.run_sync(Local(model="m", chat=model), agent=SPEC, prompt="go", max_turns=4)
    assert result.terminal is ml.Terminal.TERMINATED
    assert result.reason == "max_turns"  # the real reason, not unresolved_requires_action
    assert len(model.requests) == 4  # never more model calls than max_turns
    assert result.turns == 4
    assert [u.input for u in result.custom_tool_uses] == [{"q": "x"}]  # ran once


async def test_two_consecutive_errors_inject_the_corrective() -> None:
    chat = RecordingChat(
        [
            completion(None, "tool_calls", [tc("c1", "lookup", '{"q":1}')]),
            completion(None, "tool_calls", [tc("c2", "lookup", '{"q":2}')]),
            completion("ok"),
        ]
    )
    conn = await open_conn(Local(model="m", chat=chat), SPEC)
    turn = (await drive(conn, UserMessage("go"))).result
    err1 = ToolResult(tool_use_id="c1", text="bad q", is_error=True)
    events = await drive(conn, ToolResults(turn.custom_tool_uses, [err1]))
    assert "local.directive" not in [e["type"] for e in events]
    turn = events.result
    err2 = ToolResult(tool_use_id="c2", text="still bad", is_error=True)
    events = await drive(conn, ToolResults(turn.custom_tool_uses, [err2]))
    text = corrective_text("lookup", "still bad")
    assert events[0] == {"type": "local.directive", "role": "corrective", "text": text}
    assert chat.requests[2]["messages"][-1] == {"role": "user", "content": text}
    assert text == (
        "STOP — the lookup tool rejected your input again: still bad. You must change your "
        "input to fix THIS specific error before calling lookup again (or call your terminal "
        "tool)."
    )


async def test_error_success_error_is_not_consecutive() -> None:
    chat = RecordingChat(
        [completion(None, "tool_calls", [tc(f"c{i}", "lookup", f'{{"q":{i}}}')]) for i in range(3)]
        + [completion("ok")]
    )
    conn = await open_conn(Local(model="m", chat=chat), SPEC)
    turn = (await drive(conn, UserMessage("go"))).result
    outcomes = [True, False, True]
    all_events: list[dict[str, Any]] = []
    for i, is_error in enumerate(outcomes):
        result = ToolResult(tool_use_id=f"c{i}", text="e", is_error=is_error)
        events = await drive(conn, ToolResults(turn.custom_tool_uses, [result]))
        all_events += events
        turn = events.result
    assert "local.directive" not in [e["type"] for e in all_events]


async def test_final_turn_directive_names_the_terminal_tool() -> None:
    chat = RecordingChat([completion(None, "tool_calls", [tc("c1", "lookup")]), completion("last")])
    conn = await open_conn(Local(model="m", chat=chat), SPEC)
    first = await drive(conn, UserMessage("go"))
    assert "local.directive" not in [e["type"] for e in first]
    turn = first.result
    # The loop marks the input of the last turn max_turns allows; the host only acts on it.
    results = [ToolResult(tool_use_id="c1", text="r")]
    events = await drive(conn, ToolResults(turn.custom_tool_uses, results, final_turn=True))
    text = final_turn_text("finish")
    assert events[0] == {"type": "local.directive", "role": "final_turn", "text": text}
    assert chat.requests[1]["messages"][-1] == {"role": "user", "content": text}
    assert text == (
        "FINAL TURN: you are about to reach the maximum number of turns. You MUST call your "
        "terminal tool (finish) now with the information you have already gathered. Do not "
        "call any other tool."
    )
    assert final_turn_text(None) == (
        "FINAL TURN: you are about to reach the maximum number of turns. You MUST produce your "
        "final answer now with the information you have already gathered. Do not call any "
        "other tool."
    )


def test_max_turns_one_sends_the_directive_on_the_only_call() -> None:
    model = ScriptedChatModel([say("x")])
    result = ml.run_sync(Local(model="m", chat=model), agent=SPEC, prompt="go", max_turns=1)
    assert result.terminal is ml.Terminal.END_TURN
    assert model.requests[0].user_text is not None
    assert model.requests[0].user_text.startswith("FINAL TURN")


def test_full_run_through_local() -> None:
    seen: list[dict[str, Any]] = []

    @ml.tool
    def add(a: int, b: int) -> str:
        """Add."""
        seen.append({"a": a, "b": b})
        return str(a + b)

    model = ScriptedChatModel([call("add", {"a": 2, "b": 3}), say("the answer")])
    agent = ml.AgentSpec(tools=[add])
    result = ml.run_sync(Local(model="m", chat=model), agent=agent, prompt="2+3?")
    assert result.terminal is ml.Terminal.END_TURN
    assert result.text == "the answer"
    assert result.turns == 2
    assert len(result.custom_tool_uses) == 1
    assert result.session_id is not None
    assert result.session_id.startswith("local_")
    assert seen == [{"a": 2, "b": 3}]
    assert [e["type"] for e in result.events].count("local.model_response") == 2
    assert model.requests[1].tool_results[0].text == "5"


def test_parallel_tool_calls_in_one_turn() -> None:
    model = ScriptedChatModel([calls(("lookup", {"q": "a"}), ("lookup", {"q": "b"})), say("ok")])
    result = ml.run_sync(Local(model="m", chat=model), agent=SPEC, prompt="go")
    assert [u.input["q"] for u in result.custom_tool_uses] == ["a", "b"]
    assert [r.text for r in model.requests[1].tool_results] == ["found a", "found b"]


def test_tool_error_reaches_the_model_as_json_payload() -> None:
    @ml.tool
    def broken(x: int) -> str:
        """Always fails."""
        raise ml.ToolError("no such x")

    model = ScriptedChatModel([call("broken", {"x": 1}), say("sorry")])
    ml.run_sync(Local(model="m", chat=model), agent=ml.AgentSpec(tools=[broken]), prompt="go")
    result = model.requests[1].tool_results[0]
    assert result.is_error
    assert json.loads(result.text) == {"error": "no such x", "isError": True}


def test_scripted_model_assertions_fail_the_run() -> None:
    def check(request: object) -> object:
        raise AssertionError("the model was sent the wrong prompt")

    model = ScriptedChatModel([check])
    with pytest.raises(ml.ProviderError) as info:
        ml.run_sync(Local(model="m", chat=model), agent=SPEC, prompt="go")
    assert isinstance(info.value.__cause__, AssertionError)
    assert "wrong prompt" in str(info.value)
    assert len(model.errors) == 1


def test_scripted_model_streams_deltas() -> None:
    deltas: list[str] = []

    class Handler:
        def handle_tool_call(self, name: str, input: dict[str, Any], info: object) -> str:
            return "r"

        def handle_event(self, event: dict[str, Any], info: object) -> None:
            if event["type"] == "managedloop.text_delta":
                deltas.append(event["text"])

    model = ScriptedChatModel([say("hello streaming world")], chunk_size=6)
    result = ml.run_sync(
        Local(model="m", chat=model, stream=True), agent=SPEC, prompt="go", handler=Handler()
    )
    assert deltas == ["hello ", "stream", "ing wo", "rld"]
    assert result.text == "hello streaming world"
