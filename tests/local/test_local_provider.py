"""The Local connection, turn by turn (reference §9 ``providers/local_test``).

Deliberate changes from the reference, pinned here:

* the duplicate event carries the call id as ``tool_call_id`` (not ``id``);
* ``local.model_response`` also carries ``duplicates`` (how many calls were answered here);
* ``provision``/``teardown`` lines do not apply: Local needs no provisioning (no
  ``provision`` method; ``ml.provision`` reports unsupported);
* a chat function error surfaces as an exception (our failure convention), not a value.

Also here: reference §9 ``provider_conformance_test`` for Local (it implements the provider
and connection protocols of ``managedloop.hosts``, a non-streamed answer's text goes out as
one ``TextDelta`` after its event, and a minimal end_turn answer ends ``end_turn``).
"""

from __future__ import annotations

import json

import pytest
from tests_local_helpers import RecordingChat, completion, drive, open_conn, tc

import managedloop as ml
from managedloop.hosts import Connection, Provider, TextDelta, ToolResults, UserMessage
from managedloop.providers.local import Local
from managedloop.results import ToolResult, ToolUse

pytestmark = pytest.mark.anyio


@ml.tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


SPEC = ml.AgentSpec(system_prompt="Be brief.", tools=[lookup], model_config={"temperature": 0})


async def test_open_builds_history_tools_and_session_id() -> None:
    conn = await open_conn(Local(model="m", chat=RecordingChat([])), SPEC)
    assert conn.history == [{"role": "system", "content": "Be brief."}]
    assert conn.session_id is not None
    assert conn.session_id.startswith("local_")
    assert len(conn.session_id) == len("local_") + 16
    assert not conn.resumed
    conn2 = await open_conn(Local(model="m", chat=RecordingChat([])), SPEC)
    assert conn2.session_id != conn.session_id


async def test_kickoff_calls_the_model_with_model_messages_tools() -> None:
    chat = RecordingChat([completion("hi")])
    conn = await open_conn(Local(model="m", chat=chat), SPEC)
    events = await drive(conn, UserMessage("hello"))
    assert [e["type"] for e in events] == ["local.model_response"]
    sent = chat.requests[0]
    assert sent["model"] == "m"
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
    ]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look something up.",
                "parameters": lookup.definition.input_schema,
            },
        }
    ]
    assert sent["options"] == {"temperature": 0}  # spec model_config passes through
    assert [m["role"] for m in conn.history] == ["system", "user", "assistant"]


async def test_stop_normalizes_to_end_turn() -> None:
    conn = await open_conn(Local(model="m", chat=RecordingChat([completion("the answer")])))
    events = await drive(conn, UserMessage("q"))
    turn = events.result
    assert turn.terminal is ml.Terminal.END_TURN
    assert turn.text == "the answer"
    assert turn.stop_reason == "stop"
    assert turn.usage is not None
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (10, 5)
    assert turn.usage.raw == [{"prompt_tokens": 10, "completion_tokens": 5}]
    assert turn.events == events


async def test_tool_calls_normalize_to_requires_action_with_decoded_input() -> None:
    answer = completion(None, "tool_calls", [tc("c1", "lookup", '{"q": "x"}')])
    conn = await open_conn(Local(model="m", chat=RecordingChat([answer])), SPEC)
    turn = (await drive(conn, UserMessage("q"))).result
    assert turn.terminal is ml.Terminal.REQUIRES_ACTION
    assert turn.custom_tool_uses == [ToolUse(id="c1", name="lookup", input={"q": "x"})]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [('{"q": 1}', {"q": 1}), ("not json", {}), ("[1, 2]", {}), ("", {})],
)
async def test_arguments_decode_leniently(arguments: str, expected: dict[str, object]) -> None:
    answer = completion(None, "tool_calls", [tc("c1", "lookup", arguments)])
    conn = await open_conn(Local(model="m", chat=RecordingChat([answer])))
    turn = (await drive(conn, UserMessage("q"))).result
    assert turn.custom_tool_uses[0].input == expected


async def test_resume_appends_tool_messages_and_error_results_are_json_tagged() -> None:
    first = completion(None, "tool_calls", [tc("c1", "lookup", '{"q":"a"}'), tc("c2", "lookup")])
    chat = RecordingChat([first, completion("done")])
    conn = await open_conn(Local(model="m", chat=chat), SPEC)
    turn = (await drive(conn, UserMessage("q"))).result
    results = [
        ToolResult(tool_use_id="c1", text="found a"),
        ToolResult(tool_use_id="c2", text="bad input", is_error=True),
    ]
    events = await drive(conn, ToolResults(turn.custom_tool_uses, results))
    assert events.result.text == "done"
    tool_messages = [m for m in chat.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_messages == [
        {"role": "tool", "tool_call_id": "c1", "content": "found a"},
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": json.dumps({"error": "bad input", "isError": True}),
        },
    ]


async def test_missing_tool_result_is_a_provider_error() -> None:
    first = completion(None, "tool_calls", [tc("c1", "lookup")])
    conn = await open_conn(Local(model="m", chat=RecordingChat([first])))
    turn = (await drive(conn, UserMessage("q"))).result
    with pytest.raises(ml.ProviderError) as info:
        await drive(conn, ToolResults(turn.custom_tool_uses, []))
    assert info.value.code == "missing_tool_result"


async def test_chat_function_error_surfaces() -> None:
    boom = ml.APIStatusError("nope", status=400, body="bad")
    conn = await open_conn(Local(model="m", chat=RecordingChat([boom])))
    with pytest.raises(ml.APIStatusError) as info:
        await drive(conn, UserMessage("q"))
    assert info.value.status == 400


