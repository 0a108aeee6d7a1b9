"""Server-sent events read as the WHATWG spec says (``providers/local/_sse.py``).

Judges we did not write: sse-starlette's own encoder (what MCP servers and
llama-cpp-python's server send) writes the streams of the hypothesis property and the
streaming sessions, served by uvicorn, with each of its line separators (CRLF, LF and a
lone CR).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sse_starlette.event import ServerSentEvent as StarletteEvent

import managedloop as ml
from managedloop.providers.local import Local
from managedloop.providers.local._sse import EventTooLargeError, ServerSentEvent, SSEDecoder
from managedloop.testing import MockResponse, MockTransport


def decode(*chunks: bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.close()


# -- the spec, line by line --------------------------------------------------------------


@pytest.mark.parametrize("end", [b"\r\n", b"\n", b"\r"])
def test_every_line_end_splits_lines(end: bytes) -> None:
    stream = end.join([b"data: a", b"data: b", b"", b"data: c", b"", b""])
    assert [e.data for e in decode(stream)] == ["a\nb", "c"]


def test_a_crlf_split_between_chunks_is_one_line_end() -> None:
    # "data: a\r" | "\n" | "\r\n": one line end, then an empty line (dispatch)
    events = decode(b"data: a\r", b"\n", b"\r\n", b"data: b\r", b"\r")
    assert [e.data for e in events] == ["a", "b"]


def test_two_lone_crs_are_a_line_end_and_an_empty_line() -> None:
    assert [e.data for e in decode(b"data: x\r\rdata: y\r\r")] == ["x", "y"]


def test_fields_comments_and_their_spaces() -> None:
    stream = (
        b": a comment\n"
        b"event: update\n"
        b"id: 7\n"
        b"retry: 1500\n"
        b"data:no space\n"
        b"data:  two spaces\n"
        b"data\n"
        b"unknown: ignored\n"
        b"\n"
    )
    (event,) = decode(stream)
    assert event == ServerSentEvent(
        data="no space\n two spaces\n", event="update", id="7", retry=1500
    )


def test_the_last_event_id_persists_and_a_nul_id_is_ignored() -> None:
    events = decode(b"id: 1\ndata: a\n\ndata: b\n\nid: x\x00y\ndata: c\n\nid\ndata: d\n\n")
    assert [(e.data, e.id) for e in events] == [("a", "1"), ("b", "1"), ("c", "1"), ("d", "")]


def test_a_bad_retry_is_ignored_and_the_type_resets_per_event() -> None:
    events = decode(b"retry: 1x\nevent: e\ndata: a\n\ndata: b\n\nretry: \xc2\xb2\ndata: c\n\n")
    assert [(e.event, e.retry) for e in events] == [("e", None), *[("message", None)] * 2]


def test_an_event_with_no_data_is_not_dispatched() -> None:
    assert decode(b"event: ping\n\nid: 3\n\n: keep-alive\n\n") == []


@pytest.mark.parametrize("split", [0, 1, 2, 3])
def test_a_leading_bom_is_ignored_wherever_the_chunk_ends(split: bool) -> None:
    stream = b"\xef\xbb\xbfdata: a\n\n"
    assert [e.data for e in decode(stream[:split], stream[split:])] == ["a"]


def test_only_the_first_bom_is_dropped() -> None:
    # the second BOM is text: the line is the unknown field "\ufeffdata", so no data
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n") == []


def test_invalid_utf8_is_replaced_never_raised() -> None:
    (event,) = decode(b"data: \xff\xfe ok\n\n")
    assert event.data == "\ufffd\ufffd ok"


def test_the_end_of_the_stream_dispatches_an_unterminated_event() -> None:
    assert [e.data for e in decode(b"data: a\n\ndata: [DONE]")] == ["a", "[DONE]"]


def test_a_line_over_the_limit_is_refused_not_buffered() -> None:
    decoder = SSEDecoder(max_line=16)
    decoder.feed(b"data: xxxxxxxx")  # 14 bytes of an unfinished line: kept
    with pytest.raises(EventTooLargeError):
        decoder.feed(b"xxxxxxxx")  # 22: refused
    decoder = SSEDecoder(max_line=16)
    with pytest.raises(EventTooLargeError):
        decoder.feed(b"data: 0123456789\ndata: 0123456789\n")


# -- the property: any stream, split anywhere, the same events ---------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_name = st.text(st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)))


@st.composite
def streams(draw: Any) -> tuple[bytes, list[tuple[str, str, str, int | None]]]:
    """A stream sse-starlette encodes, and the (data, event, id) it must decode to."""
    sep = draw(st.sampled_from(["\r\n", "\n", "\r"]))
    events = draw(
        st.lists(
            st.tuples(
                _text,
                st.none() | _name.filter(bool),
                st.none() | _name,
                st.booleans(),
                st.none() | st.integers(0, 10**6),
            ),
            max_size=6,
        )
    )
    out: list[bytes] = []
    expected: list[tuple[str, str, str, int | None]] = []
    last_id, last_retry = "", None
    for data, event, id_, comment, retry in events:
        out.append(
            StarletteEvent(
                data, event=event, id=id_, retry=retry, comment="note" if comment else None, sep=sep
            ).encode()
        )
        if id_ is not None:
            last_id = id_
        if retry is not None:
            last_retry = retry
        # sse-starlette strips a leading space per field only by writing "data: "; the
        # data's own line breaks become "\n"
        joined = "\n".join(data.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
        expected.append((joined, event or "message", last_id, last_retry))
    return b"".join(out), expected


@pytest.mark.fuzz  # the "ci" profile's examples here, 10,000 in `make fuzz`
@given(streams(), st.lists(st.integers(min_value=0), max_size=8), st.booleans())
def test_any_stream_split_at_any_bytes_yields_the_same_events(
    case: tuple[bytes, list[tuple[str, str, str, int | None]]], cuts: list[int], bom: bool
) -> None:
    stream, expected = case
    if bom:
        stream = b"\xef\xbb\xbf" + stream
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    whole = [(e.data, e.event, e.id, e.retry) for e in decode(stream)]
    split = [(e.data, e.event, e.id, e.retry) for e in decode(*chunks)]
    byte_by_byte = [(e.data, e.event, e.id, e.retry) for e in decode(*(bytes([b]) for b in stream))]
    assert whole == split == byte_by_byte == expected


# -- streaming sessions against sse-starlette on uvicorn ---------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _chunk(**delta: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


class SseStarletteServer:
    """A Chat Completions stream written by sse-starlette's EventSourceResponse with
    ``sep`` and pretty-printed (multi-line) JSON data, on a real uvicorn server."""

    def __init__(self, sep: str, *, indent: int | None) -> None:
        import uvicorn
        from sse_starlette.sse import EventSourceResponse
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.routing import Route

        self.bodies: list[dict[str, Any]] = []

        async def chat(request: Request) -> Any:
            self.bodies.append(await request.json())

            async def events() -> AsyncIterator[dict[str, Any]]:
                for piece in ("Hel", "lo\n", "world"):
                    yield {"data": json.dumps(_chunk(content=piece), indent=indent)}
                yield {
                    "data": json.dumps(
                        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                        indent=indent,
                    ),
                    "event": "message",
                    "id": "9",
                }
                yield {"comment": "almost done"}
                yield {"data": "[DONE]"}

            return EventSourceResponse(events(), sep=sep, ping=600)

        app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
        self.port = _free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> SseStarletteServer:
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                break
            threading.Event().wait(0.01)
        assert self.server.started
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(
    params=[("\r\n", 2), ("\n", 2), ("\r", 2), ("\r", None)],
    ids=["crlf-multiline", "lf-multiline", "cr-multiline", "cr-one-line"],
)
def sse_server(request: pytest.FixtureRequest) -> Iterator[SseStarletteServer]:
    sep, indent = request.param
    with SseStarletteServer(sep, indent=indent) as server:
        yield server


@pytest.mark.parametrize("transport", ["default", "aiohttp"])
def test_a_streaming_session_reads_sse_starlette_events(
    sse_server: SseStarletteServer, transport: str
) -> None:
    from managedloop.providers.local import AiohttpTransport

    kwargs: dict[str, Any] = {"trust_env": False}
    if transport == "aiohttp":
        kwargs = {"transport": AiohttpTransport(trust_env=False)}
    provider = Local(
        model="m",
        base_url=f"http://127.0.0.1:{sse_server.port}/v1",
        api_key="-",
        stream=True,
        max_retries=0,
        **kwargs,
    )
    result = ml.run_sync(provider, agent=ml.AgentSpec(name="a"), prompt="hi")
    assert result.text == "Hello\nworld"
    assert result.stop_reason == "stop"
    assert sse_server.bodies[0]["stream"] is True


# -- the fold: multi-line data, events without a blank line, error events ------------------


def _stream_provider(*chunks: bytes) -> tuple[Local, MockTransport]:
    transport = MockTransport(lambda request: MockResponse(200, chunks=list(chunks)))
    provider = Local(
        model="m",
        base_url="http://model.test/v1",
        api_key="-",
        stream=True,
        max_retries=0,
        transport=transport,
    )
    return provider, transport


def test_data_lines_without_blank_lines_between_chunks_still_read() -> None:
    one = json.dumps(_chunk(content="a")).encode()
    two = json.dumps(_chunk(content="b")).encode()
    provider, _ = _stream_provider(b"data: " + one + b"\ndata: " + two + b"\ndata: [DONE]\n\n")
    assert ml.run_sync(provider, agent=ml.AgentSpec(name="a"), prompt="q").text == "ab"


def test_an_error_event_is_a_host_stream_error() -> None:
    provider, _ = _stream_provider(
        b'event: error\ndata: {"error": {"message": "model exploded", "type": "bad"}}\n\n'
    )
    with pytest.raises(ml.HostStreamError, match="model exploded"):
        ml.run_sync(provider, agent=ml.AgentSpec(name="a"), prompt="q")


def test_a_stream_with_no_done_is_a_dropped_stream() -> None:
    provider, transport = _stream_provider(b"data: " + json.dumps(_chunk(content="a")).encode())
    with pytest.raises(ml.TransportError) as failed:
        ml.run_sync(provider, agent=ml.AgentSpec(name="a"), prompt="q")
    assert failed.value.context["cause"] == "stream_dropped"
    assert len(transport.requests) == 1


def test_the_mock_transport_sees_the_request_the_wire_would_carry() -> None:
    provider, transport = _stream_provider(b"data: [DONE]\n\n")
    asyncio.run(ml.run(provider, agent=ml.AgentSpec(name="a"), prompt="q"))
    (request,) = transport.requests
    assert request.method == "POST"
    assert request.url == "http://model.test/v1/chat/completions"
    assert request.stream is True
    assert ("Accept-Encoding", "gzip") in request.headers
    assert ("Authorization", "Bearer -") in request.headers
    assert "Bearer" not in repr(request)
    assert json.loads(request.body)["stream"] is True
    assert transport.closed >= 1  # the pool closed with the last session
