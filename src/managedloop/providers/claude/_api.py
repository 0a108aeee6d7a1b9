"""The ``anthropic`` SDK as this host uses it: client construction, auth, errors, telemetry.

* **Config.** Every key of the seed's table for this host (``api_key``,
  ``bearer_token_file``, ``base_url``, ``beta``, ``files_beta``, ``anthropic_version``,
  ``receive_timeout``) is resolved through :func:`managedloop.config.resolve`. Exactly one
  auth source is selected; an explicit ``api_key=None`` selects the bearer file even when
  ``ANTHROPIC_API_KEY`` is set, and ``bearer_token_file=None`` the reverse.
* **Bearer-token file.** JSON ``{"access_token": ..., "expires_at": <unix seconds>}``. The
  file is read by a transport wrapper on the SDK's HTTP client, so it is re-read on every
  HTTP attempt (JSON, Files and the SSE stream, including the SDK's own retries). An
  unreadable file or a token with 30 s or less left raises before the request is sent; the
  exception derives from ``anthropic.AnthropicError`` so the SDK re-raises it instead of
  retrying it as a connection error. Bearer clients never follow redirects, and the token is
  only ever attached to requests for the configured host. The token is never stored: not
  on the client, not in a ``repr``, log line, error or telemetry attribute.
* **Errors.** SDK exceptions map onto the core tree: 401/403 -> ``AuthenticationError``,
  other statuses -> ``APIStatusError`` (``status``, ``body``, ``request_id``), connection
  failures and timeouts -> ``TransportError``.
* **Telemetry.** Every API call is a ``request`` span (``method``, ``path``, ``status``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import re
import time
import urllib.parse
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from managedloop import telemetry
from managedloop._loops import ephemeral_loop
from managedloop.config import MISSING, Secret, resolve, reveal
from managedloop.errors import (
    APIStatusError,
    AuthenticationError,
    ConfigError,
    InvalidOptionsError,
    MalformedResponseError,
    ManagedLoopError,
    ProviderError,
    TransportError,
)

if TYPE_CHECKING:
    import anthropic
    import httpx2

__all__ = [
    "Api",
    "ClientSettings",
    "ClientSource",
    "Page",
    "build_client",
    "map_error",
    "settings",
]

T = TypeVar("T")

BEARER_MIN_REMAINING = 30.0  # seconds; a token this close to expiry would die mid-request
_PLACEHOLDER = "managedloop-bearer-file"  # sent nowhere: the transport replaces it
# What a credential sent as a header value may hold: visible ASCII, no space (API keys and
# RFC 6750 tokens do). h11 refuses anything else (a newline read with a key file, a stray
# space) with an error that quotes the whole header, credential included.
_HEADER_SAFE = re.compile(r"[!-~]+")


class ClientSettings:
    """Resolved configuration for one client (secrets stay wrapped)."""

    __slots__ = (
        "anthropic_version",
        "api_key",
        "base_url",
        "bearer_token_file",
        "beta",
        "files_beta",
        "receive_timeout",
    )

    def __init__(
        self,
        *,
        api_key: Secret | None,
        bearer_token_file: str | None,
        base_url: str,
        beta: str,
        files_beta: str,
        anthropic_version: str,
        receive_timeout: float,
    ) -> None:
        self.api_key = api_key
        self.bearer_token_file = bearer_token_file
        self.base_url = base_url
        self.beta = beta
        self.files_beta = files_beta
        self.anthropic_version = anthropic_version
        self.receive_timeout = receive_timeout

    def __repr__(self) -> str:
        auth = "api_key" if self.api_key is not None else "bearer_token_file"
        return f"ClientSettings(base_url={self.base_url!r}, auth={auth})"


def settings(
    *,
    api_key: Any = MISSING,
    bearer_token_file: Any = MISSING,
    base_url: Any = MISSING,
    beta: Any = MISSING,
    files_beta: Any = MISSING,
    anthropic_version: Any = MISSING,
    receive_timeout: Any = MISSING,
    need_auth: bool = True,
) -> ClientSettings:
    """Resolve every key of this host through the one config module."""
    key = resolve("api_key", api_key)
    path = resolve("bearer_token_file", bearer_token_file)
    if api_key is None:  # explicit None selects the bearer file even if a key is configured
        key = None
    if bearer_token_file is None:
        path = None
    if key is not None and path is not None:
        if api_key is not MISSING and bearer_token_file is MISSING:
            path = None
        elif bearer_token_file is not MISSING and api_key is MISSING:
            key = None
        else:
            raise ConfigError(
                "select exactly one auth source: api_key or bearer_token_file (pass the "
                "other as None)",
                code="invalid_configuration",
                key="api_key",
            )
    if need_auth and key is None and path is None:
        raise ConfigError(
            "missing required configuration: set argument api_key=... or "
            "bearer_token_file=..., managedloop.configure(...), or env ANTHROPIC_API_KEY / "
            "ANTHROPIC_BEARER_TOKEN_FILE",
            key="api_key",
        )
    timeout = resolve("receive_timeout", receive_timeout)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigError(
            "receive_timeout must be a positive, finite number of seconds",
            code="invalid_configuration",
            key="receive_timeout",
        )
    if need_auth and key is not None and _HEADER_SAFE.fullmatch(reveal(key) or "") is None:
        # The key itself is never quoted. (With client= the client's own key is sent.)
        message = "api_key must be visible ASCII with no whitespace (a newline read with it?)"
        if api_key is not MISSING:
            raise InvalidOptionsError(message, option="api_key")
        raise ConfigError(message, code="invalid_configuration", key="api_key")
    url = str(resolve("base_url", base_url)).rstrip("/")
    problem = _url_problem(url)
    if problem is not None:
        # The URL itself is not quoted: it may hold a password (that is one of the problems).
        message = f"base_url {problem}"
        if base_url is not MISSING:
            raise InvalidOptionsError(message, option="base_url")
        raise ConfigError(message, code="invalid_configuration", key="base_url")
    return ClientSettings(
        api_key=key if isinstance(key, Secret) or key is None else Secret(str(key)),
        bearer_token_file=os.fspath(path) if path is not None else None,
        base_url=url,
        beta=str(resolve("beta", beta)),
        files_beta=str(resolve("files_beta", files_beta)),
        anthropic_version=str(resolve("anthropic_version", anthropic_version)),
        receive_timeout=float(timeout),
    )


def _url_problem(url: str) -> str | None:
    """Why ``url`` cannot be the API's base URL, or ``None``. Credentials in it are refused:
    the base URL is shown in reprs and errors, and the SDK authenticates with headers."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return "is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http(s) URL with a host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (pass api_key= or bearer_token_file=)"
    return None


