"""Server-sent events read as the WHATWG HTML standard says (§9.2 "Server-sent events",
"Interpreting an event stream"): a sans-IO decoder, bytes in, events out.

Why by hand: the maintained SSE readers are tied to one HTTP client (``httpx-sse``,
``aiohttp-sse-client``) and read lines through it; the Local host has its own transports
(``_transports``), so the ~60 lines of the spec's algorithm live here, once, for all of
them.

What the spec says, and the tests that pin it (``tests/local/test_local_sse.py``, with a
hypothesis property: any stream split at any byte positions yields the same events):

* The stream is UTF-8 (invalid bytes are replaced, never an error); one BOM at the very
  start is dropped.
* A line ends at CRLF, LF or a lone CR; a CR at the end of one chunk and an LF at the
  start of the next are one line end (the ``_after_cr`` flag), never an empty line.
* A line starting with ``:`` is a comment. Otherwise ``name:value`` (one space after the
  colon dropped), or a whole line that is a name with an empty value.
* ``data`` appends its value and a ``\\n`` to the data buffer; ``event`` sets the type;
  ``id`` sets the last event id unless the value holds a NUL; ``retry`` sets the
  reconnection time when the value is ASCII digits only; any other field is ignored.
* An empty line dispatches: nothing when the data buffer is empty, else an event whose data
  is the buffer less its last ``\\n``, whose type is the ``event`` field or ``"message"``,
  and which carries the last event id (it persists across events, as the spec says).

One deliberate leniency: at the end of the stream the spec drops an event that no empty
line ended; :meth:`SSEDecoder.close` dispatches it instead (a last ``data: [DONE]``
without its blank line is common, and what Local read before). A line over ``max_line``
bytes, or an event's data over ``max_line``, is a :class:`EventTooLargeError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["EventTooLargeError", "SSEDecoder", "ServerSentEvent"]

_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSentEvent:
    """One dispatched event."""

    data: str
    """The ``data`` lines joined with ``\\n``."""
    event: str = "message"
    """The ``event`` field, or ``"message"``."""
    id: str = ""
    """The last event id (persists from earlier events)."""
    retry: int | None = None
    """The last ``retry`` field seen in the stream (milliseconds), if any."""


class EventTooLargeError(Exception):
    """A line or an event's data is over the decoder's limit."""


class SSEDecoder:
    """Feed bytes with :meth:`feed`, then :meth:`close` at the end of the stream."""

    __slots__ = (
        "_after_cr",
        "_data",
        "_data_size",
        "_event",
        "_pending",
        "_started",
        "last_id",
        "max_line",
        "retry",
    )

    def __init__(self, max_line: int = 1 << 24) -> None:
        self.max_line = max_line
        self._pending = bytearray()  # an unfinished line (never holds a line end)
        self._after_cr = False  # the last line ended at a CR: an LF first is its end
        self._started = False  # past the first bytes (where a BOM may be)
        self._data: list[str] = []
        self._data_size = 0
        self._event = ""
        self.last_id = ""
        self.retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that ``chunk`` completes."""
        if not self._started:
            head = bytes(self._pending) + chunk
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._pending = bytearray(head)  # could still be a BOM: wait for more
                return []
            self._started = True
            self._pending = bytearray()
            chunk = head[len(_BOM) :] if head.startswith(_BOM) else head
        if self._after_cr and chunk:
            self._after_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]  # the LF of a CRLF split between two chunks
        if _LINE_END.search(chunk) is None:
            # no line ends here: append, in amortised linear time (a hostile server
            # sending a long line byte by byte must not make this quadratic)
            self._pending += chunk
            if len(self._pending) > self.max_line:
                raise EventTooLargeError(
                    f"a line of the event stream is over {self.max_line} bytes"
                )
            return []
        events: list[ServerSentEvent] = []
        buffer = bytes(self._pending) + chunk if self._pending else chunk
        start = 0
        for match in _LINE_END.finditer(buffer):
            end = match.start()
            if match.group() == b"\r" and match.end() == len(buffer):
                self._after_cr = True  # an LF may start the next chunk
            self._line(buffer[start:end], events)
            start = match.end()
        rest = buffer[start:]
        if len(rest) > self.max_line:
            raise EventTooLargeError(f"a line of the event stream is over {self.max_line} bytes")
        self._pending = bytearray(rest)
        return events

    def close(self) -> list[ServerSentEvent]:
        """The end of the stream: a last unterminated line, and an event no blank line
        ended (see the module docstring)."""
        events: list[ServerSentEvent] = []
        pending, self._pending = bytes(self._pending), bytearray()
        if not self._started:
            self._started = True
            pending = pending[len(_BOM) :] if pending.startswith(_BOM) else pending
        if pending:
            self._line(pending, events)
        self._line(b"", events)
        return events

    def _line(self, raw: bytes, events: list[ServerSentEvent]) -> None:
        if not raw:
            if self._data:
                data = "".join(self._data)[:-1]  # less the last "\n"
                events.append(
                    ServerSentEvent(
                        data=data, event=self._event or "message", id=self.last_id, retry=self.retry
                    )
                )
            self._data, self._data_size, self._event = [], 0, ""
            return
        if raw[:1] == b":":
            return  # a comment
        line = raw.decode("utf-8", "replace")
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data_size += len(value) + 1
            if self._data_size > self.max_line:
                raise EventTooLargeError(
                    f"an event's data in the event stream is over {self.max_line} bytes"
                )
            self._data.append(value + "\n")
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\x00" not in value:
                self.last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)
