"""Tool calls as hostile or sloppy servers send them: malformed or null arguments, one id
used twice in one answer or again in a later turn (issue 7), and the directives the guards
send (issue 8)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests_local_helpers import RecordingChat, completion, tc

import managedloop as ml
from managedloop.providers.local import Local, duplicate_text
from managedloop.providers.local._anthropic import from_messages_response
from managedloop.testing import ScriptedChatModel, call, say

RAN: list[tuple[str, dict[str, Any]]] = []


@ml.tool
def delete_files(pattern: str = "*") -> str:
    """Delete files matching a pattern (all optional: defaults would be dangerous)."""
    RAN.append(("delete_files", {"pattern": pattern}))
    return f"deleted {pattern}"


@ml.tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    RAN.append(("add", {"a": a, "b": b}))
    return str(a + b)


AGENT = ml.AgentSpec(tools=[delete_files, add])


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("arguments", ["{not json", "null", "[1]"])
def test_unreadable_arguments_never_run_the_tool(arguments: str) -> None:
    chat = RecordingChat(
        [
            completion(None, "tool_calls", [tc("c1", "delete_files", arguments)]),
            completion("sorry"),
        ]
    )
    result = ml.run_sync(Local(model="m", chat=chat), agent=AGENT, prompt="go")
    assert RAN == []  # delete_files(pattern='*') never ran
    (answer,) = tool_messages(chat.requests[1])
    assert answer["tool_call_id"] == "c1"
    assert "arguments" in answer["content"]
    if arguments == "{not json":
        assert "arguments were not valid JSON" in answer["content"]
    assert json.loads(answer["content"])["isError"] is True
    (use,) = result.custom_tool_uses
    assert use.input_error is not None
    assert result.text == "sorry"


def test_a_repeated_malformed_call_is_not_answered_as_a_duplicate() -> None:
    chat = RecordingChat(
        [
            completion(None, "tool_calls", [tc("c1", "delete_files", "{bad")]),
            completion(None, "tool_calls", [tc("c2", "delete_files", "{bad")]),
            completion("gave up"),
        ]
    )
    result = ml.run_sync(Local(model="m", chat=chat), agent=AGENT, prompt="go")
    assert RAN == []
    answers = tool_messages(chat.requests[2])
    assert [a["tool_call_id"] for a in answers] == ["c1", "c2"]
    for answer in answers:
        assert "arguments were not valid JSON" in answer["content"]
        assert "duplicate" not in answer["content"]
    assert [u.id for u in result.custom_tool_uses] == ["c1", "c2"]
    assert all(e["type"] != "local.duplicate_tool_call" for e in result.events)


def test_two_calls_with_one_id_in_one_answer_both_run_and_both_answers_go_back() -> None:
    chat = RecordingChat(
        [
            completion(
                None,
                "tool_calls",
                [tc("dup", "add", '{"a": 1, "b": 1}'), tc("dup", "add", '{"a": 2, "b": 2}')],
            ),
            completion("2 and 4"),
        ]
    )
    result = ml.run_sync(Local(model="m", chat=chat), agent=AGENT, prompt="go")
    assert sorted(r[1]["a"] for r in RAN) == [1, 2]
    # the wire keeps the server's id, in call order: the model gets ['2', '4']
    answers = tool_messages(chat.requests[1])
    assert [(a["tool_call_id"], a["content"]) for a in answers] == [("dup", "2"), ("dup", "4")]
    uses = result.custom_tool_uses
    assert [u.input for u in uses] == [{"a": 1, "b": 1}, {"a": 2, "b": 2}]
    assert uses[0].id == "dup"
    assert uses[1].id is not None
    assert uses[1].id != "dup"  # a minted identity of its own


def test_a_call_id_reused_in_a_later_turn_still_runs_and_is_counted() -> None:
    chat = RecordingChat(
        [
            completion(None, "tool_calls", [tc("call_0", "add", '{"a": 1, "b": 1}')]),
            completion(None, "tool_calls", [tc("call_0", "add", '{"a": 5, "b": 5}')]),
            completion("done"),
        ]
    )
    result = ml.run_sync(Local(model="m", chat=chat), agent=AGENT, prompt="go")
    assert RAN == [("add", {"a": 1, "b": 1}), ("add", {"a": 5, "b": 5})]
    ids = [u.id for u in result.custom_tool_uses]
    assert len(ids) == 2
    assert len(set(ids)) == 2  # distinct: a per-session "once per id" store runs both
    answers = tool_messages(chat.requests[2])
    assert [(a["tool_call_id"], a["content"]) for a in answers] == [
        ("call_0", "2"),
        ("call_0", "10"),
    ]


def test_calls_without_an_id_get_one_on_the_wire_too() -> None:
    call_without_id = {"type": "function", "function": {"name": "add", "arguments": "{}"}}
    chat = RecordingChat([completion(None, "tool_calls", [call_without_id]), completion("ok")])
    ml.run_sync(Local(model="m", chat=chat), agent=AGENT, prompt="go")
    sent = chat.requests[1]["messages"]
    (assistant,) = [m for m in sent if m["role"] == "assistant"]
    (answer,) = tool_messages(chat.requests[1])
    assert assistant["tool_calls"][0]["id"]
    assert answer["tool_call_id"] == assistant["tool_calls"][0]["id"]


def test_a_null_tool_use_input_from_the_messages_api_is_an_input_error() -> None:
    body = {
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "delete_files", "input": None}],
        "stop_reason": "tool_use",
    }
    response = from_messages_response(body)
    arguments = response.message["tool_calls"][0]["function"]["arguments"]
    assert ml.handler.decode_tool_input(arguments)[1] is not None


# -- directives ----------------------------------------------------------------------------


def test_the_duplicate_directive_names_a_terminal_tool_only_when_there_is_one() -> None:
    assert "terminal tool" not in duplicate_text(None)
    assert "final answer" in duplicate_text(None)
    assert "call your terminal tool (submit) now" in duplicate_text("submit")
    model = ScriptedChatModel([call("add", {"a": 1, "b": 2})] * 2 + [say("3")])
    ml.run_sync(Local(model="m", chat=model), agent=AGENT, prompt="go")
    (answer,) = model.requests[2].tool_results
    assert json.loads(answer.text) == {"duplicate": True, "message": duplicate_text(None)}


def test_no_final_turn_directive_without_tools() -> None:
    chat = RecordingChat([completion("hi")])
    result = ml.run_sync(Local(model="m", chat=chat), agent=ml.AgentSpec(), prompt="q", max_turns=1)
    assert result.text == "hi"
    assert [m["role"] for m in chat.requests[0]["messages"]] == ["user"]
    assert all(e["type"] != "local.directive" for e in result.events)


def test_the_final_turn_directive_is_sent_exactly_once_before_the_last_call() -> None:
    model = ScriptedChatModel([call("add", {"a": i, "b": 0}) for i in range(6)])
    result = ml.run_sync(Local(model="m", chat=model), agent=AGENT, prompt="go", max_turns=3)
    assert result.reason == "max_turns"
    assert result.turns == len(model.requests) == 3
    finals = [e for e in result.events if e.get("role") == "final_turn"]
    assert len(finals) == 1
    assert model.requests[2].user_text is not None
    assert model.requests[2].user_text.startswith("FINAL TURN")
    # the third call's tool use never ran: it is not listed
    assert [u.input["a"] for u in result.custom_tool_uses] == [0, 1]
    assert [r[1]["a"] for r in RAN] == [0, 1]


@pytest.mark.anyio
async def test_a_resumed_history_with_a_repeated_id_pends_each_call_once() -> None:
    from tests_local_helpers import drive, open_conn

    from managedloop.hosts import ToolResults
    from managedloop.results import ToolResult

    transcript = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                tc("dup", "add", '{"a": 1, "b": 1}'),
                tc("dup", "add", '{"a": 2, "b": 2}'),
                tc(None, "add", '{"a": 3, "b": 3}'),  # type: ignore[arg-type]
            ],
        },
    ]
    chat = RecordingChat([completion("done")])
    conn = await open_conn(Local(model="m", chat=chat), AGENT, transcript=transcript)
    pending = conn.pending_tool_uses
    ids = [u.id for u in pending]
    assert [u.input["a"] for u in pending] == [1, 2, 3]
    assert ids[0] == "dup"
    assert len(set(ids)) == 3
    results = [ToolResult(tool_use_id=str(i), text=str(n)) for i, n in zip(ids, "246", strict=True)]
    await drive(conn, ToolResults(pending, results))
    answers = tool_messages(chat.requests[0])
    assert [(a["tool_call_id"], a["content"]) for a in answers] == [
        ("dup", "2"),
        ("dup", "4"),
        (None, "6"),
    ]
    await conn.aclose()
