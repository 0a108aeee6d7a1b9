"""The default chat function: OpenAI Chat Completions over a transport (:mod:`._transports`).

This module is the sans-IO half of the seam: the request (body, headers, credentials),
redirects, the stream fold and the mapping of every answer and failure to the error tree;
the bytes move through ``Local(transport=...)``, by default :class:`HttpTransport` on
:mod:`._wire`.

Why its own transport (measured, ``bench/README.md``): Local first used aiohttp, chosen
over httpx at 1,000 concurrent sessions (httpcore's pool scans every connection for every
request). At 10,000 sessions the garbage collector became the largest cost: each full
collection walks every live tracked object, and an aiohttp request in flight holds dozens,
so a bare aiohttp loop alone cost about 1.8x a raw asyncio client and Local about 3x.
:mod:`._wire` (``asyncio.Protocol`` and httptools' llhttp parser) holds a handful per
request and costs about what the raw client does. AgentCore keeps aiohttp.

Invariants:

* One transport per ``Local`` instance, behind a :class:`ClientPool` that keeps it open
  while a connection uses it or while the provider is entered (``async with Local(...)``)
  and closes it when neither holds it, so ``run_sync`` (a fresh event loop per call) never
  leaves a socket on a dead loop.
* Timeouts: ``connect_timeout`` bounds the socket connect (and TLS handshake); ``timeout``
  bounds each wait for *any* bytes (a first token or the next chunk), never a whole
  stream. In a bounded pool (``max_connections``) the wait for a free connection is
  neither: it has no bound of its own (the run's timeout bounds it).
* The API key is a :class:`~managedloop.config.Secret` revealed only into the
  ``Authorization`` header of one request; it never reaches an exception or a log. Nor
  does a password in ``base_url``'s userinfo (sent as HTTP Basic credentials, as aiohttp
  did): reprs and errors show :func:`redact_url`. A header name or value that could
  inject a header (CR, LF, NUL...), in ``headers`` or the key, is refused at
  construction, as are ``Content-Length`` and ``Transfer-Encoding`` (the framing is ours).
* Proxies (:mod:`._proxy`) and TLS (:mod:`._tls`) are the transport's options.
* ``Accept-Encoding: gzip`` is sent (unless ``headers`` name it); a gzip/deflate body is
  decoded, any other ``Content-Encoding`` is a :class:`~managedloop.MalformedResponseError`.
* A failure on the wire (refused or timed-out connect, read timeout, a connection closed
  mid-answer, bytes that are not HTTP/1.1) is a :class:`~managedloop.TransportError`
  (retried by the connection) whose ``cause`` names it. A pooled connection the server
  closed while idle (not one byte back) is re-sent once at once, not counted as a retry.
* What asking again cannot heal fails on the first attempt: a TLS certificate, host-name
  or handshake refusal (``TransportError(code="tls_error", permanent=True)``), a head
  over 64 KiB (``MalformedResponseError(code="response_head_too_large")``), a proxy's 407
  (``APIStatusError(code="proxy_auth_required")``, to ``CONNECT`` or forwarded) and a
  proxy refusing the tunnel with a 4xx (``proxy_refused``; a 5xx there is retried).
* Non-streaming: ``POST {base_url}/chat/completions`` and read one JSON body. Streaming:
  ``stream: true`` with ``stream_options.include_usage`` (when the profile allows);
  server-sent events (read as the WHATWG spec says, :mod:`._sse`: multi-line ``data:``,
  CRLF/LF/CR line ends) carry chunks until ``data: [DONE]``; a stream that ends without
  ``[DONE]`` was dropped (:class:`~managedloop.TransportError`, retried by the
  connection). A streamed request answered with a JSON body (the server ignored
  ``stream``) is read as one and its text handed to ``on_delta`` once.
* A streamed call offering tools with ``tool_choice: "auto"`` may go out unstreamed (the
  profile's ``stream_auto_tools``; llama-cpp-python's server cannot stream it): always for
  ``llama.cpp``, else once such a stream has ended cleanly before its first ``data:``
  line, which is how that server answers (HTTP 200, ``text/event-stream``, an empty
  chunked body). That call is re-sent unstreamed at once, not counted as a retry (nothing
  was received, so no text reached ``on_delta`` and no tool call was parsed), on a
  connection of its own (that server closes the old one), and every later such call of
  this client is sent unstreamed. An empty stream for any other call is still a
  dropped stream. See ``_profiles`` for the trade-off.
* An error object in a 200 answer (``data: {"error": ...}`` mid-stream, or a JSON body
  with ``error`` and no ``choices``) is a :class:`~managedloop.HostStreamError`
  (``chat_stream_error``), retried when its ``code``/``type`` says transient.
* Redirects: only a same-origin 307/308 is followed (with the body), at most
  :data:`_MAX_REDIRECTS` times; any other is an ``APIStatusError`` (``redirect_refused``).
* A non-2xx answer is an :class:`~managedloop.APIStatusError` whose message leads with the
  server's own error message (``error.message``, ``detail``, ``message``), up to 4 KiB:
  the cause is often deep in a long body. ``context["invalid_request"]`` marks a body that
  says the request was invalid (never retried, whatever the status).
* A streamed tool call's ``id`` and name may come once, whole in every chunk or split
  (:class:`_StreamedCall`); its arguments are always deltas, each handed to
  ``on_tool_delta`` (when set) as a :class:`~managedloop.hosts.ToolInputDelta` as it
  arrives (a JSON body, when the server ignored ``stream``: each call's arguments once).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import logging
import re
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from managedloop import telemetry
from managedloop._retry import parse_retry_after, says_invalid  # one retry policy
from managedloop._urls import origin, redact_url
from managedloop.config import Secret
from managedloop.errors import (
    APIStatusError,
    AuthenticationError,
    HostStreamError,
    InvalidOptionsError,
    MalformedResponseError,
    ProviderError,
    TransportError,
)
from managedloop.hosts import ToolInputDelta
from managedloop.providers.local import _wire
from managedloop.providers.local._profiles import PROFILES, Profile
from managedloop.providers.local._sse import EventTooLargeError, ServerSentEvent, SSEDecoder
from managedloop.providers.local._transports import AsyncTransport, HttpRequest, HttpResponse
from managedloop.providers.local._types import (
    ChatRequest,
    ChatResponse,
    History,
    encode,
    excerpt,
    parse_chat_completion,
)

__all__ = ["ClientPool", "OpenAIChat", "parse_retry_after", "redact_url"]

logger = logging.getLogger("managedloop.local")

# Body keys the client sets itself: ``stream`` follows ``Local(stream=...)`` and
# ``stream_options`` is merged in for streamed requests only (OpenAI refuses it otherwise).
_SET_HERE = frozenset({"model", "messages", "tools", "stream", "stream_options"})
_MAX_SSE_LINE = 1 << 24  # one SSE line may carry a whole tool call's arguments; 16 MiB is ample


class ClientPool:
    """When a provider's transport is open: while a connection uses it or while the
    provider is entered (``async with Local(...)``); it is closed when neither holds it."""

    __slots__ = ("_loop", "_pinned", "_users", "transport")

    def __init__(self, transport: AsyncTransport) -> None:
        self.transport = transport
        self._loop: asyncio.AbstractEventLoop | None = None
        self._users = 0
        self._pinned = False

    def acquire(self) -> None:
        """A connection opened on the running loop uses the transport until it releases it."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # Users counted on another (finished) loop are gone with it: the transport
            # opens anew on this loop at the next request.
            self._loop, self._users = loop, 0
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
        await self.transport.aclose()


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
    if status == 407:  # a forwarding proxy's (an http:// target's request goes to it)
        return APIStatusError(
            "the proxy requires authentication (HTTP 407): check the credentials in the "
            f"proxy URL (proxy= or HTTP_PROXY): {shown}",
            code="proxy_auth_required",
            status=status,
            body=excerpt(body, _ERROR_EXCERPT),
        )
    return kind(
        f"the chat endpoint answered HTTP {status}: {shown}",
        status=status,
        body=excerpt(body, _ERROR_EXCERPT),
        server_message=message and excerpt(message, _ERROR_EXCERPT),
        invalid_request=says_invalid(body),
        retry_after=retry_after,
    )


