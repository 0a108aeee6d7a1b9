"""Property tests (hypothesis) for the AgentCore frame path and Converse parsing (issue 7).

* any split of a valid event-stream byte stream decodes like the whole;
* arbitrary, truncated or corrupted bytes raise only botocore's frame errors, which map to
  named errors (``bad_frame``, or the host's exception frame), never an unexpected one;
* ``_converse.parse`` on arbitrary event sequences raises nothing but
  ``MalformedResponseError``; tool input assembled from fragments split anywhere equals
  the whole.

``make test`` runs each with the ``ci`` profile (300 examples), ``make fuzz`` with 10,000.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import botocore.session
import pytest
from hypothesis import given
from hypothesis import strategies as st

from managedloop.errors import MalformedResponseError, ManagedLoopError
from managedloop.providers.agentcore import _converse as cv
from managedloop.providers.agentcore._decoding import EventDecoder
from managedloop.providers.agentcore._errors import map_error
from managedloop.testing._agentcore import eventstream as es

pytestmark = pytest.mark.fuzz

_MODEL = botocore.session.get_session().get_service_model("bedrock-agentcore")
_OP = _MODEL.operation_model("InvokeHarness")

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
texts = st.text(max_size=30)


@st.composite
def valid_events(draw: st.DrawFn) -> list[tuple[str, dict[str, Any]]]:
    """A plausible turn, as (event type, body) pairs the model's event stream knows."""
    events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
    for piece in draw(st.lists(texts, max_size=4)):
        events.append(("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": piece}}))
    for i, name in enumerate(draw(st.lists(st.text(min_size=1, max_size=8), max_size=3))):
        uid = f"tooluse_{i}"
        events.append(
            (
                "contentBlockStart",
                {
                    "contentBlockIndex": i + 1,
                    "start": {"toolUse": {"toolUseId": uid, "name": name}},
                },
            )
        )
        events.append(
            (
                "contentBlockDelta",
                {"contentBlockIndex": i + 1, "delta": {"toolUse": {"input": draw(texts)}}},
            )
        )
        events.append(("contentBlockStop", {"contentBlockIndex": i + 1}))
    events.append(("messageStop", {"stopReason": draw(st.sampled_from(["end_turn", "tool_use"]))}))
    return events


def _decode(chunks: list[bytes]) -> list[dict[str, Any]]:
    decoder = EventDecoder(_OP)
    out: list[dict[str, Any]] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@given(valid_events(), st.lists(st.integers(min_value=0), max_size=12))
def test_any_split_of_a_valid_stream_decodes_like_the_whole(
    events: list[tuple[str, dict[str, Any]]], cuts: list[int]
) -> None:
    data = b"".join(es.event_frame(kind, body) for kind, body in events)
    whole = _decode([data])
    assert len(whole) == len(events)
    assert _decode(_split(data, cuts)) == whole


def _named(chunks: list[bytes]) -> None:
    """Decoding raises nothing, or an error that maps to a *named* frame/host error."""
    failure: Exception | None = None
    try:
        _decode(chunks)
    except Exception as exc:
        failure = exc
    if failure is not None:
        mapped = map_error(failure, operation="invoke_harness")
        assert isinstance(mapped, ManagedLoopError)
        assert mapped.code in ("bad_frame", "harness_stream_error"), (type(failure), failure)


@given(st.binary(max_size=512), st.lists(st.integers(min_value=0), max_size=6))
def test_arbitrary_bytes_raise_only_named_errors(data: bytes, cuts: list[int]) -> None:
    _named(_split(data, cuts))


@given(valid_events(), st.integers(min_value=0), st.integers(min_value=0, max_value=255))
def test_truncated_or_corrupted_frames_raise_only_named_errors(
    events: list[tuple[str, dict[str, Any]]], at: int, xor: int
) -> None:
    data = b"".join(es.event_frame(kind, body) for kind, body in events)
    _named([data[: at % (len(data) + 1)]])  # truncated: waits for more, never raises oddly
    i = at % len(data)
    _named([data[:i] + bytes([data[i] ^ (xor or 1)]) + data[i + 1 :]])  # one byte flipped


@given(st.text(max_size=64), st.binary(max_size=64), st.sampled_from(["event", "exception"]))
def test_frames_with_any_payload_raise_only_named_errors(
    kind: str, payload: bytes, message_type: str
) -> None:
    headers = {
        ":message-type": message_type,
        ":event-type" if message_type == "event" else ":exception-type": kind or "x",
        ":content-type": "application/json",
    }
    _named([es.frame(headers, payload)])


