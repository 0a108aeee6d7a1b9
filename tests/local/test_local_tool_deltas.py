"""Local's streamed tool-call arguments as host-contract deltas (``ToolInputDelta``): the
stream fold hands each arguments piece on as it arrives, keyed and named the same on each
piece of a call, whichever way the server sends the call's id and name; and the
emulator's chunks are Chat Completions chunks as the ``openai`` package types them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from managedloop.hosts import ToolInputDelta
from managedloop.providers.local._http import StreamFold
from managedloop.testing._chat_render import sse_chunks

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
ARGS = {"get_weather": json.dumps({"city": "Paris", "days": 3})}


def _message(*calls: tuple[str, str]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": ARGS[name]}}
            for cid, name in calls
        ],
    }


def _fold(frames: list[bytes]) -> tuple[StreamFold, list[ToolInputDelta], list[str]]:
    deltas: list[ToolInputDelta] = []
    text: list[str] = []
    fold = StreamFold(text.append, deltas.append, TOOLS)
    for frame in frames:
        for line in frame.split(b"\n"):
            fold.line(line)
    return fold, deltas, text


@pytest.mark.parametrize("names", ["once", "every_chunk", "split"])
def test_each_arguments_piece_is_a_delta_keyed_and_named_alike(names: str) -> None:
    message = _message(("call_abcdef", "get_weather"), ("call_ghijkl", "get_weather"))
    frames = sse_chunks(
        message, "tool_calls", None, "m", chunk_size=3, include_usage=False, name_style=names
    )
    fold, deltas, text = _fold(frames)
    assert "".join(text) == "Let me look."
    assert {d.id for d in deltas} == {"call_abcdef", "call_ghijkl"}
    assert {d.name for d in deltas} == {"get_weather"}
    for cid in ("call_abcdef", "call_ghijkl"):
        pieces = [d.partial_json for d in deltas if d.id == cid]
        assert len(pieces) > 1
        assert "".join(pieces) == ARGS["get_weather"]
    # what the fold ends with is unchanged: the pieces are the arguments it holds
    calls = fold.result().message["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == [ARGS["get_weather"]] * 2


def _chunk(tool_call: dict[str, Any]) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [tool_call]}}]}
    return b"data: " + json.dumps(chunk).encode()


def test_interleaved_calls_and_calls_without_ids() -> None:
    """Two calls whose chunks interleave by ``index``; no id: the key is ``#<index>``."""
    frames = [
        _chunk({"index": 0, "function": {"name": "get_weather", "arguments": '{"ci'}}),
        _chunk({"index": 1, "function": {"name": "get_weather", "arguments": '{"da'}}),
        _chunk({"index": 0, "function": {"arguments": 'ty": 1}'}}),
        _chunk({"index": 1, "function": {"arguments": 'ys": 2}'}}),
        b"data: [DONE]",
    ]
    _, deltas, _ = _fold(frames)
    assert [(d.id, d.partial_json) for d in deltas] == [
        ("#0", '{"ci'),
        ("#1", '{"da'),
        ("#0", 'ty": 1}'),
        ("#1", 'ys": 2}'),
    ]
    assert {d.name for d in deltas} == {"get_weather"}


def test_no_callback_no_deltas_and_the_fold_is_unchanged() -> None:
    message = _message(("call_1", "get_weather"))
    frames = sse_chunks(message, "tool_calls", None, "m", chunk_size=3, include_usage=False)
    fold = StreamFold(lambda _: None)
    for frame in frames:
        fold.line(frame.strip())
    assert fold.result().message["tool_calls"][0]["function"]["arguments"] == ARGS["get_weather"]


@pytest.mark.parametrize("names", ["once", "every_chunk", "split"])
def test_the_emulators_chunks_are_openai_chat_completion_chunks(names: str) -> None:
    from openai.types.chat import ChatCompletionChunk as chunk_type  # the dev extra's judge

    message = _message(("call_abcdef", "get_weather"))
    usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    frames = sse_chunks(
        message, "tool_calls", usage, "m", chunk_size=3, include_usage=True, name_style=names
    )
    parsed = [chunk_type.model_validate(json.loads(f.strip()[5:])) for f in frames[:-1]]
    assert frames[-1].strip() == b"data: [DONE]"
    calls = [tc for p in parsed for c in p.choices for tc in c.delta.tool_calls or ()]
    assert {tc.index for tc in calls} == {0}
    assert (
        "".join(tc.function.arguments or "" for tc in calls if tc.function) == ARGS["get_weather"]
    )
    if names == "once":  # OpenAI's own shape: the id and the name on the first chunk only
        assert next(tc.id for tc in calls) == "call_abcdef"
        assert all(tc.id is None for tc in calls[1:])
        assert calls[0].function is not None
        assert calls[0].function.name == "get_weather"
        assert all(tc.function is None or tc.function.name is None for tc in calls[1:])
    assert parsed[-1].usage is not None
    assert parsed[-1].usage.total_tokens == 7