_MAX_REDIRECTS = 3  # same-origin 307/308 hops (a trailing-slash fix-up needs one)
# RFC 9110: a field name is a token; a field value has no control character but HTAB.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_FRAMING = frozenset({"content-length", "transfer-encoding"})  # set here, from the body


def _without_userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without ``user:password@``, and those as an HTTP Basic ``Authorization``
    value (as aiohttp sent them) when present."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    basic = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=netloc)), basic


def _check_header(name: str, value: str, option: str) -> None:
    if _HEADER_NAME.fullmatch(name) is None:
        raise InvalidOptionsError(f"header name {name!r} is not an HTTP token", option=option)
    if _HEADER_VALUE_BAD.search(value) is not None:
        raise InvalidOptionsError(  # the value is never shown: it may be a credential
            f"the value of header {name!r} contains a control character (CR, LF, NUL...)",
            option=option,
        )
    if name.lower() in _FRAMING:
        raise InvalidOptionsError(
            f"header {name!r} is set by the client from the body; it cannot be configured",
            option=option,
        )


def _content_type(resp: HttpResponse) -> str:
    return resp.headers.get("content-type", "").partition(";")[0].strip().lower()


def _text(resp: HttpResponse, raw: bytes) -> str:
    """The body as text: the ``charset`` the server named, else UTF-8; never raises."""
    charset = "utf-8"
    for param in resp.headers.get("content-type", "").split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
    try:
        return raw.decode(charset, "replace")
    except LookupError:
        return raw.decode("utf-8", "replace")