async def test_tool_calls_win_over_finish_reason_stop() -> None:
    answer = completion(None, "stop", [tc("c1", "lookup")])
    conn = await open_conn(Local(model="m", chat=RecordingChat([answer])))
    turn = (await drive(conn, UserMessage("q"))).result
    assert turn.terminal is ml.Terminal.REQUIRES_ACTION
    assert turn.stop_reason == "stop"


async def test_finish_reason_length_is_terminated() -> None:
    conn = await open_conn(Local(model="m", chat=RecordingChat([completion("cut", "length")])))
    turn = (await drive(conn, UserMessage("q"))).result
    assert turn.terminal is ml.Terminal.TERMINATED
    assert turn.stop_reason == "length"
    assert turn.text == "cut"


async def test_a_text_delta_follows_the_model_response_with_content_only() -> None:
    call = completion(None, "tool_calls", [tc("c1", "lookup")])
    chat = RecordingChat([completion("hello"), call])
    conn = await open_conn(Local(model="m", chat=chat), SPEC)
    items = [i async for i in conn.turn(UserMessage("q"))]
    assert [type(i).__name__ for i in items] == ["dict", "TextDelta", "TurnResult"]
    assert items[1] == TextDelta("hello")
    items = [i async for i in conn.turn(UserMessage("again", final_turn=True))]
    assert [type(i).__name__ for i in items] == ["dict", "dict", "TurnResult"]  # no text
    assert items[0]["type"] == "local.directive"


async def test_null_prompt_tokens_means_no_usage() -> None:
    answer = completion("x", usage={"prompt_tokens": None, "completion_tokens": None})
    conn = await open_conn(Local(model="m", chat=RecordingChat([answer])))
    assert (await drive(conn, UserMessage("q"))).result.usage is None


async def test_non_integer_completion_tokens_count_as_zero() -> None:
    answer = completion("x", usage={"prompt_tokens": 3, "completion_tokens": None})
    conn = await open_conn(Local(model="m", chat=RecordingChat([answer])))
    usage = (await drive(conn, UserMessage("q"))).result.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (3, 0)


async def test_malformed_response_is_named() -> None:
    chat = RecordingChat([{"choices": []}])
    conn = await open_conn(Local(model="m", chat=chat))
    with pytest.raises(ml.MalformedResponseError) as info:
        await drive(conn, UserMessage("q"))
    assert info.value.code == "malformed_chat_response"


async def test_no_final_turn_directive_unless_the_loop_marks_the_input() -> None:
    chat = RecordingChat([completion("a"), completion("b")])
    conn = await open_conn(Local(model="m", chat=chat), SPEC)
    for text in ("one", "two"):  # the host counts nothing: only the mark matters
        events = await drive(conn, UserMessage(text))
        assert [e["type"] for e in events] == ["local.model_response"]


async def test_dedup_set_resets_per_request() -> None:
    call = completion(None, "tool_calls", [tc("c1", "lookup", '{"q":"x"}')])
    again = completion(None, "tool_calls", [tc("c2", "lookup", '{"q":"x"}')])
    conn = await open_conn(Local(model="m", chat=RecordingChat([call, again])))
    await drive(conn, UserMessage("one"))
    turn = (await drive(conn, UserMessage("two"))).result
    assert [u.id for u in turn.custom_tool_uses] == ["c2"]  # surfaced, not deduped


async def test_outcome_is_unsupported_at_start() -> None:
    provider = Local(model="m", chat=RecordingChat([]))
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.run(provider, agent=SPEC, outcome={"description": "d", "rubric": "r"})
    assert info.value.code == "outcome_unsupported"


async def test_local_needs_no_provisioning() -> None:
    with pytest.raises(ml.UnsupportedError):
        await ml.provision(Local(model="m", chat=RecordingChat([])), SPEC)


async def test_model_falls_back_to_the_spec() -> None:
    chat = RecordingChat([completion("a"), completion("b")])
    spec = ml.AgentSpec(model="spec-model")
    await ml.run(Local(chat=chat), agent=spec, prompt="q")
    spec2 = ml.AgentSpec(model_config={"model": "config-model", "top_p": 0.5})
    await ml.run(Local(chat=chat), agent=spec2, prompt="q")
    assert [r["model"] for r in chat.requests] == ["spec-model", "config-model"]
    assert chat.requests[1]["options"] == {"top_p": 0.5}


async def test_no_model_anywhere_fails_before_any_request() -> None:
    chat = RecordingChat([])
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.run(Local(chat=chat), agent=ml.AgentSpec(), prompt="q")
    assert info.value.context["option"] == "model"
    assert chat.requests == []


async def test_user_messages_only() -> None:
    from managedloop.hosts import RawInput

    conn = await open_conn(Local(model="m", chat=RecordingChat([])))
    with pytest.raises(ml.UnsupportedError):
        await drive(conn, RawInput([{"type": "x"}]))


async def test_local_implements_the_provider_and_connection_protocols() -> None:
    provider = Local(model="m", chat=RecordingChat([]))
    assert isinstance(provider, Provider)
    assert (provider.name, provider.supports_outcomes, provider.supports_raw_events) == (
        "local",
        False,
        False,
    )
    conn = await open_conn(provider, SPEC)
    assert isinstance(conn, Connection)
    assert (conn.resumed, conn.pending_tool_uses) == (False, [])
    minimal = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}
    conn2 = await open_conn(Local(model="m", chat=RecordingChat([minimal])))
    turn = (await drive(conn2, UserMessage("q"))).result
    assert (turn.terminal, turn.text, turn.usage) == (ml.Terminal.END_TURN, "ok", None)
    with pytest.raises(ml.UnsupportedError):
        await conn.interrupt()
    await conn.aclose()
    await conn.aclose()  # idempotent
