"""Incremental Server-Sent Events decoding for the session event stream.

Why we own this instead of using the SDK's ``AsyncStream``: that helper silently drops
every frame without an ``event:`` line, and it parses each frame into the first member of
a pydantic union when the ``type`` is one it does not know (so a future event type comes
back mis-typed). Neither is acceptable for a loop that promises never to lose an event.
Here:

* frames are separated by a blank line; CRLF and CR line ends are accepted, including a
  CR/LF pair split across two chunks;
* ``data:`` lines are joined with ``\\n``; one optional space after the colon is removed;
* comment lines (``:``) and ``event: ping`` frames are heartbeats and yield nothing;
* an ``event: error`` frame raises :class:`StreamErrorFrameError` (the API's in-stream error);
* the JSON ``type`` is the event's type; when a frame's JSON has none, the SSE ``event:``
  name is copied into it, so nothing reaches the loop untyped;
* a frame whose data is not a JSON object is never passed on as an event, and never
  dropped silently either: it is logged and counted in ``undecodable``;
* a frame whose JSON nests deeper than the interpreter can decode (``json`` raises
  ``RecursionError``) raises :class:`~managedloop.errors.MalformedResponseError`
  (``code="malformed_event"``): it may be a real event (a tool use) that cannot be read,
  so the session fails by name rather than dropping it or leaking a ``RecursionError``.

Only these leave :meth:`SSEDecoder.feed`: decoded event dicts, ``StreamErrorFrameError``
and ``MalformedResponseError`` (pinned by the property tests in
``tests/claude/test_sse_properties.py``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from managedloop._log import fields
from managedloop.errors import MalformedResponseError

__all__ = ["SSEDecoder", "StreamErrorFrameError"]

logger = logging.getLogger("managedloop.providers.claude")


class StreamErrorFrameError(Exception):
    """The server sent an ``event: error`` frame inside the stream."""

    def __init__(self, data: str) -> None:
        self.data = data
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            body = data
        self.body: Any = body
        super().__init__("the event stream carried an error frame")


class SSEDecoder:
    """Feed bytes, get decoded event dicts. One decoder per connection."""

    __slots__ = ("_buffer", "undecodable")

    def __init__(self) -> None:
        self._buffer = b""
        self.undecodable = 0

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        buf = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buf:
            # Keep a trailing CR: the LF of a CRLF may be in the next chunk.
            tail = b"\r" if buf.endswith(b"\r") else b""
            body = buf[:-1] if tail else buf
            buf = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + tail
        *frames, self._buffer = buf.split(b"\n\n")
        out: list[dict[str, Any]] = []
        for frame in frames:
            event = self._frame(frame)
            if event is not None:
                out.append(event)
        return out

    def _frame(self, frame: bytes) -> dict[str, Any] | None:
        name: str | None = None
        data: list[str] = []
        for raw in frame.split(b"\n"):
            if not raw or raw[:1] == b":":
                continue
            line = raw.decode("utf-8", errors="replace")
            field, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if field == "data":
                data.append(value)
            elif field == "event":
                name = value
        if name == "ping" or not data:
            return None
        text = "\n".join(data)
        if name == "error":
            raise StreamErrorFrameError(text)
        try:
            event = json.loads(text)
        except ValueError:
            event = None
        except RecursionError:
            raise MalformedResponseError(
                "an event stream frame nests too deeply to decode",
                code="malformed_event",
                event=name,
                size=len(text),
            ) from None
        if not isinstance(event, dict):
            self.undecodable += 1
            shown = (name or "")[:100]  # the server's event name, bounded
            # One WARNING per stream: a server streaming junk must not log once per frame.
            logger.log(
                logging.WARNING if self.undecodable == 1 else logging.DEBUG,
                "skipping an SSE frame whose data is not a JSON object (event %r, %d bytes)%s",
                shown,
                len(text),
                "; later ones on this stream are logged at DEBUG" if self.undecodable == 1 else "",
                extra=fields(
                    "skipped_frame",
                    host="claude",
                    sse_event=shown,
                    size=len(text),
                    skipped=self.undecodable,
                ),
            )
            return None
        if "type" not in event and name:
            event["type"] = name
        return event