def _location(url: str, resp: HttpResponse) -> str:
    return urljoin(url, resp.headers.get("location", ""))


def _same_origin(url: str, resp: HttpResponse) -> bool:
    target = _location(url, resp)
    return origin(target) is not None and origin(target) == origin(url)


def _transport_error(shown: str, exc: _wire.WireError) -> ProviderError:
    """A built-in transport's failure as the error tree has it: retried (a
    ``TransportError``) only when asking again can succeed."""
    if isinstance(exc, _wire.HeadTooLargeError):
        return MalformedResponseError(
            f"the chat response from {shown} cannot be read: {exc}",
            code="response_head_too_large",
            cause=exc.kind,
        )
    if isinstance(exc, _wire.UnsupportedEncodingError):
        # the answer arrived and is not one this client reads: asking again gets the same
        return MalformedResponseError(
            f"the chat response from {shown} cannot be read: {exc}",
            code="malformed_chat_response",
            cause=exc.kind,
        )
    if isinstance(exc, _wire.TLSError):
        # the same certificate, host name or refusal comes back on every try
        return TransportError(
            f"the chat request to {shown} failed: {exc}",
            code="tls_error",
            cause=exc.kind,
            permanent=True,
        )
    if isinstance(exc, _wire.ProxyAuthError):
        return APIStatusError(
            f"the proxy for {shown} requires authentication (407): check the credentials "
            "in the proxy URL (proxy= or HTTP(S)_PROXY)",
            code="proxy_auth_required",
            status=407,
        )
    if isinstance(exc, _wire.ProxyStatusError):
        # a 5xx (the proxy cannot reach the target) is retried, a 4xx (refused) is not
        return APIStatusError(
            f"the proxy for {shown} refused the tunnel: {exc}",
            code="proxy_refused",
            status=exc.status,
        )
    return TransportError(f"the chat request to {shown} failed: {exc.kind}: {exc}", cause=exc.kind)


