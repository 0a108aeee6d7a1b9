"""The transport seam of the Local host: bytes below, Chat Completions above.

Above the seam (:mod:`._http`) everything is sans-IO and shared by every transport: the
request body and headers, redirects, the SSE reader (:mod:`._sse`) and
:class:`~._http.StreamFold`, and the mapping of answers and failures to the
:mod:`managedloop.errors` tree. Below it a transport moves one request and its answer, in
the style of httpx's ``AsyncBaseTransport``: **one method**,
:meth:`AsyncTransport.handle_request`, plus an optional :meth:`AsyncTransport.aclose`.

* :class:`HttpTransport` (the default): Local's own HTTP/1.1 pool on httptools
  (:mod:`._wire`), chosen for its garbage-collector cost at 10,000 sessions.
* :class:`AiohttpTransport`: the same options on aiohttp, for what aiohttp has (its
  connector, tracing, an existing ``ClientSession`` setup) at a measured cost
  (``bench/local_transports.py``).
* :class:`managedloop.testing.MockTransport`: a function answers each request, for unit
  tests with no socket.

Both real transports take the same network options and behave the same: ``proxy`` /
``trust_env`` (:mod:`._proxy`: ``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), ``verify``
/ ``client_cert`` (:mod:`._tls`), ``timeout`` (seconds without a byte), ``connect_timeout``
and ``max_connections``.

The contract a transport keeps (what :mod:`._http` relies on):

* ``handle_request`` sends ``request`` to ``request.url`` (never userinfo in it: the
  layer above turned it into ``Authorization``) with exactly ``request.headers`` (plus
  ``Host`` and ``Content-Length``, and a proxy's own headers to the proxy), follows no
  redirect and returns an :class:`HttpResponse`: for ``stream=False`` with the body read,
  for ``stream=True`` once the head is in.
* A failure worth retrying raises :class:`~managedloop.TransportError`; one that cannot
  heal raises it with ``permanent=True`` (never retried); an answer that breaks HTTP a
  :class:`~managedloop.MalformedResponseError`. The built-in transports raise their
  :class:`._wire.WireError` kinds, mapped above the seam.
* ``aclose`` closes its connections; the transport may be used again afterwards (on this
  or another event loop: ``run_sync`` runs each call on a fresh loop).
"""

from __future__ import annotations

import abc
import asyncio
import ssl
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from managedloop.errors import InvalidOptionsError
from managedloop.providers.local import _wire
from managedloop.providers.local._proxy import Proxy, ProxyRules
from managedloop.providers.local._tls import default_context, ssl_context

__all__ = [
    "AiohttpTransport",
    "AsyncTransport",
    "HttpRequest",
    "HttpResponse",
    "HttpTransport",
]

DEFAULT_TIMEOUT = 300.0  # seconds without a byte from the model; local models can be slow
DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds; a loopback or LAN endpoint connects in ms


class HttpRequest:
    """One request for a transport (slotted, not a dataclass: one is made per call)."""

    __slots__ = ("body", "fresh", "headers", "method", "stream", "url")

    def __init__(
        self,
        method: str,
        url: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        *,
        stream: bool = False,
        fresh: bool = False,
    ) -> None:
        self.method = method
        self.url = url
        """Absolute ``http(s)`` URL, without userinfo."""
        self.headers = headers
        """``(name, value)`` pairs, sent as given (may hold a credential: never log them)."""
        self.body = body
        self.stream = stream
        """The caller reads the body as it arrives (:meth:`HttpResponse.next_chunk`)."""
        self.fresh = fresh
        """Send on a connection of its own, closed after the answer."""

    def __repr__(self) -> str:  # no headers: they carry the API key
        return f"HttpRequest({self.method!r}, {self.url!r}, stream={self.stream})"


