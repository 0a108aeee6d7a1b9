"""The chat function protocol: the one seam between the Local loop and a model.

A chat function is ``async (ChatRequest) -> ChatResponse``. Everything crossing the seam is
neutral and shaped like OpenAI Chat Completions, with string keys:

* ``ChatRequest.messages`` is the whole conversation (``system``, ``user``, ``assistant``
  with optional ``tool_calls``, ``tool`` with ``tool_call_id``); a chat function must not
  mutate it (the connection appends to it after the call);
* ``ChatRequest.tools`` is the OpenAI function-tool list;
* ``ChatResponse.message`` is one assistant message; ``tool_calls[*].function.arguments``
  is a JSON *string* (as on the wire);
* when ``ChatRequest.on_delta`` is set the function should call it with each streamed text
  chunk as it arrives (it may also never call it: the loop works either way);
* when ``ChatRequest.on_tool_delta`` is set the function may call it with each streamed
  piece of a tool call's arguments, a :class:`~managedloop.hosts.ToolInputDelta` (the
  pieces of one call share its ``id`` and concatenate to its ``arguments``); the loop
  streams partial typed outputs from the output tool's (``output=``, tool strategy).

A chat function may also return a Chat Completions response body (a mapping with
``choices``); only ``choices[0]`` is read. Failures are exceptions from
:mod:`managedloop.errors`: :class:`~managedloop.TransportError` and
:class:`~managedloop.APIStatusError` with a transient status (408, 429, >= 500, unless its
body says the request was invalid) are retried by the connection; anything else is not
(:func:`managedloop._retry.retryable`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from managedloop._json import encoder
from managedloop.errors import MalformedResponseError
from managedloop.handler import decode_tool_input
from managedloop.hosts import ToolInputDelta

__all__ = [
    "ChatFunction",
    "ChatRequest",
    "ChatResponse",
    "History",
    "decode_arguments",
    "encode",
    "excerpt",
    "parse_chat_completion",
]

Message = dict[str, Any]

_BODY_EXCERPT = 500  # characters of a bad body kept in an error: enough to diagnose, never huge


# One encoder for every body: ``json.dumps`` with options builds a new encoder per call.
_encode = encoder(ensure_ascii=False)  # JSONEncoder(...).encode without its Python frames


# Any surrogate code point left in a str: JSON decoding pairs escaped surrogates into one
# code point, so whatever remains is lone (or a pair a caller built by hand).
_SURROGATE = re.compile("[\ud800-\udfff]")


def encode(value: Any) -> bytes:
    """Compact JSON, the way every request body is built.

    A lone surrogate (valid JSON ``"\\ud800"`` from a server, or in a caller's prompt) has no
    UTF-8 encoding; it is sent as U+FFFD, the replacement character. Not as the escape
    ``\\ud800``: llama.cpp's and Rust's JSON parsers refuse a lone surrogate escape, so the
    next request (and the live session) would fail. The history itself keeps what arrived.
    """
    text = _encode(value)
    try:
        return text.encode()
    except UnicodeEncodeError:  # rare: the fast path above costs nothing when text is valid
        return _SURROGATE.sub("\ufffd", text).encode()


class History(list[Message]):
    """The conversation, append-only, with each message's JSON encoding cached.

    Chat Completions is stateless, so every request re-sends the whole history; caching the
    encoding keeps per-turn work proportional to the new messages (the join is a memcpy).
    Only ``append`` keeps the cache right, and the connection only ever appends. The cache
    is one bytes object (``[m1,m2,...`` without the closing bracket), not a list of each
    message's: a list is one more object per session for the garbage collector to walk,
    and the request is built with one copy fewer.
    """

    __slots__ = ("_count", "_encoded")

    def __init__(self, messages: Sequence[Message] = ()) -> None:
        super().__init__(messages)
        self._encoded = b"["
        self._count = 0  # messages in _encoded

    def encoded(self) -> bytes:
        """``[m1,m2,...]`` as JSON bytes, encoding only messages added since the last call."""
        done = self._count
        if done < len(self):
            new = b",".join([encode(m) for m in self[done:]])
            self._encoded += b"," + new if done else new
            self._count = len(self)
        return self._encoded + b"]"


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatRequest:
    """One model call."""

    model: str
    messages: Sequence[Message]
    """The whole conversation (see the module docstring). Do not mutate."""
    tools: Sequence[Mapping[str, Any]] = ()
    """OpenAI function tools: ``{"type": "function", "function": {name, description,
    parameters}}``."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Extra request-body parameters (``temperature``, ``max_tokens``...), verbatim."""
    on_delta: Callable[[str], None] | None = None
    """Set when the caller wants streamed text: call it with each chunk."""
    on_tool_delta: Callable[[ToolInputDelta], None] | None = None
    """Set when the caller wants streamed tool-call arguments: call it with each piece."""
    tools_json: bytes | None = None
    """The encoded ``tools`` (an optimisation for HTTP chat functions; may be ignored)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatResponse:
    """One assistant message and how it ended."""

    message: Message
    """``{"role": "assistant", "content": str | None, "tool_calls"?: [...]}``."""
    finish_reason: str | None = None
    """The model's raw finish reason (``stop``, ``tool_calls``, ``length``...)."""
    usage: Mapping[str, Any] | None = None
    """The raw usage object (``prompt_tokens``, ``completion_tokens``), if reported."""


class ChatFunction(Protocol):
    """``async (ChatRequest) -> ChatResponse`` (or a Chat Completions response mapping)."""

    async def __call__(self, request: ChatRequest, /) -> ChatResponse | Mapping[str, Any]: ...


def excerpt(value: Any, limit: int = _BODY_EXCERPT) -> str:
    """A bad body, trimmed for an exception's context (a non-string as its ``repr``)."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def parse_chat_completion(body: Any) -> ChatResponse:
    """``choices[0]`` of a Chat Completions body; anything else is malformed."""
    try:
        choice = body["choices"][0]
        message = choice["message"]
        # a missing finish_reason is read like null (servers differ; both mean "not said")
        finish_reason = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise MalformedResponseError(
            "the chat response has no choices[0].message",
            code="malformed_chat_response",
            body=excerpt(body),
        ) from None
    calls = message.get("tool_calls") if isinstance(message, Mapping) else None
    if (
        not isinstance(message, Mapping)
        or not (finish_reason is None or isinstance(finish_reason, str))
        or not (calls is None or isinstance(calls, list))
    ):
        raise MalformedResponseError(
            "the chat response's choices[0] is not a message object with a string "
            "finish_reason and a tool_calls list",
            code="malformed_chat_response",
            body=excerpt(body),
        )
    usage = body.get("usage")
    return ChatResponse(
        message=dict(message),
        finish_reason=finish_reason,
        usage=usage if isinstance(usage, Mapping) else None,
    )


def coerce_response(value: Any) -> ChatResponse:
    if isinstance(value, ChatResponse):
        return value
    if isinstance(value, Mapping):
        return parse_chat_completion(value)
    raise MalformedResponseError(
        f"a chat function returned {type(value).__name__}, not a ChatResponse",
        code="malformed_chat_response",
        body=excerpt(value),
    )


def decode_arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as a dict, ``{}`` when unreadable (for echoing history only:
    a call the loop runs is decoded by :func:`managedloop.handler.decode_tool_input`, which
    keeps the reason)."""
    return decode_tool_input(arguments)[0]


def text_of(content: Any) -> str:
    """Assistant content as text: a string, or the text parts of a content-part list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text"
        )
    return ""
