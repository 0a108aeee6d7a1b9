"""The default chat function: OpenAI Chat Completions over HTTP (aiohttp).

Why aiohttp and these pool settings: measured with 1,000 concurrent sessions against one
loopback server (``bench/README.md``), aiohttp with an unbounded pool finished several
times faster than httpx, whose pool (httpcore) scans every connection for every request.
aiohttp is already a core dependency.

Invariants:

* One :class:`aiohttp.ClientSession` per :class:`ClientPool` (one per ``Local`` instance),
  bound to the event loop that created it. It is kept open while a connection uses it or
  while the provider is entered (``async with Local(...)``) and closed when neither holds
  it, so ``run_sync`` (a fresh event loop per call) never leaves a session on a dead loop.
* The API key is a :class:`~managedloop.config.Secret` revealed only into the
  ``Authorization`` header of one request; it never reaches an exception or a log. Nor
  does a password in ``base_url``'s userinfo: reprs and errors show :func:`redact_url`.
* Non-streaming: ``POST {base_url}/chat/completions`` and read one JSON body. Streaming:
  ``stream: true`` with ``stream_options.include_usage``; SSE ``data:`` lines carry chunks
  until ``data: [DONE]``; a stream that ends without ``[DONE]`` was dropped
  (:class:`~managedloop.TransportError`, retried by the connection).
* A non-2xx answer is an :class:`~managedloop.APIStatusError` whose message leads with the
  server's own error message (``error.message``, ``detail``, ``message``), up to 4 KiB:
  the cause is often deep in a long body. ``context["invalid_request"]`` marks a body that
  says the request was invalid (never retried, whatever the status).
* A streamed tool call's ``id`` and name may come once, whole in every chunk or split
  (:class:`_StreamedCall`); its arguments are always deltas.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from managedloop import telemetry
from managedloop._retry import parse_retry_after, says_invalid  # one retry policy
from managedloop.config import Secret
from managedloop.errors import (
    APIStatusError,
    AuthenticationError,
    MalformedResponseError,
    TransportError,
)
from managedloop.providers.local._types import (
    ChatRequest,
    ChatResponse,
    History,
    encode,
    excerpt,
    parse_chat_completion,
)

__all__ = ["ClientPool", "OpenAIChat", "parse_retry_after", "redact_url"]

_MAX_SSE_LINE = 1 << 24  # one SSE line may carry a whole tool call's arguments; 16 MiB is ample
_EXPECTED = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError)


class ClientPool:
    """One lazily created aiohttp session, shared by every connection of a provider."""

    __slots__ = ("_loop", "_max_connections", "_pinned", "_session", "_timeout", "_users")

    def __init__(self, *, timeout: float, connect_timeout: float, max_connections: int) -> None:
        # sock_read bounds the wait for *any* bytes (a first token or the next chunk), so a
        # long stream that keeps talking is never cut off by a wall-clock total.
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=connect_timeout, sock_read=timeout
        )
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._users = 0
        self._pinned = False

    def session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._session
        if session is None or session.closed or self._loop is not loop:
            # A session made on another (finished) loop cannot be reused: its sockets belong
            # to that loop. It was closed when its last user released it.
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, limit_per_host=0, enable_cleanup_closed=False
            )
            session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, skip_auto_headers=("User-Agent",)
            )
            self._session, self._loop, self._users = session, loop, 0
        return session

    def acquire(self) -> None:
        self._users += 1

    async def release(self) -> None:
        self._users = max(0, self._users - 1)
        if self._users == 0 and not self._pinned:
            await self.aclose()

    def pin(self) -> None:
        self._pinned = True

    async def unpin(self) -> None:
        self._pinned = False
        if self._users == 0:
            await self.aclose()

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()


def redact_url(url: str) -> str:
    """The URL without a password in its userinfo (safe for a repr or an error)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


_ERROR_EXCERPT = 4096  # characters of an error body kept: pydantic's messages run long