class OpenAIChat:
    """A chat function speaking Chat Completions to ``base_url`` (which ends before
    ``/chat/completions``, e.g. ``http://127.0.0.1:11434/v1``)."""

    __slots__ = (
        "_header_pairs",
        "_pool",
        "_shown",
        "_url",
        "_whole_auto_tools",
        "base_url",
        "profile",
    )

    def __init__(
        self,
        base_url: str,
        api_key: Secret | None,
        pool: ClientPool,
        headers: Mapping[str, str] | None = None,
        profile: Profile | None = None,
    ) -> None:
        self.base_url = base_url
        self.profile = profile if profile is not None else PROFILES["default"]
        self._url, basic = _without_userinfo(base_url.rstrip("/") + "/chat/completions")
        self._shown = redact_url(base_url)  # for reprs and errors
        self._pool = pool
        extra = dict(headers or {})
        for name, value in extra.items():
            _check_header(name, value, "headers")
        if api_key is not None:
            _check_header("Authorization", api_key.reveal(), "api_key")
        names = {name.lower() for name in extra}
        if basic is not None and (api_key is not None or "authorization" in names):
            raise InvalidOptionsError(
                "base_url carries credentials (user:password@) and an Authorization header "
                "or api_key is set too; pass only one of them",
                option="base_url",
            )
        # The same headers go with every request: made once. Content-Type and
        # Accept-Encoding unless the caller's headers name them (in any case): one of each.
        pairs: list[tuple[str, str]] = []
        if "content-type" not in names:
            pairs.append(("Content-Type", "application/json"))
        if "accept-encoding" not in names:
            pairs.append(("Accept-Encoding", "gzip"))
        for name, value in extra.items():
            if api_key is not None and name.lower() == "authorization":
                continue  # the api_key's header wins (as it did on aiohttp)
            pairs.append((name, value))
        if api_key is not None:
            pairs.append(("Authorization", f"Bearer {api_key.reveal()}"))
        elif basic is not None:
            pairs.append(("Authorization", basic))
        self._header_pairs = tuple(pairs)
        # Send calls offering tools with tool_choice "auto" unstreamed: set by the profile,
        # or for the rest of this client's life once the server showed it cannot stream them.
        self._whole_auto_tools = not self.profile.stream_auto_tools

    def __repr__(self) -> str:
        return f"OpenAIChat(base_url={self._shown!r})"

    def _auto_tools(self, request: ChatRequest) -> bool:
        """Whether ``request`` offers tools with ``tool_choice: "auto"`` (the profile's
        default or ``model_config``'s)."""
        if not request.tools:
            return False
        choice = request.options.get("tool_choice", self.profile.tool_choice)
        return isinstance(choice, str) and choice == "auto"

    def _body(self, request: ChatRequest, stream: bool) -> bytes:
        messages = request.messages
        parts = [b'{"model":', encode(request.model), b',"messages":']
        parts.append(messages.encoded() if isinstance(messages, History) else encode(messages))
        profile = self.profile
        options = request.options
        if request.tools:
            parts += [b',"tools":', request.tools_json or encode(list(request.tools))]
            if profile.tool_choice is not None and "tool_choice" not in options:
                parts += [b',"tool_choice":', encode(profile.tool_choice)]
        for key, value in options.items():
            if key in _SET_HERE:
                continue
            if key == "parallel_tool_calls" and not profile.parallel_tool_calls:
                logger.debug("parallel_tool_calls dropped: profile %r", profile.name)
                continue
            parts += [b",", encode(key), b":", encode(value)]
        if stream:
            stream_options = options.get("stream_options")
            stream_options = dict(stream_options) if isinstance(stream_options, Mapping) else {}
            if profile.include_usage:
                stream_options.setdefault("include_usage", True)
            parts.append(b',"stream":true')
            if stream_options:
                parts += [b',"stream_options":', encode(stream_options)]
        parts.append(b"}")
        return b"".join(parts)

    def __call__(self, request: ChatRequest) -> Coroutine[Any, Any, ChatResponse]:
        # A plain function returning the coroutine to await: an unstreamed, untraced call
        # (the common case) is _send's coroutine itself, so a session waiting on the model
        # holds two suspended frames less (at 10,000 sessions the garbage collector walks
        # every one of them; bench/README.md).
        if telemetry.span_enabled("request"):
            return self._traced(request)
        if request.on_delta is None:  # _post's auto-tools handling is for streams only
            return self._send(request, False, {})
        return self._post(request, {})

    async def _traced(self, request: ChatRequest) -> ChatResponse:
        stream = request.on_delta is not None
        meta = {"host": "local", "method": "POST", "path": "/chat/completions", "stream": stream}
        with telemetry.span("request", meta) as extra:
            return await self._post(request, extra)

    async def _post(self, request: ChatRequest, extra: dict[str, Any]) -> ChatResponse:
        auto_tools = request.on_delta is not None and self._auto_tools(request)
        if auto_tools and self._whole_auto_tools:
            extra["unstreamed"] = "auto_tools"
            return await self._send(request, False, extra)
        try:
            return await self._send(request, request.on_delta is not None, extra)
        except _EmptyAutoToolStreamError:
            pass
        # An empty stream for tool_choice "auto": llama-cpp-python's server cannot stream
        # such a call. Nothing was received, so re-sending it whole is safe and no retry.
        self._whole_auto_tools = True
        extra["unstreamed"] = "auto_tools_empty_stream"
        logger.info(
            "the chat endpoint at %s sent an empty stream for a call with tools and "
            'tool_choice "auto"; such calls are sent unstreamed from now on',
            self._shown,
        )
        # On a connection of its own: that server (uvicorn) closes the keep-alive
        # connection after such an answer, and the pool has already taken it back (the
        # body ended), so reusing it at once would race the server's FIN.
        return await self._send(request, False, extra, fresh=True)

    async def _send(
        self,
        request: ChatRequest,
        stream: bool,
        extra: dict[str, Any],
        fresh: bool = False,
    ) -> ChatResponse:
        """One request (on a connection of its own when ``fresh``), following same-origin
        redirects (:class:`_EmptyAutoToolStreamError`: see :func:`_read_stream`)."""
        body = self._body(request, stream)
        transport = self._pool.transport
        url = self._url
        try:
            for _ in range(_MAX_REDIRECTS + 1):
                # Redirects are followed here and only to the same origin: the request
                # carries the conversation and the credentials.
                resp = await transport.handle_request(
                    HttpRequest("POST", url, self._header_pairs, body, stream=stream, fresh=fresh)
                )
                try:
                    status = extra["status"] = resp.status
                    if status in (307, 308) and _same_origin(url, resp):
                        url = _without_userinfo(_location(url, resp))[0]
                        continue
                    if 300 <= status < 400:
                        raise self._redirect_error(url, resp)
                    if status >= 300:
                        text = _text(resp, await resp.read())
                        retry_after = parse_retry_after(resp.headers.get("retry-after"))
                        raise status_error(status, text, retry_after)
                    if stream and _content_type(resp) != "application/json":
                        return await _read_stream(resp, request, self._auto_tools(request))
                    raw = await resp.read()  # also a server that ignored stream: true
                    break
                finally:
                    resp.release()
            else:
                raise APIStatusError(
                    f"the chat endpoint at {self._shown} redirected more than "
                    f"{_MAX_REDIRECTS} times",
                    code="redirect_refused",
                    status=extra.get("status"),
                )
        except _wire.WireError as exc:
            raise _transport_error(self._shown, exc) from None
        try:
            decoded = json.loads(raw)
        except (ValueError, RecursionError):
            raise MalformedResponseError(
                "the chat response is not JSON",
                code="malformed_chat_response",
                body=excerpt(raw.decode("utf-8", "replace")),
            ) from None
        if isinstance(decoded, Mapping) and "choices" not in decoded and decoded.get("error"):
            raise stream_error(decoded["error"])  # an error object in a 200 JSON body
        response = parse_chat_completion(decoded)
        content = response.message.get("content")
        if request.on_delta is not None and isinstance(content, str) and content:
            request.on_delta(content)  # the server ignored stream, or it was not sent
        if request.on_tool_delta is not None:
            _whole_tool_deltas(response.message, request.on_tool_delta)
        return response

    def _redirect_error(self, url: str, resp: HttpResponse) -> APIStatusError:
        target = origin(_location(url, resp))
        same = target == origin(url)
        why = (
            f"HTTP {resp.status} would turn the POST into a GET"
            if same
            else "redirects to another origin are never followed: the request carries "
            "the conversation and the credentials"
        )
        return APIStatusError(
            f"the chat endpoint at {self._shown} redirected (HTTP {resp.status}) to "
            f"{target or 'an unreadable location'}; {why}",
            code="redirect_refused",
            status=resp.status,
            location_origin=target,
        )