class HttpResponse(Protocol):
    """What a transport returns (a structural type: any object with these members)."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Lower-case names; a repeated header's values joined with ``", "``."""
        ...

    async def read(self) -> bytes:
        """The rest of the body, decoded (``gzip``/``deflate`` undone)."""
        ...

    async def next_chunk(self) -> bytes:
        """The next piece of the body, decoded; ``b""`` once it ended."""
        ...

    def release(self) -> None:
        """Done with the answer (its connection may be reused)."""
        ...


class AsyncTransport(abc.ABC):
    """The one-method transport interface (see the module docstring)."""

    @abc.abstractmethod
    async def handle_request(self, request: HttpRequest) -> HttpResponse:
        """Send ``request``; its answer (see the contract in the module docstring)."""

    async def aclose(self) -> None:  # noqa: B027 - optional: a transport may hold nothing
        """Close idle and open connections (the transport stays usable)."""


def _check_network_options(timeout: Any, connect_timeout: Any, max_connections: Any) -> None:
    for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e12:
            raise InvalidOptionsError(f"{name} must be a positive number of seconds", option=name)
    if isinstance(max_connections, bool) or not isinstance(max_connections, int):
        raise InvalidOptionsError("max_connections must be an integer", option="max_connections")
    if max_connections < 0:
        raise InvalidOptionsError("max_connections must be >= 0", option="max_connections")


# Characters a request target may carry as they are (RFC 3986 pchar, "/", "?" and "%",
# so escapes already in the URL stay); anything else (non-ASCII, a space) is escaped.
_TARGET_SAFE = "/?%:@!$&'()*+,;=-._~"
_MAX_ROUTES = 64  # URLs remembered per transport (one base URL, a few redirect targets)


class _Route:
    """Where one URL's requests go: pool key, request line, ``Host``, and proxy."""

    __slots__ = ("host", "key", "line", "via")

    def __init__(self, method: str, url: str, proxies: ProxyRules) -> None:
        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname or ""
        default = 443 if scheme == "https" else 80
        port = parts.port or default
        try:
            name = host.encode("idna").decode("ascii") if not host.isascii() else host
        except UnicodeError:
            name = host
        if ":" in name:
            name = f"[{name}]"  # an IPv6 literal
        if parts.port is not None and parts.port != default:
            name = f"{name}:{parts.port}"
        target = quote(parts.path or "/", safe=_TARGET_SAFE)
        if parts.query:
            target += "?" + quote(parts.query, safe=_TARGET_SAFE)
        proxy = proxies.for_url(scheme, host, port)
        self.key: tuple[Any, ...] = (scheme, host, port)
        self.via: _wire.Via | None = None
        auth = _proxy_authorization(proxy)
        if proxy is not None:
            self.key = (scheme, host, port, proxy.host, proxy.port, auth)
            self.via = _wire.Via(proxy.host, proxy.port, auth if scheme == "https" else b"")
            if scheme == "http":  # forwarded: absolute form, the credentials to the proxy
                target = f"http://{name}{target}"
        self.line = f"{method} {target} HTTP/1.1\r\n".encode("ascii")
        self.host = f"Host: {name}\r\n".encode("ascii")
        if proxy is not None and scheme == "http":
            self.host += auth  # the proxy takes (and strips) Proxy-Authorization

    def __repr__(self) -> str:  # the proxy's credentials live in key and host
        return f"_Route({self.key[:3]!r})"

    def head(self, headers: Sequence[tuple[str, str]], length: int) -> bytes:
        lines = [self.line]
        with_host = True
        for name, value in headers:
            if with_host and len(name) == 4 and name.lower() == "host":
                with_host = False
            lines.append(f"{name}: {value}\r\n".encode())
        if with_host:
            lines.insert(1, self.host)
        elif self.via is not None and self.host.count(b"\r\n") > 1:
            lines.insert(1, self.host.partition(b"\r\n")[2])  # Proxy-Authorization only
        lines.append(b"Content-Length: %d\r\n\r\n" % length)
        return b"".join(lines)


def _proxy_authorization(proxy: Proxy | None) -> bytes:
    if proxy is None or proxy.authorization is None:
        return b""
    return f"Proxy-Authorization: {proxy.authorization.reveal()}\r\n".encode("latin-1")