def read_bearer_token(path: str, *, now: float | None = None) -> str:
    """The current token in ``path``; raises :class:`AuthenticationError` if unusable."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise AuthenticationError(
            "bearer token file not found", reason="bearer_file_missing", path=path
        ) from None
    except (OSError, ValueError):
        raise AuthenticationError(
            "bearer token file is not readable JSON", reason="bearer_file_invalid", path=path
        ) from None
    token = data.get("access_token") if isinstance(data, dict) else None
    expires = data.get("expires_at") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token:
        raise AuthenticationError(
            "bearer token file has no access_token", reason="bearer_file_invalid", path=path
        )
    if _HEADER_SAFE.fullmatch(token) is None:
        raise AuthenticationError(
            "bearer token file's access_token must be visible ASCII with no whitespace",
            reason="bearer_file_invalid",
            path=path,
        )
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        raise AuthenticationError(
            "bearer token file has no numeric expires_at", reason="bearer_file_invalid", path=path
        )
    left = expires - (time.time() if now is None else now)
    if left <= BEARER_MIN_REMAINING:
        raise AuthenticationError(
            f"bearer token expires in {max(left, 0):.0f}s (needs more than "
            f"{BEARER_MIN_REMAINING:.0f}s)",
            reason="bearer_token_expiring",
            path=path,
        )
    return token


def _bearer_transport(path: str, host: str) -> httpx2.AsyncBaseTransport:
    import anthropic
    import httpx2

    class BearerFileError(anthropic.AnthropicError):
        """Carries the pre-dispatch auth failure through the SDK un-retried."""

        def __init__(self, error: AuthenticationError) -> None:
            self.error = error
            super().__init__(error.message)

    class BearerFileTransport(httpx2.AsyncBaseTransport):
        """Reads the bearer file for every attempt and attaches the current token."""

        def __init__(self) -> None:
            self._inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            request.headers.pop("x-api-key", None)
            if request.url.host != host:
                request.headers.pop("authorization", None)  # never hand the token elsewhere
            else:
                try:
                    token = read_bearer_token(path)
                except AuthenticationError as exc:
                    raise BearerFileError(exc) from None
                request.headers["authorization"] = f"Bearer {token}"
            return await self._inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self._inner.aclose()

    return BearerFileTransport()


def build_client(s: ClientSettings, *, max_retries: int = 2) -> anthropic.AsyncAnthropic:
    """An ``AsyncAnthropic`` for these settings (API key, or bearer file)."""
    import anthropic
    import httpx2

    headers = {"anthropic-version": s.anthropic_version}
    if s.api_key is not None:
        return anthropic.AsyncAnthropic(
            api_key=s.api_key.reveal(),
            base_url=s.base_url,
            max_retries=max_retries,
            timeout=s.receive_timeout,
            default_headers=headers,
            # The SDK's default client follows redirects, re-sending a POST (and its body)
            # wherever a 307 points; a redirect is an error here, as for the bearer file.
            http_client=anthropic.DefaultAsyncHttpxClient(
                follow_redirects=False, timeout=s.receive_timeout
            ),
        )
    assert s.bearer_token_file is not None
    host = httpx2.URL(s.base_url).host
    http_client = httpx2.AsyncClient(
        transport=_bearer_transport(s.bearer_token_file, host),
        follow_redirects=False,  # a redirect must never carry the token to another host
        timeout=httpx2.Timeout(s.receive_timeout, connect=5.0),
    )
    return anthropic.AsyncAnthropic(
        auth_token=_PLACEHOLDER,
        base_url=s.base_url,
        max_retries=max_retries,
        http_client=http_client,
        default_headers=headers,
    )


def map_error(exc: BaseException) -> ManagedLoopError:
    """The core error for an SDK / transport exception (never containing secrets)."""
    import anthropic
    import httpx2

    if isinstance(exc, ManagedLoopError):
        return exc
    current: BaseException | None = exc
    while current is not None:  # a bearer-file failure may arrive wrapped
        inner = getattr(current, "error", None)
        if isinstance(inner, AuthenticationError):
            return inner
        current = current.__cause__
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        body = exc.body
        request_id = getattr(exc, "request_id", None)
        message = getattr(exc, "message", "") or f"HTTP {status}"
        if status in (401, 403):
            return AuthenticationError(
                f"authentication failed: {message}", status=status, body=body, request_id=request_id
            )
        return APIStatusError(
            f"the API answered {status}: {message}", status=status, body=body, request_id=request_id
        )
    if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
        return TransportError("the request timed out", reason="timeout")
    if isinstance(exc, anthropic.APIConnectionError | httpx2.HTTPError | OSError):
        return TransportError(
            f"connection failed: {type(exc.__cause__ or exc).__name__}",
            reason=type(exc.__cause__ or exc).__name__,
        )
    return TransportError(f"unexpected client failure: {type(exc).__name__}", reason="unknown")


class Page:
    """One page of a list answer, read from its raw JSON ``body`` (SDK models would mis-type
    event types they do not know). A body without a ``data`` list raises
    ``ProviderError(code="unexpected_response")`` when ``strict``, else is an empty last page.
    """

    __slots__ = ("data", "next_page")

    def __init__(self, body: Any, *, strict: bool = True) -> None:
        mapping = body if isinstance(body, Mapping) else {}
        data = mapping.get("data")
        if not isinstance(data, list):
            if strict:
                raise ProviderError(
                    "the list answer has no data list",
                    code="unexpected_response",
                    body=str(body)[:500],
                )
            data = []
        self.data: list[Any] = data
        nxt = mapping.get("next_page")
        self.next_page = nxt if isinstance(nxt, str) else None


class Api:
    """The calls this host makes, each a telemetry ``request`` span with mapped errors."""

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        s: ClientSettings,
        *,
        caller: Mapping[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.s = s
        self.caller = dict(caller or {})
        self.headers = {"anthropic-beta": s.beta, "anthropic-version": s.anthropic_version}
        self.files_headers = {
            "anthropic-beta": f"{s.files_beta},{s.beta}",
            "anthropic-version": s.anthropic_version,
        }
        self.upload_headers = {
            "anthropic-beta": s.files_beta,
            "anthropic-version": s.anthropic_version,
        }
        # What every management call passes the SDK: the beta headers and our timeout.
        self.opts: dict[str, Any] = {"extra_headers": self.headers, "timeout": s.receive_timeout}

    @functools.cached_property
    def send_client(self) -> anthropic.AsyncAnthropic:
        """The client for event sends, with the SDK's automatic retry off: a retried POST
        can deliver twice (no idempotency key); the connection retries itself after
        checking the history. Built on first use: provisioning and Files calls never send.
        """
        return self.client.with_options(max_retries=0)

    async def call(self, method: str, path: str, fn: Callable[[], Awaitable[T]]) -> T:
        with telemetry.span("request", {"method": method, "path": path}, caller=self.caller) as x:
            try:
                result = await fn()
            except Exception as exc:
                mapped = map_error(exc)
                x["status"] = mapped.context.get("status")
                raise mapped from exc
            x["status"] = 200
            return result

    async def list_all(
        self, method_path: str, page_fn: Callable[[str | None], Awaitable[Any]]
    ) -> list[Any]:
        """Every item of a cursor-paged list (``next_page`` -> ``page``), one span per page.

        Stops when ``next_page`` is empty or repeats (a server that loops must not hang us).
        """
        items: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        while True:
            page = await self.call("get", method_path, lambda c=cursor: page_fn(c))  # type: ignore[misc]
            data = getattr(page, "data", None)
            if not isinstance(data, list):
                break
            items.extend(data)
            nxt = getattr(page, "next_page", None)
            if not nxt or nxt in seen:
                break
            seen.add(nxt)
            cursor = nxt
        return items

    async def list_raw(
        self, path: str, fetch: Callable[[str | None], Awaitable[Any]], *, strict: bool = True
    ) -> list[dict[str, Any]]:
        """Every item of a list endpoint as raw JSON dicts; ``fetch(cursor)`` returns the
        SDK's raw response (``with_raw_response``) of one page (see :class:`Page`)."""

        async def page(cursor: str | None) -> Page:
            response = (await fetch(cursor)).http_response
            try:
                body = response.json()
            except (ValueError, RecursionError):
                # Not JSON, or nested too deeply for the decoder: a named error, never a
                # raw RecursionError out of a history read.
                raise MalformedResponseError(
                    "a list page is not decodable JSON",
                    code="malformed_response",
                    path=path,
                    size=len(response.content),
                ) from None
            return Page(body, strict=strict)

        return [i for i in await self.list_all(path, page) if isinstance(i, dict)]