def _check_named(exc: MalformedResponseError) -> None:
    if exc.code != "duplicate_frame":
        raise AssertionError(f"unexpected code {exc.code!r}") from exc


envelopes = st.dictionaries(
    st.sampled_from(
        [
            "messageStart",
            "contentBlockStart",
            "contentBlockDelta",
            "contentBlockStop",
            "messageStop",
            "metadata",
            "other",
        ]
    ),
    json_values,
    max_size=2,
)


@given(st.lists(envelopes | json_values, max_size=20))
def test_parse_of_arbitrary_events_raises_only_named_errors(events: list[Any]) -> None:
    try:
        turn = cv.normalize(events)
    except MalformedResponseError as exc:
        _check_named(exc)
        return
    assert isinstance(turn.text, str)
    for use in turn.custom_tool_uses:
        assert isinstance(use.input, dict)


@st.composite
def shaped_events(draw: st.DrawFn) -> list[Any]:
    """Events with the right keys and arbitrary (often wrong) values inside."""
    index = st.none() | st.integers(-2, 3) | json_values
    kinds = st.sampled_from(["start", "text", "tool", "reasoning", "stop", "mstop", "meta"])
    out: list[Any] = []
    for kind in draw(st.lists(kinds, max_size=16)):
        i = draw(index)
        if kind == "start":
            tool = {"toolUseId": draw(st.text(max_size=3) | json_values), "name": draw(texts)}
            out.append({"contentBlockStart": {"contentBlockIndex": i, "start": {"toolUse": tool}}})
        elif kind == "text":
            out.append(
                {"contentBlockDelta": {"contentBlockIndex": i, "delta": {"text": draw(texts)}}}
            )
        elif kind == "tool":
            delta = {"toolUse": {"input": draw(texts | json_values)}}
            out.append({"contentBlockDelta": {"contentBlockIndex": i, "delta": delta}})
        elif kind == "reasoning":
            delta = {"reasoningContent": draw(json_values)}
            out.append({"contentBlockDelta": {"contentBlockIndex": i, "delta": delta}})
        elif kind == "stop":
            out.append({"contentBlockStop": {"contentBlockIndex": i}})
        elif kind == "mstop":
            out.append({"messageStop": {"stopReason": draw(json_values)}})
        else:
            out.append({"metadata": {"usage": draw(json_values)}})
    return out


@given(shaped_events())
def test_parse_of_well_keyed_but_wrong_values_raises_only_named_errors(events: list[Any]) -> None:
    try:
        cv.normalize(events)
    except MalformedResponseError as exc:
        _check_named(exc)


@given(
    st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    st.lists(st.integers(min_value=0), max_size=10),
)
def test_tool_input_from_fragments_split_anywhere_equals_the_whole(
    value: dict[str, Any], cuts: list[int]
) -> None:
    raw = json.dumps(value)
    points = sorted({c % (len(raw) + 1) for c in cuts})
    edges = [0, *points, len(raw)]
    fragments = [raw[a:b] for a, b in itertools.pairwise(edges)]
    events: list[Any] = [
        {"messageStart": {"role": "assistant"}},
        {
            "contentBlockStart": {
                "contentBlockIndex": 0,
                "start": {"toolUse": {"toolUseId": "t1", "name": "f", "type": "tool_use"}},
            }
        },
        *(
            {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"toolUse": {"input": f}}}}
            for f in fragments
        ),
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "tool_use"}},
    ]
    (use,) = cv.parse(events).tool_uses
    assert use.input_error is None
    assert use.input == json.loads(raw)


@pytest.mark.parametrize("message_type", ["event", "exception"])
@pytest.mark.parametrize("payload", [b"\x80", b"\xff\xfe{", b'{"text": "\xc3"}', b"{not json"])
def test_a_frame_whose_payload_is_not_utf8_json_is_a_bad_frame(
    payload: bytes, message_type: str
) -> None:
    # Found by `make fuzz` (kind='metadata', payload=b'\x80'): botocore's parser raised
    # UnicodeDecodeError, which surfaced as "transport_error: unexpected failure".
    headers = {
        ":message-type": message_type,
        ":event-type" if message_type == "event" else ":exception-type": "metadata",
        ":content-type": "application/json",
    }
    _named([es.frame(headers, payload)])
