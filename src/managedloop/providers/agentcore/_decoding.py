"""botocore parses what the data plane answers: event-stream frames and error bodies.

botocore behaviours relied on (``agentcore-wire.md`` §2.4-2.5, checked against 1.44.x):
an exception frame is a message whose ``status_code`` is not 200: botocore's
``EventStreamError`` (a ``ClientError`` whose code is the member name, e.g.
``runtimeClientError``); a bad CRC raises ``ChecksumMismatch``; a stream cut short ends
*silently* (callers check ``messageStop``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from managedloop.errors import ConfigError

__all__ = ["EventDecoder", "client_error"]


class EventDecoder:
    """botocore's event-stream decoding, fed bytes as they arrive.

    ``EventStreamBuffer`` splits and CRC-checks frames (``ChecksumMismatch``); each message
    becomes a response dict parsed with botocore's ``EventStreamJSONParser`` against the
    operation's event-stream shape, exactly as ``botocore.eventstream.EventStream`` does:
    an exception frame raises ``EventStreamError``; an unknown event type parses to nothing
    and is dropped.
    """

    __slots__ = ("_buffer", "_operation", "_parser", "_shape")

    def __init__(self, operation_model: Any) -> None:
        from botocore.eventstream import EventStreamBuffer
        from botocore.parsers import EventStreamJSONParser

        protocol = operation_model.service_model.resolved_protocol
        if protocol not in ("rest-json", "json"):  # pragma: no cover - the model says rest-json
            raise ConfigError(f"unsupported event-stream protocol {protocol!r}")
        self._buffer = EventStreamBuffer()
        self._parser = EventStreamJSONParser()
        self._shape = operation_model.get_event_stream_output()
        self._operation = operation_model.name

    def feed(self, data: bytes) -> Iterator[dict[str, Any]]:
        """The events completed by ``data`` (an incomplete frame waits for more bytes)."""
        from botocore.exceptions import EventStreamError
        from botocore.parsers import ResponseParserError

        self._buffer.add_data(data)
        for message in self._buffer:
            response = message.to_response_dict()
            try:
                parsed = self._parser.parse(response, self._shape)
            except ValueError as exc:  # a payload that is not UTF-8 JSON (UnicodeDecodeError)
                # botocore's parser lets the decode error through; it is a frame we cannot
                # read, so it maps to ``bad_frame`` like any other (found by `make fuzz`).
                raise ResponseParserError(f"undecodable event payload: {exc}") from exc
            if response["status_code"] != 200:
                raise EventStreamError(parsed, self._operation)
            if parsed:
                yield parsed


def client_error(client: Any, operation_model: Any, status: int, headers: Any, body: bytes) -> Any:
    """botocore's ``ClientError`` subclass for a non-2xx answer, as the client would raise."""
    from botocore.awsrequest import HeadersDict
    from botocore.parsers import create_parser

    response = {
        "status_code": status,
        "headers": HeadersDict(list(headers.items())),
        "body": body,
        "context": {"operation_name": operation_model.name},
    }
    parser = create_parser(operation_model.service_model.resolved_protocol)
    parsed = parser.parse(response, operation_model.output_shape)
    code = parsed.get("Error", {}).get("Code")
    return client.exceptions.from_code(code)(parsed, operation_model.name)
