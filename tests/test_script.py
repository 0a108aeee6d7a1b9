"""The scripted-agent vocabulary every emulator shares."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import managedloop as ml
from managedloop.testing import (
    Fail,
    ModelRequest,
    Reply,
    ScriptedAgent,
    ScriptExhaustedError,
    ToolCall,
    call,
    calls,
    example_args,
    say,
)
from managedloop.testing.script import dumps_args


def test_builders() -> None:
    assert say("hi") == Reply(text="hi")
    assert call("t", {"a": 1}, id="x").tool_calls == [ToolCall(name="t", input={"a": 1}, id="x")]
    both = calls(("a", {"x": 1}), ToolCall(name="b", server=True), text="working")
    assert [c.name for c in both.tool_calls] == ["a", "b"]
    assert both.tool_calls[1].server
    assert both.text == "working"
    assert dumps_args({"a": 1}) == '{"a":1}'


def test_example_args_satisfy_schemas() -> None:
    @ml.tool
    def f(
        s: str,
        i: int,
        n: float,
        b: bool,
        items: list[int],
        maybe: int | None,
        color: str = "red",
        nested: dict[str, Any] | None = None,
    ) -> str:
        return ""

    args = example_args(f.definition.input_schema)
    assert args == {"s": "example", "i": 1, "n": 1.5, "b": True, "items": [], "maybe": 1}
    f.bind(args, ml.SessionInfo())  # validates

    schema = {
        "type": "object",
        "properties": {
            "kind": {"enum": ["a", "b"]},
            "fixed": {"const": 3},
            "ref": {"$ref": "#/$defs/Sub"},
            "multi": {"type": ["null", "integer"]},
            "obj": {"type": "object", "properties": {"k": {"type": "boolean"}}},
            "odd": {"type": "mystery"},
        },
        "$defs": {"Sub": {"type": "object", "properties": {"z": {"type": "string"}}}},
    }
    assert example_args(schema) == {
        "kind": "a",
        "fixed": 3,
        "ref": {"z": "example"},
        "multi": 1,
        "obj": {"k": True},
        "odd": "example",
    }


def test_scripted_agent_plays_steps_and_records_requests() -> None:
    seen: list[ModelRequest] = []

    def check(request: ModelRequest) -> Reply:
        seen.append(request)
        assert request.tool_results[0].text == "42"
        return say("done")

    agent = ScriptedAgent([call("t"), check, Fail(message="x")])
    assert agent.next_step(ModelRequest(turn=0, user_text="go")) == call("t")
    result = ml.ToolResult(tool_use_id="u", text="42")
    assert agent.next_step(ModelRequest(turn=1, tool_results=[result])) == say("done")
    assert isinstance(agent.next_step(ModelRequest(turn=2)), Fail)
    with pytest.raises(ScriptExhaustedError, match="turn 4"):
        agent.next_step(ModelRequest(turn=3))
    assert [r.turn for r in agent.requests] == [0, 1, 2, 3]
    assert seen[0].turn == 1
    assert agent.mint_id() == "call_0001"
    assert agent.mint_id("toolu_") == "toolu_0002"


def test_default_agent_calls_each_tool_once_then_answers() -> None:
    tools = [
        ml.ToolDefinition(
            name="a", input_schema={"type": "object", "properties": {"x": {"type": "integer"}}}
        ),
        ml.ToolDefinition(name="b"),
    ]
    agent = ScriptedAgent()
    first = agent.next_step(ModelRequest(turn=0, tools=tools, user_text="hi"))
    assert isinstance(first, Reply)
    assert [(c.name, dict(c.input)) for c in first.tool_calls] == [("a", {"x": 1}), ("b", {})]
    results = [ml.ToolResult(tool_use_id="1", text="r1"), ml.ToolResult(tool_use_id="2", text="r2")]
    assert agent.next_step(ModelRequest(turn=1, tool_results=results)) == say("Done. r1; r2")
    assert agent.next_step(ModelRequest(turn=2, user_text="more")) == say("You said: more")
    assert ScriptedAgent().next_step(ModelRequest(turn=0)) == say("Done.")


@pytest.mark.anyio
async def test_scripted_chat_model_reads_each_tools_list_and_snapshots_messages() -> None:
    # The model reads a tools list's definitions once and reuses them while the same list
    # comes back; a different list is read again. Each request keeps its own snapshot of
    # the messages and the step index counts assistant messages (a system one is read too).
    from managedloop.providers.local import ChatRequest, History
    from managedloop.testing import ScriptedChatModel

    def tool(name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": {}}}

    model = ScriptedChatModel([say("one"), say("two"), say("three")])
    history = History([{"role": "system", "content": "be brief"}, {"role": "user", "content": "a"}])
    first, second = [tool("t1")], [tool("t2")]
    for tools in (first, first, second):
        response = await model(ChatRequest(model="m", messages=history, tools=tools))
        history.append(response.message)
        history.append({"role": "user", "content": "next"})
    got = model.requests
    assert [[t.name for t in r.tools] for r in got] == [["t1"], ["t1"], ["t2"]]
    assert [r.turn for r in got] == [0, 1, 2]
    assert [len(r.messages) for r in got] == [2, 4, 6]
    assert {r.system for r in got} == {"be brief"}
    assert [r.user_text for r in got] == ["a", "next", "next"]
    assert dumps_args({"b": [1, "é"]}) == '{"b":[1,"\\u00e9"]}'  # json.dumps' escaping


ROLES = ["system", "user", "assistant", "tool"]


def _message(role: str, n: int) -> dict[str, Any]:
    if role == "tool":
        return {"role": "tool", "tool_call_id": f"c{n}", "content": f"result {n}"}
    return {"role": role, "content": f"{role} {n}"}


@pytest.mark.fuzz
@given(
    st.lists(
        st.tuples(st.sampled_from(["append", "read", "switch", "plain"]), st.sampled_from(ROLES)),
        max_size=40,
    )
)
def test_history_reader_reads_what_a_whole_read_does(ops: list[tuple[str, str]]) -> None:
    """The scripted chat model reads only the messages a History gained since its last
    request; its record is the one a read of the whole history gives, whatever the order
    of appends, reads and other histories (or plain lists) in between, and a record built
    later (ScriptedAgent.play's) is the one the history gave at the read."""
    from managedloop.providers.local import History
    from managedloop.testing._chat_render import HistoryReader, model_request

    reader = HistoryReader()
    histories = [History(), History([{"role": "system", "content": "first"}])]
    current = 0
    later: list[tuple[Any, ModelRequest]] = []
    for n, (op, role) in enumerate(ops):
        history = histories[current]
        if op == "append":
            history.append(_message(role, n))
            continue
        if op == "switch":
            current = 1 - current
            continue
        messages: Any = list(history) if op == "plain" else history
        expected = model_request({"model": "m", "messages": list(history)}, ())
        got = reader.request(messages, (), "m")
        assert got == expected
        assert got.messages == list(history)
        assert got.messages is not history  # a snapshot, not the growing history
        turn, record = reader.read(messages, (), "m")
        later.append((record, expected))  # built after every later append
        assert turn == expected.turn
    for record, expected in later:
        assert record() == expected  # what the history gave at the read, not now


def test_history_reader_reads_a_shorter_or_other_history_whole() -> None:
    from managedloop.providers.local import History
    from managedloop.testing._chat_render import HistoryReader

    reader = HistoryReader()
    long = History([_message("system", 0), _message("user", 1), _message("assistant", 2)])
    assert (reader.request(long, (), None).turn, reader.request(long, (), None).system) == (
        1,
        "system 0",
    )
    short = History([_message("user", 3)])  # another history: nothing carried over
    assert (reader.request(short, (), None).turn, reader.request(short, (), None).system) == (
        0,
        None,
    )
    del long[:]  # not an append (the contract forbids it): shorter than read, read whole
    long.append(_message("user", 4))
    reader.request(long, (), None)
    assert reader.request(long, (), None).turn == 0


@pytest.mark.anyio
async def test_scripted_chat_model_records_what_was_sent_at_each_call() -> None:
    """A record left unbuilt until ``requests`` is read (ScriptedAgent.play) is the one the
    history gave at the call, not what the history holds when the test reads it; a step
    that reads its request gets it at the call; an exhausted script still records the
    request it could not answer."""
    from managedloop.providers.local import ChatRequest, History
    from managedloop.testing import ScriptedChatModel
    from managedloop.testing._chat_render import model_request

    seen: list[ml.testing.ModelRequest] = []

    def reads(request: ml.testing.ModelRequest) -> Reply:
        seen.append(request)
        return say("checked")

    model = ScriptedChatModel([call("get_weather", {"city": "Paris"}), reads, say("done")])
    history = History([{"role": "system", "content": "be brief"}])
    expected = []
    for n, text in enumerate(["hi", "again"]):
        history.append({"role": "user", "content": text})
        expected.append(model_request({"model": "m", "messages": list(history)}))
        response = await model(ChatRequest(model="m", messages=history))
        history.append(dict(response.message))
        if n == 0:
            call_id = response.message["tool_calls"][0]["id"]
            history.append({"role": "tool", "tool_call_id": call_id, "content": "Sunny"})
            expected.append(model_request({"model": "m", "messages": list(history)}))
            await model(ChatRequest(model="m", messages=history))  # the `reads` step
            history.append({"role": "assistant", "content": "checked"})
            assert seen == [expected[-1]]  # built at the call, for the step to read
    with pytest.raises(ScriptExhaustedError):
        await model(ChatRequest(model="m", messages=history))
    expected.append(model_request({"model": "m", "messages": list(history)}))
    history.append({"role": "user", "content": "later"})  # after the calls: not in any record
    assert model.requests == expected
    assert [r.turn for r in model.requests] == [0, 1, 2, 3]
    assert model.requests[1].tool_results[0].text == "Sunny"
    assert model.requests[0].system == "be brief"
    model.agent.requests = []  # reset, as when requests was a plain attribute
    await model(ChatRequest(model="m", messages=History([{"role": "user", "content": "x"}])))
    assert [r.user_text for r in model.requests] == ["x"]


def test_a_tool_calls_arguments_are_its_input_as_compact_json_encoded_once() -> None:
    """The chat renderings' arguments text: the input as ``json.dumps`` with compact
    separators gives it, kept after the first read (a played script renders each call
    once per run), invisible to ``==`` and ``repr``; a replaced call encodes its own."""
    import dataclasses
    import json

    tc = ToolCall(name="get_weather", input={"city": "Zürich", "days": [1, 2]})
    before = repr(tc)
    assert tc.arguments == json.dumps(dict(tc.input), separators=(",", ":"))
    assert tc.arguments is tc.arguments  # kept
    assert repr(tc) == before
    assert tc == ToolCall(name="get_weather", input={"city": "Zürich", "days": [1, 2]})
    assert dataclasses.replace(tc, input={"city": "Bern"}).arguments == '{"city":"Bern"}'


def test_a_reply_renders_fresh_objects_from_parts_worked_out_once() -> None:
    """render_completion keeps a reply's Chat Completions parts on the reply (invisible to
    ``==`` and ``repr``) and builds fresh objects from them each time: a caller changing
    one rendering changes no other, and each play mints its own ids for calls without
    one (a given id stays); server-side calls never reach a chat endpoint."""
    import dataclasses

    from managedloop.testing._chat_render import render_completion

    agent = ScriptedAgent([])
    reply = Reply(
        text="checking",
        tool_calls=[
            ToolCall(name="get_weather", input={"city": "Paris"}),
            ToolCall(name="lookup", input={}, id="given"),
            ToolCall(name="web_search", server=True),
        ],
        usage=(7, 3),
    )
    before = repr(reply)
    first, finish, usage = render_completion(reply, agent, "m")
    assert repr(reply) == before
    assert reply == dataclasses.replace(reply)
    assert (first, finish, usage) == (
        {
            "role": "assistant",
            "content": "checking",
            "tool_calls": [
                {
                    "id": "call_0001",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "given",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"},
                },
            ],
        },
        "tool_calls",
        {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    )
    assert usage is not None
    first["tool_calls"][0]["function"]["name"] = "changed"
    first["tool_calls"].append({})
    first["content"] = "changed"
    usage["prompt_tokens"] = 0
    second, _, usage2 = render_completion(reply, agent, "m")
    assert second["content"] == "checking"
    assert [c["id"] for c in second["tool_calls"]] == ["call_0002", "given"]
    assert second["tool_calls"][0]["function"]["name"] == "get_weather"
    assert usage2 == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assert render_completion(Reply(usage=None, stop_reason="length"), agent, "m") == (
        {"role": "assistant", "content": None},
        "length",
        None,
    )


@pytest.mark.anyio
async def test_scripted_chat_model_records_after_the_list_was_cleared() -> None:
    """``requests`` builds every record still unbuilt, wherever it is in the list: a test
    may clear the list it was given (``emu.agent.requests.clear()``) and play on."""
    from managedloop.providers.local import ChatRequest, History
    from managedloop.testing import ScriptedChatModel

    model = ScriptedChatModel([say("one"), say("two"), say("three")])
    history = History([{"role": "user", "content": "a"}])
    for text in ("b", "c"):
        response = await model(ChatRequest(model="m", messages=history))
        history.append(dict(response.message))
        history.append({"role": "user", "content": text})
    assert [r.user_text for r in model.requests] == ["a", "b"]
    model.requests.clear()
    await model(ChatRequest(model="m", messages=history))
    assert [(r.turn, r.user_text) for r in model.requests] == [(2, "c")]
    assert all(isinstance(r, ModelRequest) for r in model.requests)
