"""Fixes from the hostile review of the Local host (each test failed before its fix)."""

from __future__ import annotations

from typing import Any

import pytest

import managedloop as ml
from managedloop.providers.local import ChatRequest, ChatResponse, Local
from managedloop.providers.local._connection import TRUNCATED_CALL
from managedloop.providers.local._http import StreamFold
from managedloop.testing import ChatEmulator, ToolCall, call, calls, say

pytestmark = pytest.mark.anyio


@ml.tool
def echo(s: str = "") -> str:
    """Echo."""
    return s


# -- a lone surrogate never poisons the history ---------------------------------------------


async def test_local_live_session_survives_a_lone_surrogate_from_the_server() -> None:
    with ChatEmulator([say("hi \ud800"), say("second")]) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, max_retries=0)
        async with ml.start(provider, agent=ml.AgentSpec(name="a"), prompt="x") as session:
            first = await session.result()
            await session.send("again")
            second = await session.result()
    assert first.text == "hi \ud800"  # what arrived is kept; only the wire gets U+FFFD
    assert second.text == "second"


@pytest.mark.parametrize(
    "reply",
    [
        calls(ToolCall(name="echo", input={}, id="c\ud800")),
        call("echo", {}, text="let me \udfff check"),
    ],
    ids=["id", "content"],
)
async def test_local_tool_turn_with_a_lone_surrogate_goes_on(reply: Any) -> None:
    with ChatEmulator([reply, say("done")]) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, max_retries=0)
        result = await ml.run(provider, agent=ml.AgentSpec(name="a", tools=[echo]))
    assert result.text == "done"


async def test_a_lone_surrogate_in_the_prompt_is_sent_as_the_replacement_character() -> None:
    with ChatEmulator([say("ok")]) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, max_retries=0)
        agent = ml.AgentSpec(name="a", system_prompt="sys \udc00")
        result = await ml.run(provider, agent=agent, prompt="a\ud800")
        body = emu.received[0]
    assert result.text == "ok"
    assert [m["content"] for m in body["messages"]] == ["sys \ufffd", "a\ufffd"]


def test_encode_replaces_lone_surrogates_and_keeps_valid_text() -> None:
    from managedloop.providers.local._types import encode

    assert encode({"a": "x\ud800y", "b": "\U0001f600"}) == (
        '{"a":"x\ufffdy","b":"\U0001f600"}'.encode()
    )


# -- a streamed tool-call delta whose function is not an object is malformed --------------


@pytest.mark.parametrize("function", ['"x"', "[1]", "5", "true"])
def test_stream_fold_refuses_a_non_object_function_by_name(function: str) -> None:
    fold = StreamFold(lambda _: None)
    line = (
        b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":'
        + function.encode()
        + b"}]}}]}"
    )
    with pytest.raises(ml.MalformedResponseError) as caught:
        fold.line(line)
    assert caught.value.code == "malformed_chat_response"


def test_stream_fold_still_takes_a_call_without_a_function() -> None:
    fold = StreamFold(lambda _: None)
    fold.line(b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1"}]}}]}')
    fold.line(b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":null}]}}]}')
    fold.line(b"data: [DONE]")
    assert fold.result().message["tool_calls"][0]["id"] == "c1"


# -- headers with CR/LF or other control characters are refused at construction -----------


@pytest.mark.parametrize(
    "headers",
    [
        {"X-A": "a\r\nX-B: 1"},
        {"X-A": "a\nb"},
        {"X-A": "a\x00"},
        {"X-A": "a\x7f"},
        {"X-A\r\nX-B": "1"},
        {"X A": "1"},
        {"": "1"},
        {"X-Ä": "1"},
    ],
    ids=[
        "crlf-value",
        "lf-value",
        "nul-value",
        "del-value",
        "crlf-name",
        "space",
        "empty",
        "non-token",
    ],
)
def test_local_header_with_a_control_character_is_invalid_opts(headers: dict[str, str]) -> None:
    with pytest.raises(ml.InvalidOptionsError) as caught:
        Local(model="m", base_url="http://127.0.0.1:9/v1", headers=headers)
    assert caught.value.code == "invalid_opts"
    assert caught.value.context["option"] == "headers"


def test_a_refused_header_value_is_never_shown() -> None:
    with pytest.raises(ml.InvalidOptionsError) as caught:
        Local(model="m", base_url="http://127.0.0.1:9/v1", headers={"X-Key": "sk-secret\n"})
    assert "sk-secret" not in str(caught.value)
    assert "sk-secret" not in repr(caught.value.context)


async def test_a_header_with_a_tab_and_token_punctuation_is_sent() -> None:
    with ChatEmulator([say("ok")]) as emu:
        provider = Local(
            model="m",
            base_url=emu.base_url,
            api_key=emu.api_key,
            max_retries=0,
            headers={"X-Odd_Name.~1": "a\tb"},
        )
        result = await ml.run(provider, agent=ml.AgentSpec(name="a"))
    assert result.text == "ok"


# -- a call from a truncated answer never runs with its defaults --------------------------

deleted: list[str] = []


@ml.tool
def delete_files(pattern: str = "*") -> str:
    """Delete the files matching pattern (every parameter optional)."""
    deleted.append(pattern)
    return f"deleted {pattern}"


def _cut(arguments: str, finish_reason: str | None = "length") -> ChatResponse:
    return ChatResponse(
        message={
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "delete_files", "arguments": arguments},
                }
            ],
        },
        finish_reason=finish_reason,
    )


async def _run_with(first: ChatResponse) -> tuple[ml.SessionResult, list[list[dict[str, Any]]]]:
    done = ChatResponse(message={"role": "assistant", "content": "ok"}, finish_reason="stop")
    answers = iter([first, done])
    sent: list[list[dict[str, Any]]] = []  # each request's messages, as sent

    async def chat(request: ChatRequest) -> ChatResponse:
        sent.append(list(request.messages))  # the history grows after the call
        return next(answers)

    agent = ml.AgentSpec(name="a", tools=[delete_files])
    result = await ml.run(Local(model="m", chat=chat), agent=agent)
    return result, sent


@pytest.mark.parametrize("arguments", ["", "  ", '{"pattern": "*.t', "[1]"])
async def test_a_call_truncated_before_its_arguments_never_runs(arguments: str) -> None:
    deleted.clear()
    result, sent = await _run_with(_cut(arguments))
    assert deleted == []
    assert result.text == "ok"
    answer = sent[1][-1]
    assert answer["role"] == "tool"
    assert answer["tool_call_id"] == "c1"
    assert TRUNCATED_CALL in answer["content"]


async def test_a_truncated_answer_whose_call_arguments_are_complete_runs_it() -> None:
    deleted.clear()
    await _run_with(_cut('{"pattern": "*.tmp"}'))
    assert deleted == ["*.tmp"]


@pytest.mark.parametrize("finish_reason", ["tool_calls", "stop", None])
async def test_empty_arguments_in_a_complete_answer_still_mean_no_arguments(
    finish_reason: str | None,
) -> None:
    deleted.clear()
    await _run_with(_cut("", finish_reason))
    assert deleted == ["*"]


async def test_a_call_folded_from_a_stream_cut_before_its_arguments_never_runs() -> None:
    deleted.clear()
    fold = StreamFold(lambda _: None)
    for line in (
        b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1",'
        b'"function":{"name":"delete_files","arguments":""}}]}}]}',
        b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}',
        b"data: [DONE]",
    ):
        fold.line(line)
    result, sent = await _run_with(fold.result())
    assert result.text == "ok"
    assert deleted == []
    assert TRUNCATED_CALL in sent[1][-1]["content"]
