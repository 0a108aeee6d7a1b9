"""Property tests (issue 7 "Fuzzing"): the chat-response normaliser, the SSE stream reader
and tool-argument decoding through the Local host raise nothing but the library's named
errors, and any split of a valid stream decodes like the whole."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests_local_helpers import RecordingChat, completion, drive, open_conn, tc

import managedloop as ml
from managedloop.errors import ManagedLoopError
from managedloop.hosts import UserMessage
from managedloop.providers.local import Local, _wire
from managedloop.providers.local._connection import _assistant_message
from managedloop.providers.local._http import _read_stream
from managedloop.providers.local._types import ChatRequest, parse_chat_completion
from managedloop.testing._chat_render import sse_chunks

pytestmark = pytest.mark.fuzz

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=25,
)
# bodies shaped roughly like completions, so the normaliser's deeper branches are reached
message_like = st.fixed_dictionaries(
    {},
    optional={
        "role": json_values,
        "content": st.none() | st.text(max_size=10) | json_values,
        "tool_calls": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "id": json_values,
                    "function": st.fixed_dictionaries(
                        {}, optional={"name": json_values, "arguments": json_values}
                    )
                    | json_values,
                },
            )
            | json_values,
            max_size=3,
        )
        | json_values,
    },
)
completion_like = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(
            st.fixed_dictionaries(
                {}, optional={"message": message_like | json_values, "finish_reason": json_values}
            )
            | json_values,
            max_size=2,
        )
        | json_values,
        "usage": json_values,
    },
)


@given(st.one_of(json_values, completion_like))
def test_the_chat_response_normaliser_raises_only_named_errors(body: Any) -> None:
    try:
        response = parse_chat_completion(body)
    except ManagedLoopError:
        return
    message = _assistant_message(response.message)
    assert message["role"] == "assistant"
    for call in message.get("tool_calls", ()):
        assert isinstance(call["function"]["name"], str)
        decoded, error = ml.handler.decode_tool_input(call["function"]["arguments"])
        assert isinstance(decoded, dict)
        assert error is None or decoded == {}


class _Transport:
    """Enough of a transport for a connection fed by hand: it takes the request."""

    def writelines(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def abort(self) -> None:
        pass


def _read(data: bytes, cuts: list[int]) -> tuple[str, Any]:
    """Frame ``data`` as a chunked HTTP/1.1 answer body (one chunk per piece between
    ``cuts``), feed the wire bytes to Local's transport cut at the same offsets, and fold
    the stream with Local's reader."""

    async def main() -> tuple[str, Any]:
        pool = _wire.Pool(read_timeout=60, connect_timeout=60)
        conn = _wire._Conn(pool, ("http", "127.0.0.1", 9), True)
        conn.transport = _Transport()  # type: ignore[assignment]
        head = ready = conn.start(b"", b"", True)
        marks = [*sorted({c % (len(data) + 1) for c in cuts}), len(data)]
        body, start = [], 0
        for mark in marks:
            if mark > start:
                body.append(b"%x\r\n%s\r\n" % (mark - start, data[start:mark]))
                start = mark
        wire = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(body) + b"0\r\n\r\n"
        )
        start = 0
        for cut in [*sorted({c % (len(wire) + 1) for c in cuts}), len(wire)]:
            if cut > start:
                conn.data_received(wire[start:cut])
                start = cut
        await head
        assert ready.done()
        deltas: list[str] = []
        request = ChatRequest(
            model="m",
            messages=[],
            tools=[{"type": "function", "function": {"name": "get_weather"}}],
            on_delta=deltas.append,
        )
        try:
            response = await _read_stream(_wire.Response(conn), request, False)
        except ManagedLoopError as exc:
            return "error", (type(exc).__name__, exc.code)
        return "ok", ("".join(deltas), response.message, response.finish_reason, response.usage)

    return asyncio.run(main())


tool_call = st.tuples(
    st.sampled_from(["get_weather", "lookup", "get"]),
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
)


@given(
    text=st.text(max_size=40),
    calls=st.lists(tool_call, max_size=3),
    style=st.sampled_from(["once", "every_chunk", "split"]),
    chunk_size=st.integers(1, 9),
    usage=st.none() | st.just({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}),
    cuts=st.lists(st.integers(0, 4000), max_size=12),
)
def test_any_split_of_a_valid_stream_decodes_like_the_whole(
    text: str, calls: list[Any], style: Any, chunk_size: int, usage: Any, cuts: list[int]
) -> None:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ]
    finish = "tool_calls" if calls else "stop"
    frames = sse_chunks(
        message,
        finish,
        usage,
        "m",
        chunk_size=chunk_size,
        include_usage=True,
        name_style=style,
    )
    data = b"".join(frames)
    whole = _read(data, [])
    assert _read(data, [c % (len(data) + 1) for c in cuts]) == whole
    assert whole[0] == "ok"
    deltas, decoded, finish_reason, got_usage = whole[1]
    assert deltas == text
    assert decoded == message
    assert finish_reason == finish
    assert got_usage == usage


@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=6))
def test_arbitrary_bytes_on_the_stream_raise_only_named_errors(
    data: bytes, cuts: list[int]
) -> None:
    _read(data, cuts)  # _read lets only ManagedLoopError through as a value


@given(st.lists(json_values, max_size=4))
def test_arbitrary_json_chunks_raise_only_named_errors(chunks: list[Any]) -> None:
    data = (
        b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    )
    _read(data, [])


@given(st.text(max_size=60) | json_values.map(json.dumps))
def test_tool_arguments_through_the_local_host(arguments: str) -> None:
    async def main() -> Any:
        chat = RecordingChat([completion(None, "tool_calls", [tc("c1", "get_weather", arguments)])])
        spec = ml.AgentSpec(tools=[get_weather])
        conn = await open_conn(Local(model="m", chat=chat), spec)
        try:
            return (await drive(conn, UserMessage("go"))).result
        finally:
            await conn.aclose()

    turn = asyncio.run(main())
    (use,) = turn.custom_tool_uses
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        value = None
    if isinstance(value, dict) and use.input_error is None:
        assert use.input == value
    else:
        assert use.input_error is not None
        assert use.input == {}


@ml.tool
def get_weather(city: str = "x") -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


# Flat objects like most tool arguments, with few distinct values so equal pairs are common.
_small = st.sampled_from(["a", "b", "1", "", "\ud800"]) | st.sampled_from(
    [1, 1.0, True, None, 0, -0.0]
)
flat_args = st.dictionaries(st.sampled_from(["x", "y", "1"]), _small | json_values, max_size=3)


@given(flat_args, flat_args)
def test_duplicate_key_is_the_canonical_json(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two calls count as repeats exactly when their canonical JSON arguments are equal (the
    key skips the encoding for all-string objects)."""
    from managedloop.providers.local._connection import _canonical, _key

    # the arguments the Local turn keys are always decoded from JSON text
    a, b = json.loads(json.dumps(a)), json.loads(json.dumps(b))
    assert (_key("t", a) == _key("t", b)) == (_canonical(a) == _canonical(b))
    assert _key("t", a) != _key("u", a)
