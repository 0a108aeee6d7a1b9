"""The SSE decoder and the event dedupe, as properties; deep nesting fails by name.

Issue 7:

* "Inputs that end the session": an SSE frame whose JSON is nested 100k deep raised a raw
  ``RecursionError`` out of ``SSEDecoder.feed`` (and a history page the same out of the
  list read). Both are ``MalformedResponseError`` now, and a session that receives such a
  frame fails with it (and its partial result), not with a ``RecursionError``.
* Fuzzing (``@pytest.mark.fuzz``; ``make fuzz`` runs 10,000 examples each): any split of a
  valid byte stream into chunks decodes to the same events as the whole; arbitrary bytes
  yield only event dicts or the decoder's named errors; merging history into what the
  stream delivered (``_wire.fresh``, the fold every reconnect and catch-up uses) is
  idempotent and never loses or duplicates an event.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import anthropic
import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

import managedloop as ml
from managedloop.providers.claude import _wire
from managedloop.providers.claude._api import Api, settings
from managedloop.providers.claude._sse import SSEDecoder, StreamErrorFrameError
from managedloop.testing import ClaudeEmulator, say

from .conftest import WEATHER, provisioned

DEEP = 100_000


def _deep_frame(depth: int = DEEP) -> bytes:
    return b'event: agent.message\ndata: {"type":"agent.message","content":' + (
        b"[" * depth + b"]" * depth + b"}\n\n"
    )


# -- deep nesting ---------------------------------------------------------------------------
def test_a_deeply_nested_frame_is_a_named_error() -> None:
    decoder = SSEDecoder()
    with pytest.raises(ml.MalformedResponseError) as info:
        decoder.feed(_deep_frame())
    assert info.value.code == "malformed_event"
    assert info.value.context["event"] == "agent.message"


def test_a_deeply_nested_error_frame_keeps_its_raw_body() -> None:
    data = b"[" * DEEP + b"]" * DEEP
    with pytest.raises(StreamErrorFrameError) as info:
        SSEDecoder().feed(b"event: error\ndata: " + data + b"\n\n")
    assert info.value.body == data.decode()


@pytest.mark.anyio
async def test_a_deeply_nested_history_page_is_a_named_error() -> None:
    class Raw:
        http_response = httpx2.Response(200, content=b'{"data":' + b"[" * DEEP + b"]" * DEEP)

    async def fetch(cursor: str | None) -> Raw:
        return Raw()

    api = Api(anthropic.AsyncAnthropic(api_key="sk-test"), settings(api_key="sk-test"))
    with pytest.raises(ml.MalformedResponseError) as info:
        await api.list_raw("/v1/sessions/sesn_1/events", fetch)
    assert info.value.code == "malformed_response"


@pytest.mark.anyio
async def test_a_session_that_receives_a_deep_frame_fails_by_name(
    emu: ClaudeEmulator, client: Any
) -> None:
    def hostile(request: Any) -> Any:
        emu.inject_frame(_deep_frame())  # on the emulator's loop: before the reply
        return say("never read")

    emu.agent.script = [hostile]
    provider = await provisioned(client)
    with pytest.raises(ml.MalformedResponseError) as info:
        await ml.run(provider, agent=WEATHER, prompt="go", timeout=20)
    assert info.value.code == "malformed_event"
    assert info.value.partial_result is not None


# -- the decoder as properties --------------------------------------------------------------
_texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)
_events = st.fixed_dictionaries(
    {"type": st.sampled_from(["agent.message", "session.status_idle", "x.y"]), "text": _texts},
    optional={"id": st.from_regex(r"sevt_[A-Za-z0-9]{1,8}", fullmatch=True)},
)
_line_ends = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def _streams(draw: st.DrawFn) -> tuple[bytes, list[dict[str, Any]]]:
    """A valid SSE byte stream and the events it carries (with heartbeats between)."""
    out = b""
    expected: list[dict[str, Any]] = []
    for event in draw(st.lists(_events, max_size=6)):
        end = draw(_line_ends)
        if draw(st.booleans()):
            out += b": heartbeat" + end + end
        if draw(st.booleans()):
            out += b"event: ping" + end + b"data: {}" + end + end
        named = draw(st.booleans())
        body = {k: v for k, v in event.items() if not (named and k == "type")}
        lines = []
        if named:
            lines.append(b"event: " + event["type"].encode())
        if "id" in event and draw(st.booleans()):
            lines.append(b"id: " + event["id"].encode())
        lines.append(b"data: " + json.dumps(body).encode())
        out += end.join(lines) + end + end
        expected.append(event)
    return out, expected


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.fuzz
@given(_streams(), st.lists(st.integers(min_value=0), max_size=12))
def test_any_split_decodes_like_the_whole(
    stream: tuple[bytes, list[dict[str, Any]]], cuts: list[int]
) -> None:
    data, expected = stream
    whole = SSEDecoder().feed(data)
    decoder = SSEDecoder()
    chunked = [e for chunk in _split(data, cuts) for e in decoder.feed(chunk)]
    assert chunked == whole
    # A stream that ends in a bare CR keeps its last frame until the next byte (the CR may
    # be the first half of a CRLF); every other frame is decoded as sent.
    complete = expected if not data.endswith(b"\r") else expected[:-1]
    assert whole[: len(complete)] == complete
    assert whole == expected or data.endswith(b"\r")


_PIECES = [b"data: ", b"event: ", b"event: error", b"event: ping", b"id: x", b":", b"{", b"}"]
_PIECES += [b"[", b"]", b'"type"', b":1", b"\n", b"\r", b"\r\n", b"\n\n", b"\xff", b"{}"]
_noise = st.one_of(
    st.binary(max_size=200),
    st.lists(
        st.sampled_from(_PIECES),
        max_size=60,
    ).map(b"".join),
    st.integers(min_value=0, max_value=3000).map(
        lambda n: b"data: " + b"[" * n + b"]" * n + b"\n\n"
    ),
)


@pytest.mark.fuzz
@given(st.lists(_noise, max_size=6))
def test_arbitrary_bytes_raise_only_named_errors(chunks: list[bytes]) -> None:
    decoder = SSEDecoder()
    for chunk in chunks:
        try:
            events = decoder.feed(chunk)
        except (StreamErrorFrameError, ml.MalformedResponseError):
            return  # the connection maps both to named errors and drops the stream
        assert all(isinstance(e, dict) for e in events)


# -- dedupe after reconnects ----------------------------------------------------------------
_ids = st.lists(st.integers(min_value=0, max_value=30), unique=True, max_size=25)


@st.composite
def _deliveries(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """The session's true history (some events without an id, as an interrupt may be),
    what the live stream delivered before a drop (an in-order subsequence, with
    re-deliveries), and the history page read on reconnect (the history up to a point, with
    repeats across page boundaries)."""
    truth = [
        {"id": f"sevt_{i}", "type": "t", "processed_at": str(i)}
        if draw(st.integers(0, 9))
        else {"id": "", "type": "user.interrupt", "processed_at": str(i)}
        for i in draw(_ids)
    ]
    live = [e for e in truth if draw(st.booleans())]
    live += draw(st.lists(st.sampled_from(live), max_size=4)) if live else []
    upto = draw(st.integers(0, len(truth)))
    page = truth[:upto]
    page += draw(st.lists(st.sampled_from(page), max_size=4)) if page else []
    return truth, live, page


@pytest.mark.fuzz
@given(_deliveries())
def test_merging_history_after_a_reconnect_loses_and_repeats_nothing(delivery: Any) -> None:
    truth, live, page = delivery
    yielded = _wire.fresh(live, set())  # the stream, deduped as it is read
    seen = {_wire.event_key(e) for e in yielded}
    merged = _wire.fresh(page, seen)
    keys = [_wire.event_key(e) for e in yielded + merged]
    assert len(keys) == len(set(keys)), "no event yielded twice"
    expected = {_wire.event_key(e) for e in live + page}
    assert set(keys) == expected, "no event lost"
    # Consolidating twice equals once; a second history read adds nothing.
    assert _wire.fresh(merged, seen) == merged
    assert _wire.fresh(page, seen | {_wire.event_key(e) for e in merged}) == []
    # History order is kept for what the reconnect adds.
    order = [_wire.event_key(e) for e in truth]
    assert [order.index(k) for k in map(_wire.event_key, merged)] == sorted(
        order.index(k) for k in map(_wire.event_key, merged)
    )
