"""Every frame the emulator's encoder produces decodes with botocore's own decoder.

§9 agent_core/event_stream_test, adapted on purpose: decoding is botocore's (DESIGN.md),
so the lines become checks of *its* behaviour on our frames: a complete frame decodes; a
frame split anywhere (mid-prelude included) decodes once; ``:event-type`` wraps the
payload; exception and error frames raise ``EventStreamError`` with the member name / header
code and message. Deliberate differences: botocore *raises* ``ChecksumMismatch`` on a bad
CRC instead of dropping the frame (we map it to ``bad_frame`` and retry the turn,
test_faults); headerless or non-JSON event frames are not produced by the service and
botocore drops unknown event types (tested), so the reference's pass-through cases do not
apply. agent_core/sig_v4_test is covered by the emulator verifying every request with
botocore's signer (test_provider: a bad signature is a 403 ``AuthenticationError``;
test_secrets: a session token travels as ``x-amz-security-token``).
"""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest
from botocore.eventstream import ChecksumMismatch, EventStream, EventStreamBuffer
from botocore.exceptions import EventStreamError

from managedloop.testing._agentcore import eventstream as es


class _Raw:
    """A urllib3-like body that yields the given chunks from ``stream()``."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.closed = False

    def stream(self) -> Any:
        yield from self.chunks

    def close(self) -> None:
        self.closed = True


def _decode(chunks: list[bytes], operation: str = "InvokeHarness") -> list[dict[str, Any]]:
    session = botocore.session.get_session()
    model = session.get_service_model("bedrock-agentcore")
    op = model.operation_model(operation)
    shape = op.output_shape.members["stream"]
    from botocore.parsers import EventStreamJSONParser

    return list(EventStream(_Raw(chunks), shape, EventStreamJSONParser(), operation))


CANONICAL = [
    es.event_frame("messageStart", {"role": "assistant"}),
    es.event_frame(
        "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Let me check. "}}
    ),
    es.event_frame("contentBlockStop", {"contentBlockIndex": 0}),
    es.event_frame(
        "contentBlockStart",
        {
            "contentBlockIndex": 1,
            "start": {
                "toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "type": "tool_use"}
            },
        },
    ),
    es.event_frame(
        "contentBlockDelta",
        {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"city": "Sea'}}},
    ),
    es.event_frame(
        "contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": 'ttle"}'}}}
    ),
    es.event_frame("contentBlockStop", {"contentBlockIndex": 1}),
    es.event_frame("messageStop", {"stopReason": "tool_use"}),
    es.event_frame(
        "metadata",
        {
            "usage": {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7},
            "metrics": {"latencyMs": 9},
        },
    ),
]


def test_canonical_tool_turn_decodes_with_botocore() -> None:
    events = _decode(CANONICAL)
    assert [next(iter(e)) for e in events] == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockStop",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    assert events[3]["contentBlockStart"]["start"]["toolUse"]["toolUseId"] == "tooluse_1"
    assert events[-1]["metadata"]["usage"]["totalTokens"] == 7


@pytest.mark.parametrize("cut", [1, 5, 11, 12, 13, 40])
def test_a_frame_split_anywhere_decodes_without_loss_or_duplication(cut: int) -> None:
    data = b"".join(CANONICAL)
    chunks = [data[i : i + cut] for i in range(0, len(data), cut)]
    assert _decode(chunks) == _decode(CANONICAL)


def test_raw_buffer_sees_every_header() -> None:
    buf = EventStreamBuffer()
    buf.add_data(es.event_frame("messageStop", {"stopReason": "end_turn"}))
    (message,) = list(buf)
    assert message.headers == {
        ":message-type": "event",
        ":event-type": "messageStop",
        ":content-type": "application/json",
    }
    assert message.payload == b'{"stopReason":"end_turn"}'


@pytest.mark.parametrize(
    "kind", ["validationException", "internalServerException", "runtimeClientError"]
)
def test_exception_frames_raise_event_stream_error_with_the_member_name(kind: str) -> None:
    with pytest.raises(EventStreamError) as info:
        _decode([CANONICAL[0], es.exception_frame(kind, "duplicate Ids")])
    assert info.value.response["Error"]["Code"] == kind
    assert info.value.response["Error"]["Message"] == "duplicate Ids"


def test_error_frames_raise_with_header_code_and_message() -> None:
    with pytest.raises(EventStreamError) as info:
        _decode([es.error_frame("ThrottlingException", "slow down")])
    assert info.value.response["Error"] == {"Code": "ThrottlingException", "Message": "slow down"}


def test_a_corrupted_crc_raises_checksum_mismatch() -> None:
    with pytest.raises(ChecksumMismatch):
        _decode([CANONICAL[0], es.corrupt(CANONICAL[1])])


def test_unknown_event_types_are_dropped_by_botocore() -> None:
    events = _decode([es.event_frame("someFutureEvent", {"x": 1}), CANONICAL[0]])
    assert events == [{"messageStart": {"role": "assistant"}}]


def test_command_chunk_frames_decode() -> None:
    frames = [
        es.event_frame("chunk", {"contentStart": {}}),
        es.event_frame("chunk", {"contentDelta": {"stdout": "hi\n"}}),
        es.event_frame("chunk", {"contentDelta": {"stderr": "oops\n"}}),
        es.event_frame("chunk", {"contentStop": {"exitCode": 3, "status": "COMPLETED"}}),
    ]
    events = _decode(frames, "InvokeAgentRuntimeCommand")
    assert events[1] == {"chunk": {"contentDelta": {"stdout": "hi\n"}}}
    assert events[3] == {"chunk": {"contentStop": {"exitCode": 3, "status": "COMPLETED"}}}


def test_every_frame_the_emulator_sends_decodes(emu: Any, sid: str) -> None:
    """Drive the emulator's renderer for text, tools, reused indices and a server tool."""
    from managedloop.testing import Reply, ToolCall

    emu.agent.script = [
        Reply(
            text="Checking both cities now.",
            tool_calls=[
                ToolCall(name="a", input={"x": 1}),
                ToolCall(name="b", input={}),
                ToolCall(name="srv", input={"q": "z"}, server=True),
            ],
        )
    ]
    emu.faults.reuse_block_index = True
    client = botocore.session.get_session().create_client("bedrock-agentcore", **emu.client_kwargs)
    try:
        response = client.invoke_harness(
            harnessArn=emu.harness_arn,
            runtimeSessionId=sid,
            messages=[{"role": "user", "content": [{"text": "go"}]}],
        )
        events = list(response["stream"])
    finally:
        client.close()
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart"
    assert kinds[-2:] == ["messageStop", "metadata"]
    starts = [e["contentBlockStart"] for e in events if "contentBlockStart" in e]
    assert [s["contentBlockIndex"] for s in starts if "toolUse" in s["start"]] == [0, 0, 0]
    # the server tool's result block (start, one toolResult delta) decodes too
    (result,) = [s["start"]["toolResult"] for s in starts if "toolResult" in s["start"]]
    assert result["status"] == "success"
    assert any(
        "toolResult" in e["contentBlockDelta"]["delta"] for e in events if "contentBlockDelta" in e
    )