class _EmptyAutoToolStreamError(Exception):
    """A stream for a call offering tools with tool_choice "auto" ended cleanly with no
    data (never leaves this module: the call is re-sent unstreamed)."""


async def _read_stream(resp: HttpResponse, request: ChatRequest, auto_tools: bool) -> ChatResponse:
    """Fold server-sent events (:mod:`._sse`) into one assistant message, handing text
    chunks to ``on_delta``.

    Raises :class:`_EmptyAutoToolStreamError` when ``auto_tools`` (the call offers tools
    with tool_choice "auto") and the body ended cleanly before any ``data:`` line:
    llama-cpp-python's server cannot stream such a call. A body cut mid-transfer raises
    in ``next_chunk`` instead (a transport error, retried).
    """
    assert request.on_delta is not None
    fold = StreamFold(request.on_delta, request.on_tool_delta, request.tools)
    decoder = SSEDecoder(_MAX_SSE_LINE)
    try:
        while True:
            piece = await resp.next_chunk()
            events = decoder.feed(piece) if piece else decoder.close()
            if any(fold.event(event) for event in events) or not piece:
                break  # data: [DONE], or the end of the body
    except EventTooLargeError as exc:
        raise MalformedResponseError(
            f"the chat stream cannot be read: {exc}", code="malformed_chat_response"
        ) from None
    if auto_tools and not fold.seen_data:
        raise _EmptyAutoToolStreamError
    return fold.result()


