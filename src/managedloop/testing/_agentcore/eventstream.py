"""An ``application/vnd.amazon.eventstream`` *encoder* for the AgentCore emulator.

Why this is written by hand: botocore only *decodes* event streams
(``botocore.eventstream``) and ships no encoder; the maintained encoders live in packages
(``smithy-aws-event-stream``, ``awscrt``) with Python floors or native builds we do not want
to impose on a test kit. The format is small and fixed (AWS event stream spec):

    [total_len u32][headers_len u32][prelude_crc u32 = CRC32(first 8 bytes)]
    [headers...][payload...][message_crc u32 = CRC32(everything before it)]

Each header is ``name_len u8, name, type u8, value``; only type 7 (string: ``u16 len`` +
UTF-8) is needed. Every frame this module produces is checked to decode with botocore's
own ``EventStreamBuffer`` and parser in ``tests/agentcore/test_eventstream.py``.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from typing import Any

__all__ = ["corrupt", "error_frame", "event_frame", "exception_frame", "frame"]

_STRING = 7


def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return struct.pack("!B", len(n)) + n + struct.pack("!BH", _STRING, len(v)) + v


def frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One complete event-stream message."""
    hb = b"".join(_header(k, v) for k, v in headers.items())
    prelude = struct.pack("!II", 12 + len(hb) + len(payload) + 4, len(hb))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    message = prelude + hb + payload
    return message + struct.pack("!I", zlib.crc32(message))


def _json(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def event_frame(event_type: str, body: Any) -> bytes:
    """An event: botocore yields it as ``{event_type: body}``."""
    return frame(
        {
            ":message-type": "event",
            ":event-type": event_type,
            ":content-type": "application/json",
        },
        _json(body),
    )


def exception_frame(exception_type: str, message: str, **extra: Any) -> bytes:
    """A modeled exception: botocore raises ``EventStreamError`` with this member name."""
    return frame(
        {
            ":message-type": "exception",
            ":exception-type": exception_type,
            ":content-type": "application/json",
        },
        _json({"message": message, **extra}),
    )


def error_frame(code: str, message: str) -> bytes:
    """An unmodeled error (code and message in headers, empty payload)."""
    return frame({":message-type": "error", ":error-code": code, ":error-message": message}, b"")


def corrupt(data: bytes) -> bytes:
    """The same frame with a wrong message CRC (botocore raises ``ChecksumMismatch``)."""
    return data[:-1] + bytes([data[-1] ^ 0xFF])