def server_message(body: str) -> str | None:
    """The error message a server put in its JSON error body, if any: ``error.message``
    (OpenAI), ``error`` as a string, ``detail`` (FastAPI), or a top-level ``message``."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, Mapping):
        return None
    error = data.get("error")
    candidates = [
        error.get("message") if isinstance(error, Mapping) else error,
        data.get("detail"),
        data.get("message"),
    ]
    for value in candidates:
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list | Mapping) and value:  # FastAPI's list of field errors
            return json.dumps(value, ensure_ascii=False)
    return None


def status_error(status: int, body: str, retry_after: float | None) -> APIStatusError:
    """The exception for a non-2xx answer: the server's own error message first (it names
    the cause), up to a few KiB, never a header.

    ``context["invalid_request"]`` is true when the body says the request itself was
    invalid (any status): the connection never retries such an answer.
    """
    kind = AuthenticationError if status == 401 else APIStatusError
    message = server_message(body)
    shown = excerpt(message if message is not None else body, _ERROR_EXCERPT)
    return kind(
        f"the chat endpoint answered HTTP {status}: {shown}",
        status=status,
        body=excerpt(body, _ERROR_EXCERPT),
        server_message=message and excerpt(message, _ERROR_EXCERPT),
        invalid_request=says_invalid(body),
        retry_after=retry_after,
    )


class OpenAIChat:
    """A chat function speaking Chat Completions to ``base_url`` (which ends before
    ``/chat/completions``, e.g. ``http://127.0.0.1:11434/v1``)."""

    __slots__ = ("_api_key", "_headers", "_pool", "_shown", "_url", "base_url")

    def __init__(
        self,
        base_url: str,
        api_key: Secret | None,
        pool: ClientPool,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.base_url = base_url
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._shown = redact_url(base_url)  # for reprs and errors
        self._api_key = api_key
        self._pool = pool
        self._headers = dict(headers or {})

    def __repr__(self) -> str:
        return f"OpenAIChat(base_url={self._shown!r})"

    def _request_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self._headers}
        if self._api_key is not None:
            headers["Authorization"] = "Bearer " + self._api_key.reveal()
        return headers

    def _body(self, request: ChatRequest, stream: bool) -> bytes:
        messages = request.messages
        parts = [b'{"model":', encode(request.model), b',"messages":']
        parts.append(messages.encoded() if isinstance(messages, History) else encode(messages))
        if request.tools:
            parts += [b',"tools":', request.tools_json or encode(list(request.tools))]
        for key, value in request.options.items():
            parts += [b",", encode(key), b":", encode(value)]
        if stream:
            parts.append(b',"stream":true,"stream_options":{"include_usage":true}')
        parts.append(b"}")
        return b"".join(parts)

    async def __call__(self, request: ChatRequest) -> ChatResponse:
        if not telemetry.span_enabled("request"):
            return await self._post(request, {})
        stream = request.on_delta is not None
        meta = {"host": "local", "method": "POST", "path": "/chat/completions", "stream": stream}
        with telemetry.span("request", meta) as extra:
            return await self._post(request, extra)

    async def _post(self, request: ChatRequest, extra: dict[str, Any]) -> ChatResponse:
        stream = request.on_delta is not None
        body = self._body(request, stream)
        session = self._pool.session()
        try:
            async with session.post(self._url, data=body, headers=self._request_headers()) as resp:
                extra["status"] = resp.status
                if resp.status >= 300:
                    text = await resp.text(errors="replace")
                    retry_after = parse_retry_after(resp.headers.get("Retry-After"))
                    raise status_error(resp.status, text, retry_after)
                if stream:
                    return await _read_stream(resp, request)
                raw = await resp.read()
        except _EXPECTED as exc:
            raise TransportError(
                f"the chat request to {self._shown} failed: {type(exc).__name__}: {exc}",
                cause=type(exc).__name__,
            ) from None
        try:
            decoded = json.loads(raw)
        except ValueError:
            raise MalformedResponseError(
                "the chat response is not JSON",
                code="malformed_chat_response",
                body=excerpt(raw.decode("utf-8", "replace")),
            ) from None
        return parse_chat_completion(decoded)


async def _read_stream(resp: aiohttp.ClientResponse, request: ChatRequest) -> ChatResponse:
    """Fold SSE chunks into one assistant message, handing text chunks to ``on_delta``."""
    on_delta = request.on_delta
    assert on_delta is not None
    text: list[str] = []
    calls: dict[int, _StreamedCall] = {}
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    done = False
    while True:
        raw_line = await resp.content.readline(max_line_length=_MAX_SSE_LINE)
        if not raw_line:
            break  # end of body
        line = raw_line.strip()
        if not line.startswith(b"data:"):
            continue  # blank separators, comments, event:/id: fields
        data = line[5:].strip()
        if data == b"[DONE]":
            done = True
            break
        try:
            chunk = json.loads(data)
            choices = chunk.get("choices") or []
        except (ValueError, AttributeError):
            raise MalformedResponseError(
                "a streamed chat chunk is not a JSON object",
                code="malformed_chat_response",
                body=excerpt(data.decode("utf-8", "replace")),
            ) from None
        if isinstance(chunk.get("usage"), Mapping):
            usage = chunk["usage"]
        for choice in choices[:1]:
            delta = choice.get("delta") or {}
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                text.append(piece)
                on_delta(piece)
            for tc in delta.get("tool_calls") or ():
                index = tc.get("index")
                if not isinstance(index, int):  # no index: continue the last call
                    index = max(calls) if calls and not tc.get("id") else len(calls)
                calls.setdefault(index, _StreamedCall()).add(tc)
            if choice.get("finish_reason"):
                finish_reason = choice["finish_reason"]
    if not done:
        raise TransportError("the chat stream ended before data: [DONE]", cause="stream_dropped")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        known = {
            str((t.get("function") or {}).get("name"))
            for t in request.tools
            if isinstance(t, Mapping)
        }
        message["tool_calls"] = [calls[i].message(known) for i in sorted(calls)]
    return ChatResponse(message=message, finish_reason=finish_reason, usage=usage)


class _StreamedCall:
    """One tool call assembled from stream chunks.

    Servers disagree on how the ``id`` and ``function.name`` of a streamed call arrive:
    once in the first chunk (OpenAI), whole again in every chunk (llama.cpp), or split
    across chunks. The pieces are kept and resolved once the stream ends (:func:`_joined`);
    ``arguments`` are always deltas and are concatenated.
    """

    __slots__ = ("arguments", "ids", "names")

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.names: list[str] = []
        self.arguments: list[str] = []

    def add(self, tc: Mapping[str, Any]) -> None:
        if isinstance(tc.get("id"), str) and tc["id"]:
            self.ids.append(tc["id"])
        fn = tc.get("function") or {}
        if isinstance(fn.get("name"), str) and fn["name"]:
            self.names.append(fn["name"])
        if isinstance(fn.get("arguments"), str) and fn["arguments"]:
            self.arguments.append(fn["arguments"])

    def message(self, known: set[str]) -> dict[str, Any]:
        return {
            "id": _joined(self.ids, set()) or None,
            "type": "function",
            "function": {"name": _joined(self.names, known), "arguments": "".join(self.arguments)},
        }


def _joined(pieces: list[str], known: set[str]) -> str:
    """The value that a server sent as ``pieces``: the same value repeated (once or in
    every chunk), a growing prefix (each piece the whole value so far), or split parts.

    The readings can disagree only for odd values (``"abab"`` sent as ``"ab"``, ``"ab"``);
    then a reading that names a known tool wins, and repetition is assumed otherwise.
    """
    if not pieces:
        return ""
    concatenated = "".join(pieces)
    if all(p == pieces[0] for p in pieces):
        reading = pieces[0]
    elif all(b.startswith(a) for a, b in itertools.pairwise(pieces)):
        reading = pieces[-1]
    else:
        return concatenated
    if reading not in known and concatenated in known:
        return concatenated
    return reading