def _bad_chunk(data: bytes) -> MalformedResponseError:
    return MalformedResponseError(
        "a streamed chat chunk is not a Chat Completions chunk object",
        code="malformed_chat_response",
        body=excerpt(data.decode("utf-8", "replace")),
    )


class StreamFold:
    """The sans-IO half of the stream reader: SSE lines in, one :class:`ChatResponse` out.

    Raises only :class:`~managedloop.MalformedResponseError` (a chunk that is not a chunk
    object), :class:`~managedloop.HostStreamError` (an error object in the stream) and
    :class:`~managedloop.TransportError` (no ``data: [DONE]``).
    """

    __slots__ = (
        "_known",
        "_tools",
        "calls",
        "done",
        "finish_reason",
        "on_delta",
        "on_tool_delta",
        "seen_data",
        "text",
        "usage",
    )

    def __init__(
        self,
        on_delta: Callable[[str], None],
        on_tool_delta: Callable[[ToolInputDelta], None] | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.on_delta = on_delta
        self.on_tool_delta = on_tool_delta
        self._tools = tools
        self._known: set[str] | None = None  # the offered tools' names, read when needed
        self.text: list[str] = []
        self.calls: dict[int, _StreamedCall] = {}
        self.finish_reason: str | None = None
        self.usage: Mapping[str, Any] | None = None
        self.done = False
        self.seen_data = False  # any data: line (an empty stream is a server's refusal)

    def line(self, raw_line: bytes) -> bool:
        """Take one line that is a whole event (``data: {...}``); ``True`` once ``data:
        [DONE]`` arrived. (The stream reader passes whole events to :meth:`event`.)"""
        line = raw_line.strip()
        if not line.startswith(b"data:"):
            return False  # blank separators, comments, event:/id: fields
        self.seen_data = True
        return self.data(line[5:].strip())

    def event(self, event: ServerSentEvent) -> bool:
        """Take one server-sent event; ``True`` once ``data: [DONE]`` arrived.

        Its data is one chunk (several ``data:`` lines joined with ``\\n``: pretty-printed
        JSON, as sse-starlette writes it). Data that is no JSON as a whole but whose lines
        each are is read line by line: a server that leaves out the blank line between
        events. An ``error`` event's data is the error object.
        """
        self.seen_data = True
        raw = event.data.strip().encode("utf-8")
        if event.event == "error":
            try:
                error = json.loads(raw)
            except (ValueError, RecursionError):
                error = event.data
            raise stream_error(error.get("error", error) if isinstance(error, Mapping) else error)
        if b"\n" in raw and raw != b"[DONE]":
            try:
                json.loads(raw)
            except (ValueError, RecursionError):
                lines = [line.strip() for line in raw.split(b"\n") if line.strip()]
                return any(self.data(line) for line in lines)  # stops at [DONE]
        return self.data(raw)

    def data(self, data: bytes) -> bool:
        """Take one chunk's JSON (or ``[DONE]``: then ``True``)."""
        if data == b"[DONE]":
            self.done = True
            return True
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            raise _bad_chunk(data) from None
        if not isinstance(chunk, Mapping):
            raise _bad_chunk(data)
        if chunk.get("error") is not None:
            raise stream_error(chunk["error"])
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise _bad_chunk(data)
        for choice in choices[:1]:
            if not isinstance(choice, Mapping):
                raise _bad_chunk(data)
            delta = choice.get("delta")
            delta = delta if delta is not None else {}
            calls = delta.get("tool_calls") if isinstance(delta, Mapping) else None
            if not isinstance(delta, Mapping) or not isinstance(calls or [], list):
                raise _bad_chunk(data)
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                self.text.append(piece)
                self.on_delta(piece)
            for tc in calls or ():
                fn = tc.get("function") if isinstance(tc, Mapping) else None
                if not isinstance(tc, Mapping) or not (fn is None or isinstance(fn, Mapping)):
                    raise _bad_chunk(data)
                index = tc.get("index")
                if not isinstance(index, int) or isinstance(index, bool):
                    # no index: continue the last call, unless this chunk opens a new one
                    index = max(self.calls) if self.calls and not tc.get("id") else len(self.calls)
                call = self.calls.get(index)
                if call is None:
                    call = self.calls[index] = _StreamedCall(index)
                fragment = call.add(tc)
                if fragment and self.on_tool_delta is not None:
                    self.on_tool_delta(call.delta(fragment, self._names()))
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                self.finish_reason = finish
        return False

    def _names(self) -> set[str]:
        known = self._known
        if known is None:
            known = self._known = _tool_names(self._tools)
        return known

    def result(self, tools: Sequence[Mapping[str, Any]] | None = None) -> ChatResponse:
        """The folded message; ``tools``: the offered tools (default: the fold's own)."""
        if not self.done:
            raise TransportError(
                "the chat stream ended before data: [DONE]", cause="stream_dropped"
            )
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            known = self._names() if tools is None else _tool_names(tools)
            message["tool_calls"] = [self.calls[i].message(known) for i in sorted(self.calls)]
        return ChatResponse(message=message, finish_reason=self.finish_reason, usage=self.usage)


def _tool_names(tools: Sequence[Mapping[str, Any]]) -> set[str]:
    return {
        fn["name"]
        for t in tools
        if isinstance(t, Mapping)
        and isinstance(fn := t.get("function"), Mapping)
        and isinstance(fn.get("name"), str)
    }


def _whole_tool_deltas(message: Mapping[str, Any], emit: Callable[[ToolInputDelta], None]) -> None:
    """Each tool call's arguments of an unstreamed answer, as one delta per call."""
    calls = message.get("tool_calls")
    for index, call in enumerate(calls if isinstance(calls, list) else ()):
        fn = call.get("function") if isinstance(call, Mapping) else None
        arguments = fn.get("arguments") if isinstance(fn, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(arguments, str) or not arguments:
            continue
        call_id, name = call.get("id"), fn.get("name")
        key = call_id if isinstance(call_id, str) and call_id else f"#{index}"
        emit(ToolInputDelta(key, name if isinstance(name, str) else "", arguments))


# Error types / codes that say "try again later" when a server reports an error object
# inside a 200 response (a stream, or a JSON body): the usual OpenAI-style names.
_TRANSIENT_KINDS = frozenset(
    {
        "server_error",
        "internal_server_error",
        "internal_error",
        "overloaded_error",
        "overloaded",
        "rate_limit_error",
        "rate_limit_exceeded",
        "timeout",
        "service_unavailable",
    }
)


def stream_error(error: Any) -> HostStreamError:
    """The exception for an error object inside a 200 answer (``data: {"error": ...}``).

    ``context["transient"]`` says whether the connection retries it: an integer ``code``
    of 408, 429 or >= 500, or a ``type``/``code`` naming a server-side or rate-limit error.
    """
    fields = error if isinstance(error, Mapping) else {"message": error}
    message = fields.get("message")
    text = message if isinstance(message, str) and message else json.dumps(error, default=str)
    code, kind = fields.get("code"), fields.get("type")
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    names = {str(v).lower() for v in (code, kind) if isinstance(v, str)}
    transient = bool(names & _TRANSIENT_KINDS) or (
        status is not None and (status in (408, 429) or status >= 500)
    )
    if says_invalid(error):  # its message, type or code says the request was invalid
        transient = False
    return HostStreamError(
        f"the chat endpoint reported an error: {excerpt(text, _ERROR_EXCERPT)}",
        code="chat_stream_error",
        server_message=excerpt(text, _ERROR_EXCERPT),
        error_type=kind if isinstance(kind, str) else None,
        status=status,
        transient=transient,
    )


class _StreamedCall:
    """One tool call assembled from stream chunks.

    Servers disagree on how the ``id`` and ``function.name`` of a streamed call arrive:
    once in the first chunk (OpenAI), whole again in every chunk (llama.cpp), or split
    across chunks. The pieces are kept and resolved once the stream ends (:func:`_joined`);
    ``arguments`` are always deltas and are concatenated.

    For :class:`~managedloop.hosts.ToolInputDelta` s (:meth:`delta`) the call is keyed by
    its id as read at its first arguments piece (``"#<index>"`` without one: servers send
    the id before the arguments), and its name is read as it stands, again only when a
    name piece that differs from that reading arrives.
    """

    __slots__ = ("_key", "_name", "arguments", "ids", "index", "names")

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.ids: list[str] = []
        self.names: list[str] = []
        self.arguments: list[str] = []
        self._key: str | None = None
        self._name: str | None = None  # the name as read so far (None: read it again)

    def add(self, tc: Mapping[str, Any]) -> str:
        """Take one chunk of the call; the arguments piece it carried (``""``: none)."""
        if isinstance(tc.get("id"), str) and tc["id"]:
            self.ids.append(tc["id"])
        fn = tc.get("function") or {}
        name = fn.get("name")
        if isinstance(name, str) and name:
            self.names.append(name)
            if name != self._name:
                self._name = None
        piece = fn.get("arguments")
        if isinstance(piece, str) and piece:
            self.arguments.append(piece)
            return piece
        return ""

    def delta(self, piece: str, known: set[str]) -> ToolInputDelta:
        """``piece`` of this call's arguments as a host-contract delta."""
        key = self._key
        if key is None:
            key = self._key = _joined(self.ids, set()) or f"#{self.index}"
        name = self._name
        if name is None:
            name = self._name = _joined(self.names, known)
        return ToolInputDelta(key, name, piece)

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