class _NetworkTransport(AsyncTransport):
    """The network options both built-in transports take, checked and kept alike."""

    __slots__ = ("_connect_timeout", "_max_connections", "_timeout", "proxies", "ssl_context")

    def __init__(
        self,
        *,
        proxy: str | None = None,
        trust_env: bool = True,
        verify: bool | str | ssl.SSLContext = True,
        client_cert: str | tuple[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_connections: int = 0,
    ) -> None:
        _check_network_options(timeout, connect_timeout, max_connections)
        if not isinstance(trust_env, bool):
            raise InvalidOptionsError("trust_env must be True or False", option="trust_env")
        self.proxies = ProxyRules(proxy, trust_env=trust_env)
        self.ssl_context: ssl.SSLContext | None = ssl_context(verify, client_cert)
        self._timeout = float(timeout)
        self._connect_timeout = float(connect_timeout)
        self._max_connections = max_connections
        self._start()

    @abc.abstractmethod
    def _start(self) -> None:
        """Set up the transport's own state (its pools, none open yet)."""


class HttpTransport(_NetworkTransport):
    """Local's default transport: keep-alive HTTP/1.1 on httptools (:mod:`._wire`).

    One pool per event loop, made on first use; :meth:`aclose` closes it.
    """

    __slots__ = ("_loop", "_pool", "_routes")

    def _start(self) -> None:
        self._pool: _wire.Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._routes: dict[tuple[str, str], _Route] = {}

    def __repr__(self) -> str:
        return f"HttpTransport(proxies={self.proxies!r})"

    def session(self) -> _wire.Pool:
        """The pool of the running event loop (a new one after a loop change)."""
        loop = asyncio.get_running_loop()
        pool = self._pool
        if pool is None or pool.closed or self._loop is not loop:
            # A pool made on another (finished) loop cannot be reused: its sockets belong
            # to that loop. It was closed when its last user released it.
            pool = _wire.Pool(
                read_timeout=self._timeout,
                connect_timeout=self._connect_timeout,
                limit=self._max_connections,
                ssl_context=self.ssl_context,
            )
            self._pool, self._loop = pool, loop
        return pool

    def handle_request(self, request: HttpRequest) -> Coroutine[Any, Any, HttpResponse]:
        # A plain function returning the pool's coroutine: one suspended frame less per
        # request in flight (the garbage collector walks each; bench/README.md).
        routes = self._routes
        route = routes.get((request.method, request.url))
        if route is None:
            if len(routes) >= _MAX_ROUTES:
                routes.clear()
            route = routes[(request.method, request.url)] = _Route(
                request.method, request.url, self.proxies
            )
        head = route.head(request.headers, len(request.body))
        return self.session().request(
            route.key, head, request.body, stream=request.stream, fresh=request.fresh, via=route.via
        )

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and not pool.closed:
            await pool.aclose()


class AiohttpTransport(_NetworkTransport):
    """The same options as :class:`HttpTransport`, on an aiohttp ``ClientSession`` (one
    per event loop, made on first use). Proxies are chosen by :mod:`._proxy` (not by
    aiohttp's ``trust_env``, which also reads ``.netrc``), so both transports agree."""

    __slots__ = ("_sessions",)

    def _start(self) -> None:
        self._sessions: dict[asyncio.AbstractEventLoop, Any] = {}

    def __repr__(self) -> str:
        return f"AiohttpTransport(proxies={self.proxies!r})"

    def _session(self) -> Any:
        import aiohttp

        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            for old in [k for k, v in self._sessions.items() if k.is_closed() or v.closed]:
                del self._sessions[old]
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._max_connections, ssl=self.ssl_context or default_context()
                ),
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=self._connect_timeout, sock_read=self._timeout
                ),
                skip_auto_headers=("User-Agent",),
                trust_env=False,  # proxies come from ._proxy, the same rules as HttpTransport
            )
            self._sessions[loop] = session
        return session

    async def handle_request(self, request: HttpRequest) -> HttpResponse:
        import aiohttp

        session = self._session()
        parts = urlsplit(request.url)
        scheme = parts.scheme
        port = parts.port or (443 if scheme == "https" else 80)
        proxy = self.proxies.for_url(scheme, parts.hostname or "", port)
        headers = list(request.headers)
        proxy_url = proxy_headers = None
        if proxy is not None:
            proxy_url = f"http://{proxy.host}:{proxy.port}"
            if proxy.authorization is not None:
                secret = proxy.authorization.reveal()
                if scheme == "https":
                    proxy_headers = {"Proxy-Authorization": secret}  # on the CONNECT only
                else:
                    headers.append(("Proxy-Authorization", secret))  # to the proxy itself
        if request.fresh:
            headers.append(("Connection", "close"))
        try:
            resp = await session.request(
                request.method,
                request.url,
                data=request.body,
                headers=headers,
                proxy=proxy_url,
                proxy_headers=proxy_headers,
                allow_redirects=False,
            )
            if not request.stream:
                await resp.read()
        except Exception as exc:
            raise _aiohttp_error(exc, aiohttp) from None
        return _AiohttpResponse(resp)

    async def aclose(self) -> None:
        sessions, self._sessions = self._sessions, {}
        loop = asyncio.get_running_loop()
        for owner, session in sessions.items():
            if owner is loop:
                await session.close()
            elif not owner.is_closed():
                self._sessions[owner] = session  # another loop's: closed there