_CLIENT_LOOPS: weakref.WeakKeyDictionary[Any, asyncio.AbstractEventLoop] = (
    weakref.WeakKeyDictionary()
)
"""The event loop each caller-owned client first ran on (see :class:`ClientSource`)."""


class Lease:
    """One hold on a :class:`ClientSource` client; ``release()`` may be called repeatedly."""

    __slots__ = ("_source", "client")

    def __init__(self, source: ClientSource | None, client: anthropic.AsyncAnthropic) -> None:
        self._source = source
        self.client = client

    async def release(self) -> None:
        source, self._source = self._source, None
        if source is not None:
            await source.release(self.client)


class ClientSource:
    """Where a provider's SDK client comes from, and who closes it.

    Why: an ``AsyncAnthropic``'s connection pool belongs to the event loop it first ran
    on, and ``run_sync`` runs every call on a fresh loop. Pooled sockets of a finished loop
    can neither be reused nor closed from another loop.

    * **Built from config** (no ``client=``): one client per running event loop, with its
      own ``http_client``, leased by every session and every provisioning / Files call and
      closed (``AsyncAnthropic.close()``) when the last lease on that loop ends, or when the
      provider is exited (``async with provider:`` keeps it open across sessions).
    * **Passed by the user**: used as is and never closed: the caller owns it (``async
      with client:``) — except inside a ``*_sync`` call, whose loop is thrown away: there
      a copy of it with its own HTTP pool serves the call and is closed with it. Using the
      client itself on a second loop after the first has closed (two ``asyncio.run``)
      raises ``InvalidOptionsError(code="client_loop_closed")``
      instead of failing later inside the HTTP pool.
    """

    __slots__ = ("_clients", "_max_retries", "_pinned", "_settings", "_user")

    def __init__(
        self,
        s: ClientSettings,
        *,
        client: anthropic.AsyncAnthropic | None,
        max_retries: int,
    ) -> None:
        self._settings = s
        self._user = client
        self._max_retries = max_retries
        # One owned client per running loop (sync calls from several threads each run
        # their own loop): loop -> [client, leases].
        self._clients: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        self._pinned = False

    @property
    def user_client(self) -> anthropic.AsyncAnthropic | None:
        """The caller's client, if one was passed (the caller owns it)."""
        return self._user

    def current(self) -> anthropic.AsyncAnthropic:
        """The client for the running loop (built if needed; not counted as a lease)."""
        loop = asyncio.get_running_loop()
        if self._user is not None and not ephemeral_loop.get():
            # Tracked per client object, not per provider: several providers may share one.
            first = _CLIENT_LOOPS.get(self._user)
            if first is None or first.is_closed():
                if first is not None and first is not loop:
                    raise InvalidOptionsError(
                        "this anthropic.AsyncAnthropic was used on an event loop that has "
                        "closed (e.g. an earlier asyncio.run); its connection pool cannot be "
                        "reused. Use one loop per client, ml.run_sync (which serves each "
                        "call from a copy of it), or let ClaudeManagedAgents build the "
                        "client (api_key=/base_url= or config).",
                        code="client_loop_closed",
                        option="client",
                    )
                _CLIENT_LOOPS[self._user] = loop
            return self._user
        for other in [lp for lp in list(self._clients) if lp.is_closed()]:
            # A client of a finished loop is dropped, not closed: its sockets died with it
            # (it was closed when its last lease ended, unless a lease was leaked).
            self._clients.pop(other, None)
        entry = self._clients.get(loop)
        if entry is None:
            if self._user is not None:
                # A *_sync call's loop ends with the call: serve it from a copy of the
                # caller's client (same auth, base URL, headers, retries) with an HTTP pool
                # of our own, closed with the call, so the caller's client is never bound
                # to a dead loop and can serve the next call.
                import anthropic

                derived = self._user.copy(http_client=anthropic.DefaultAsyncHttpxClient())
                entry = [derived, 0]
            else:
                entry = [build_client(self._settings, max_retries=self._max_retries), 0]
            self._clients[loop] = entry
        client: anthropic.AsyncAnthropic = entry[0]
        return client

    def acquire(self) -> anthropic.AsyncAnthropic:
        client = self.current()
        if client is not self._user:
            self._clients[asyncio.get_running_loop()][1] += 1
        return client

    def lease(self) -> Lease:
        """An idempotently released lease on the running loop's client."""
        return Lease(self, self.acquire())

    async def release(self, client: anthropic.AsyncAnthropic) -> None:
        if client is self._user:
            return
        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is None or entry[0] is not client:
            return
        entry[1] = max(0, entry[1] - 1)
        if entry[1] == 0 and not self._pinned:
            await self._close(loop)

    def pin(self) -> None:
        self.current()
        self._pinned = True

    async def unpin(self) -> None:
        self._pinned = False
        loop = asyncio.get_running_loop()
        entry = self._clients.get(loop)
        if entry is not None and entry[1] == 0:
            await self._close(loop)

    async def _close(self, loop: asyncio.AbstractEventLoop) -> None:
        entry = self._clients.pop(loop, None)
        if entry is not None:
            await entry[0].close()