class _AiohttpResponse:
    __slots__ = ("_resp", "headers", "status")

    def __init__(self, resp: Any) -> None:
        self._resp = resp
        self.status: int = resp.status
        headers: dict[str, str] = {}
        for name, value in resp.headers.items():
            key = name.lower()
            old = headers.get(key)
            headers[key] = value if old is None else f"{old}, {value}"
        self.headers = headers

    async def read(self) -> bytes:
        import aiohttp

        try:
            body: bytes = await self._resp.read()
        except Exception as exc:
            raise _aiohttp_error(exc, aiohttp) from None
        return body

    async def next_chunk(self) -> bytes:
        import aiohttp

        try:
            piece: bytes = await self._resp.content.readany()
        except Exception as exc:
            raise _aiohttp_error(exc, aiohttp) from None
        return piece

    def release(self) -> None:
        self._resp.release()


def _aiohttp_error(exc: Exception, aiohttp: Any) -> Exception:
    """aiohttp's exception as the :mod:`._wire` kind the layer above maps."""
    text = str(exc)
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        if exc.status == 407:
            return _wire.ProxyAuthError(
                "the proxy answered CONNECT with 407 Proxy Authentication Required"
            )
        return _wire.ProxyStatusError(f"the proxy answered CONNECT with {exc.status}", exc.status)
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError) or (
        # TLS 1.3: the server refuses our certificate after the handshake, in an alert on
        # the first read (aiohttp reports it as a ClientOSError)
        isinstance(exc, aiohttp.ClientOSError) and "[SSL:" in text and "CERTIFICATE" in text
    ):
        return _wire.TLSError(f"the TLS handshake failed: {text}")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return _wire.ConnectTimeoutError(f"connecting took too long: {text}")
    if isinstance(exc, aiohttp.ServerTimeoutError | asyncio.TimeoutError):
        return _wire.ReadTimeoutError(f"no bytes from the server in time: {text}")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _wire.ConnectError(f"cannot connect: {text}")
    if isinstance(exc, aiohttp.ClientResponseError):
        if "Got more than" in text or "too long" in text.lower() or "Too many headers" in text:
            return _wire.HeadTooLargeError(f"the answer's head is too large: {text}")
        return _wire.BadResponseError(f"the answer is not HTTP/1.1: {text}")
    if isinstance(exc, aiohttp.ClientError):
        return _wire.DisconnectedError(f"the exchange failed: {text}")
    return exc
