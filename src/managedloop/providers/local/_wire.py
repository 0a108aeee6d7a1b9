"""A lean HTTP/1.1 client for Local's chat calls: ``asyncio.Protocol`` plus httptools.

Why it exists (measured, ``bench/README.md``): with 10,000 concurrent Local sessions on one
event loop, CPython's garbage collector is the largest cost. Every full (generation 2)
collection walks every live GC-tracked object, and an in-flight request on aiohttp holds
dozens (its request coroutines, ``ClientResponse``, ``StreamReader``, ``CIMultiDict``
headers, timer and handle chain), so a bare aiohttp loop alone took about 1.8x the time of
a raw asyncio client. This module holds, per request in flight, one connection object
(the protocol, which also holds the response state), its C parser, one future and one
timer handle; the parsing itself is llhttp's (httptools, the parser uvicorn uses), not a
hand-written one.

What it does and does not do:

* ``POST`` only, one request at a time per connection, a keep-alive pool per origin
  (LIFO: the connection used last is the one most likely still open). ``limit`` bounds
  the connections of a :class:`Pool` (0: unbounded); a request waiting for a free one
  waits without a bound of its own (not a connect timeout: nothing is connecting).
* ``connect_timeout`` bounds the socket connect (and the TLS handshake); ``read_timeout``
  bounds every wait for bytes from the server (the first byte of the answer and each
  later one), never the whole exchange, so a long stream that keeps talking is never cut.
* TLS for ``https``: the pool's context (default: the system trust store, hostname
  checks) and SNI. A certificate or host-name failure, or a handshake the server refused,
  is a :class:`TLSError` (never healed by asking again).
* Proxies (:class:`Via`, chosen by the caller): an ``http://`` target's request goes to
  the proxy in absolute form (the caller writes that request line and the
  ``Proxy-Authorization`` header); an ``https://`` target's goes through a ``CONNECT``
  tunnel opened here, with ``Proxy-Authorization`` on the ``CONNECT`` only, so the target
  never sees the proxy's credentials. A proxy's ``407`` to the ``CONNECT`` is a
  :class:`ProxyAuthError`, any other non-2xx a :class:`ProxyStatusError`.
* A pooled connection the server closed while it was idle (the request went out and the
  connection ended with not one byte back) is re-sent once on a new connection.
* Any answer that breaks HTTP/1.1 (a garbage status line, a bad chunk, a head over
  :data:`MAX_HEAD` bytes, a body over :data:`MAX_BODY`, a connection that ends mid-body)
  is a :class:`WireError`; the connection is closed, never pooled again. Bytes after the
  end of an answer (a body longer than its ``Content-Length``) close the connection too,
  but do not spoil the answer they follow.
* A ``gzip`` or ``deflate`` body is decoded (the caller sends ``Accept-Encoding: gzip``),
  any other coding is refused (:class:`UnsupportedEncodingError`).
* Errors never carry a request header (the ``Authorization`` header is a secret).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import ssl
import zlib
from collections import deque
from typing import Any

import httptools

from managedloop.providers.local._tls import default_context

__all__ = [
    "MAX_BODY",
    "MAX_HEAD",
    "HeadTooLargeError",
    "Pool",
    "ProxyAuthError",
    "ProxyStatusError",
    "Response",
    "TLSError",
    "UnsupportedEncodingError",
    "Via",
    "WireError",
]

MAX_HEAD = 64 * 1024  # bytes of status line and headers (aiohttp: 8 KiB per line)
MAX_BODY = 256 * 1024 * 1024  # bytes of one answer's body, decoded
_IDLE_FOR = 15.0  # seconds an idle pooled connection is trusted (aiohttp's keepalive_timeout)


class WireError(Exception):
    """An HTTP exchange failed. ``kind`` names how (a stable word for ``cause``)."""

    kind = "WireError"


class ConnectError(WireError):
    kind = "ConnectError"


class ConnectTimeoutError(WireError):
    kind = "ConnectTimeout"


class ReadTimeoutError(WireError):
    kind = "ReadTimeout"


class DisconnectedError(WireError):
    """The server closed the connection before the answer was whole."""

    kind = "ServerDisconnected"


class BadResponseError(WireError):
    """The bytes are not an HTTP/1.1 answer."""

    kind = "BadHttpResponse"


class HeadTooLargeError(BadResponseError):
    """The status line and headers are over :data:`MAX_HEAD` bytes (the same server will
    send the same head again)."""

    kind = "HeadTooLarge"


class TLSError(ConnectError):
    """The TLS handshake failed for a reason the network does not cause: the server's
    certificate is not trusted, names another host, or the server refused ours."""

    kind = "TLSError"


class ProxyAuthError(ConnectError):
    """The proxy answered ``CONNECT`` with ``407 Proxy Authentication Required``."""

    kind = "ProxyAuthenticationRequired"
    status = 407


class ProxyStatusError(ConnectError):
    """The proxy answered ``CONNECT`` with another non-2xx status (``status``)."""

    kind = "ProxyRefused"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class UnsupportedEncodingError(WireError):
    """A ``Content-Encoding`` this client neither asked for nor decodes."""

    kind = "UnsupportedContentEncoding"


# Header names as they arrived -> their lower-case str, shared by every answer: a server
# sends the same few names each time, and each answer's headers dict keeps its keys while
# its connection lives (10,000 of them at once in bench/local.py (c)). Bounded: a server
# inventing names cannot grow it.
_NAMES: dict[bytes, str] = {}
_NO_HEADERS: dict[str, str] = {}
# The read timer's callback reads no context variable: it runs in one shared empty
# context, not in a copy of the requester's (loop.call_at copies the current context by
# default: one more gc-tracked object per request in flight).
_TIMER_CONTEXT = contextvars.Context()  # an idle connection's (start() makes each answer its own)
_MAX_NAMES = 256


class _StopParsing(Exception):  # noqa: N818 - not an error: the answer already failed
    """Raised from a parser callback to stop llhttp (the exchange has failed already)."""


class _Conn(asyncio.Protocol):
    """One connection and the state of the exchange on it (one at a time).

    ``waiter`` is the future the requester awaits: resolved once the head is in (or, for
    a request that is not streamed, once the whole body is in), failed on any error.
    """

    __slots__ = (
        "body",
        "decoder",
        "done",
        "error",
        "head_bytes",
        "header_bytes",
        "headers",
        "idle_since",
        "keep_alive",
        "key",
        "last_io",
        "loop",
        "parser",
        "pool",
        "pooled",
        "read_timeout",
        "received",
        "reused",
        "size",
        "status",
        "stream",
        "timer",
        "transport",
        "until_eof",
        "waiter",
    )

    def __init__(self, pool: Pool, key: tuple[str, str, int], pooled: bool) -> None:
        self.pool = pool
        self.key = key
        self.pooled = pooled  # False: one request, then closed
        self.loop = pool.loop
        self.read_timeout = pool.read_timeout
        self.transport: asyncio.Transport | None = None
        self.parser: Any = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.error: WireError | None = None
        self.headers: dict[str, str] = _NO_HEADERS  # start() gives each answer its own
        self.body: list[bytes] = []
        self.decoder: Any = None
        self.status = 0
        self.size = 0
        self.head_bytes = self.header_bytes = 0
        self.last_io = 0.0
        self.idle_since = 0.0
        self.done = True  # no exchange in progress
        self.stream = False
        self.received = False
        self.reused = False
        self.until_eof = False
        self.keep_alive = False

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.pool.closed:
            transport.abort()  # the pool closed while this connect was in progress

    def data_received(self, data: bytes) -> None:
        if self.done:
            # Bytes with no exchange in progress (after a whole answer, or while idle):
            # the server does not speak one answer per request; never reuse this socket.
            self.close()
            return
        self.received = True
        self.last_io = self.loop.time()
        if self.status == 0:
            self.head_bytes += len(data)  # bounds a head line that never ends
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(BadResponseError("the server switched protocols (Upgrade)"))
        except httptools.HttpParserError as exc:
            self._unparseable(exc)
        if self.status == 0 and self.head_bytes > MAX_HEAD and not self.done:
            self._fail(HeadTooLargeError(f"the answer's head is over {MAX_HEAD} bytes"))

    def _unparseable(self, exc: Exception) -> None:
        if self.done:
            self.close()  # garbage after a whole answer: the answer stands
        else:
            self._fail(BadResponseError(f"the answer is not HTTP/1.1: {exc}"))

    def eof_received(self) -> bool:
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool._forget(self)
        if not self.done:
            if self.until_eof and self.error is None:
                self.on_message_complete()  # a body delimited by the end of the connection
            elif isinstance(exc, ssl.SSLError) and "CERTIFICATE" in str(exc).upper():
                # TLS 1.3: the server checks our certificate after the handshake is over
                # on our side, and its refusal is an alert on the first read
                self._fail(TLSError(f"the server refused the TLS session: {exc}"))
            else:
                why = f": {exc}" if exc is not None else ""
                self._fail(DisconnectedError(f"the server closed the connection{why}"))
        self.transport = None
        self.parser = None  # break the parser <-> protocol cycle

    # -- httptools callbacks -----------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        # Counted here too: a head that arrives whole in one read (with its body: so not
        # data_received's count) is parsed in one go.
        self.header_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if self.header_bytes > MAX_HEAD:
            self._fail(HeadTooLargeError(f"the answer's head is over {MAX_HEAD} bytes"))
            raise _StopParsing
        key = _NAMES.get(name)
        if key is None:
            key = name.decode("latin-1").lower()
            if len(_NAMES) < _MAX_NAMES:
                _NAMES[name] = key
        text = value.decode("latin-1")
        old = self.headers.get(key)
        self.headers[key] = text if old is None else f"{old}, {text}"

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            self.headers = {}  # an interim answer (103 Early Hints...); the real one follows
            return
        self.status = status
        headers = self.headers
        coding = headers.get("content-encoding", "identity").strip().lower()
        if coding in ("gzip", "x-gzip", "deflate"):
            self.decoder = zlib.decompressobj(47)  # 32 + 15: a gzip or zlib header
        elif coding not in ("identity", ""):
            self._fail(UnsupportedEncodingError(f"the server sent Content-Encoding {coding!r}"))
            return
        self.until_eof = (
            "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "").lower()
            and status not in (204, 304)
        )
        if self.stream:
            self._resolve()

    def on_body(self, body: bytes) -> None:
        if self.error is not None:
            return
        if self.decoder is not None:
            try:
                body = self.decoder.decompress(body, MAX_BODY + 1 - self.size)
            except zlib.error as exc:
                self._fail(BadResponseError(f"the answer's compressed body is damaged: {exc}"))
                return
        self.size += len(body)
        if self.size > MAX_BODY:
            self._fail(BadResponseError(f"the answer's body is over {MAX_BODY} bytes"))
            return
        if body:
            self.body.append(body)
            if self.stream:
                self._resolve()  # wake a reader waiting for the next chunk

    def on_message_begin(self) -> None:
        if self.done:
            self.keep_alive = False  # a second answer to one request: never reuse

    def on_message_complete(self) -> None:
        if self.status == 0:
            return  # the end of an interim (1xx) answer
        if self.done or self.error is not None:
            return
        parser = self.parser
        # Read here: llhttp forgets it once the message is over.
        self.keep_alive = parser is not None and parser.should_keep_alive() and not self.until_eof
        self.done = True
        self._stop_timer()
        self._resolve()

    # -- the exchange -------------------------------------------------------------------

    def start(self, head: bytes, body: bytes, stream: bool) -> asyncio.Future[None]:
        """Send one request; the future resolves as described in the class docstring."""
        assert self.transport is not None
        assert self.done
        self.done = False
        self.stream = stream
        self.status = 0
        self.headers = {}
        self.body = []
        self.decoder = None
        self.size = self.head_bytes = self.header_bytes = 0
        self.received = self.until_eof = self.keep_alive = False
        self.error = None
        self.last_io = self.loop.time()
        self.waiter = waiter = self.loop.create_future()
        self.timer = self.loop.call_at(
            self.last_io + self.read_timeout, self._on_timer, context=_TIMER_CONTEXT
        )
        # Two pieces, not one joined copy: the caller keeps the body (a redirect re-sends
        # it), and a second copy of every body in flight showed in the memory per session.
        self.transport.writelines((head, body))
        return waiter

    def wait(self) -> asyncio.Future[None]:
        """A future resolved when more body arrives or the answer ends (streamed reads)."""
        self.waiter = waiter = self.loop.create_future()
        return waiter

    def _resolve(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _fail(self, error: WireError) -> None:
        if self.error is None:
            self.error = error
        self.done = True
        self._stop_timer()
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_exception(error)
        self.close()

    def _on_timer(self) -> None:
        # One timer per exchange, pushed forward lazily: data_received only stamps
        # last_io, and the timer re-arms itself for the rest of the window when it fires.
        self.timer = None
        if self.done:
            return
        due = self.last_io + self.read_timeout
        if self.loop.time() < due:
            self.timer = self.loop.call_at(due, self._on_timer, context=_TIMER_CONTEXT)
            return
        self._fail(ReadTimeoutError(f"no bytes from the server for {self.read_timeout:g} s"))

    def _stop_timer(self) -> None:
        timer, self.timer = self.timer, None
        if timer is not None:
            timer.cancel()

    def reusable(self) -> bool:
        return (
            self.error is None
            and self.done
            and self.transport is not None
            and not self.transport.is_closing()
            and self.keep_alive
        )

    def close(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.abort()  # connection_lost follows, which forgets it in the pool


class Response:
    """One answer: ``status``, ``headers`` (lower-case names), then the body by
    :meth:`read` or :meth:`next_chunk`. :meth:`release` hands the connection back."""

    __slots__ = ("_conn", "_pending", "headers", "status")

    def __init__(self, conn: _Conn) -> None:
        self._conn: _Conn | None = conn
        self.status = conn.status
        self.headers = conn.headers
        self._pending = bytearray()  # streamed body not yet handed out as lines

    async def read(self) -> bytes:
        """The whole body."""
        conn = self._conn
        assert conn is not None
        while not conn.done:
            await conn.wait()
        if conn.error is not None:
            raise conn.error
        body, conn.body = conn.body, []
        return b"".join([bytes(self._pending), *body]) if self._pending else b"".join(body)

    async def next_chunk(self) -> bytes:
        """The next piece of the body as it arrived (decoded), ``b""`` after its end."""
        conn = self._conn
        assert conn is not None
        if self._pending:
            piece = bytes(self._pending)
            self._pending.clear()
            return piece
        while True:
            body = conn.body
            if body:
                conn.body = []
                return body[0] if len(body) == 1 else b"".join(body)
            if conn.error is not None:
                raise conn.error
            if conn.done:
                return b""
            await conn.wait()

    def release(self) -> None:
        """Done with this answer: a whole one's connection goes back to the pool, any
        other is closed."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.pool._release(conn)


class Via:
    """A proxy to send a request through: where it listens, and the
    ``Proxy-Authorization`` header line to send a ``CONNECT`` (``b""``: none). The line
    is a secret: this object has no repr of it."""

    __slots__ = ("authorization", "host", "port")

    def __init__(self, host: str, port: int, authorization: bytes = b"") -> None:
        self.host = host
        self.port = port
        self.authorization = authorization

    def __repr__(self) -> str:
        return f"Via({self.host!r}, {self.port})"


class _TunnelReply(asyncio.Protocol):
    """Reads a proxy's answer to ``CONNECT``: ``status`` resolves to its status code."""

    __slots__ = ("buffer", "status")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.buffer = bytearray()
        self.status: asyncio.Future[int] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        if self.status.done():
            return
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                self.status.set_exception(
                    HeadTooLargeError(f"the proxy's answer to CONNECT is over {MAX_HEAD} bytes")
                )
            return
        line = bytes(self.buffer[: self.buffer.find(b"\r\n")]).split(b" ", 2)
        if len(line) < 2 or not line[0].startswith(b"HTTP/1.") or not line[1].isdigit():
            self.status.set_exception(BadResponseError("the proxy's answer to CONNECT is not HTTP"))
            return
        status = int(line[1])
        if 200 <= status < 300 and end + 4 < len(self.buffer):
            # bytes after the reply and before our TLS hello: not a tunnel
            self.status.set_exception(BadResponseError("the proxy sent bytes into the tunnel"))
            return
        self.status.set_result(status)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.status.done():
            self.status.set_exception(
                DisconnectedError("the proxy closed the connection before answering CONNECT")
            )


class Pool:
    """Keep-alive HTTP/1.1 connections for one event loop (see the module docstring)."""

    __slots__ = (
        "_all",
        "_closed",
        "_count",
        "_idle",
        "_sweeper",
        "_waiters",
        "connect_timeout",
        "limit",
        "loop",
        "read_timeout",
        "ssl_context",
    )

    def __init__(
        self,
        *,
        read_timeout: float,
        connect_timeout: float,
        limit: int = 0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.limit = limit
        self.ssl_context = ssl_context
        self._idle: dict[tuple[Any, ...], dict[_Conn, None]] = {}
        self._all: set[_Conn] = set()
        self._count = 0  # open and connecting connections
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    async def request(
        self,
        key: tuple[str, str, int],
        head: bytes,
        body: bytes = b"",
        *,
        stream: bool = False,
        fresh: bool = False,
        via: Via | None = None,
    ) -> Response:
        """Send ``head`` (an HTTP/1.1 request's line and headers, through the blank line)
        and ``body`` to ``key`` = (scheme, host, port, ...), through the proxy ``via``.

        Not ``stream``: returns once the whole answer is in. ``stream``: once its head is.
        ``fresh``: on a new connection, closed after the answer. ``key`` may carry more
        than the origin (a proxied route's key names its proxy too): connections are
        pooled per key.
        """
        conn = None if fresh else self._take_idle(key)
        if conn is None:
            conn = await self._connect(key, pooled=not fresh, via=via)
        try:
            await conn.start(head, body, stream)
        except BaseException as exc:
            conn.close()  # failed or cancelled mid-exchange: never reused
            if not isinstance(exc, DisconnectedError) or not conn.reused or conn.received:
                raise
            # The server closed this pooled connection while it sat idle: the request
            # never reached it (not one byte came back). Once more on a new connection.
            # (No helper coroutine for the two tries: each suspended frame is one more
            # object for the garbage collector to walk per request in flight.)
            conn = await self._connect(key, pooled=True, via=via)
            try:
                await conn.start(head, body, stream)
            except BaseException:
                conn.close()
                raise
        return Response(conn)

    def _take_idle(self, key: tuple[Any, ...]) -> _Conn | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        now = self.loop.time()
        while idle:
            conn, _ = idle.popitem()  # the most recently used
            if now - conn.idle_since < _IDLE_FOR and conn.reusable():
                conn.reused = True
                return conn
            conn.close()
        return None

    async def _connect(
        self, key: tuple[Any, ...], *, pooled: bool, via: Via | None = None
    ) -> _Conn:
        if self._closed:
            raise WireError("the connection pool is closed")
        while self.limit and self._count >= self.limit:
            if not self._close_an_idle_one():
                waiter = self.loop.create_future()
                self._waiters.append(waiter)
                try:
                    await waiter
                except BaseException:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                    elif waiter.done() and not waiter.cancelled():
                        self._wake()  # we were handed a turn we cannot use: pass it on
                    raise
                if pooled and (conn := self._take_idle(key)) is not None:
                    return conn
        self._count += 1
        conn = _Conn(self, key, pooled)
        self._all.add(conn)
        scheme, host, port = key[:3]
        tls = scheme == "https"
        context = (self.ssl_context or default_context()) if tls else None
        where = f"{host}:{port}" if via is None else f"{host}:{port} through the proxy"
        try:
            async with asyncio.timeout(self.connect_timeout):
                if via is None:
                    await self.loop.create_connection(
                        lambda: conn, host, port, ssl=context, server_hostname=host if tls else None
                    )
                elif not tls:  # a forwarding proxy: the caller wrote an absolute-form request
                    await self.loop.create_connection(lambda: conn, via.host, via.port)
                else:
                    assert context is not None
                    await self._tunnel(conn, via, host, port, context)
        except TimeoutError:
            self._forget(conn)
            conn.close()
            raise ConnectTimeoutError(
                f"connecting to {where} took over {self.connect_timeout:g} s"
            ) from None
        except WireError:
            self._forget(conn)
            conn.close()
            raise
        except ssl.SSLError as exc:  # incl. SSLCertVerificationError (host name too)
            self._forget(conn)
            conn.close()
            raise TLSError(f"the TLS handshake with {where} failed: {exc}") from None
        except OSError as exc:
            self._forget(conn)
            conn.close()
            raise ConnectError(f"cannot connect to {where}: {exc}") from None
        except BaseException:
            self._forget(conn)
            conn.close()
            raise
        if self.closed:  # closed while connecting (connection_made closed the socket)
            self._forget(conn)
            raise WireError("the connection pool is closed")
        return conn

    async def _tunnel(
        self, conn: _Conn, via: Via, host: str, port: int, context: ssl.SSLContext
    ) -> None:
        """Open a ``CONNECT`` tunnel through ``via`` to ``host:port`` and TLS inside it;
        ``conn`` then speaks over it."""
        reply = _TunnelReply(self.loop)
        raw, _ = await self.loop.create_connection(lambda: reply, via.host, via.port)
        try:
            name = host if host.isascii() else host.encode("idna").decode("ascii")
            authority = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
            raw.write(
                b"".join(
                    (
                        f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n".encode(),
                        via.authorization,
                        b"\r\n",
                    )
                )
            )
            status = await reply.status
            if status == 407:
                raise ProxyAuthError(
                    "the proxy answered CONNECT with 407 Proxy Authentication Required"
                )
            if not 200 <= status < 300:
                raise ProxyStatusError(f"the proxy answered CONNECT with {status}", status)
            transport = await self.loop.start_tls(raw, conn, context, server_hostname=host)
        except BaseException:
            if not reply.status.done():
                reply.status.cancel()  # nobody will read what connection_lost would set
            raw.abort()
            raise
        if transport is None:  # the loop closed the transport under us
            raise DisconnectedError("the proxy closed the tunnel during the TLS handshake")
        conn.connection_made(transport)

    def _close_an_idle_one(self) -> bool:
        """At the limit with idle connections to another origin: close one to make room."""
        for idle in self._idle.values():
            if idle:
                conn, _ = idle.popitem()
                self._forget(conn)
                conn.close()
                return True
        return False

    def _release(self, conn: _Conn) -> None:
        if conn.pooled and conn in self._all and conn.reusable() and not self._closed:
            conn.idle_since = self.loop.time()
            conn.headers = _NO_HEADERS  # the Response keeps its own; an idle one holds none
            self._idle.setdefault(conn.key, {})[conn] = None
            if self._sweeper is None:
                self._sweeper = self.loop.call_later(_IDLE_FOR, self._sweep)
            self._wake()
        else:
            conn.close()
            self._forget(conn)

    def _forget(self, conn: _Conn) -> None:
        if conn in self._all:
            self._all.discard(conn)
            self._count -= 1
            self._wake()
        idle = self._idle.get(conn.key)
        if idle:
            idle.pop(conn, None)

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _sweep(self) -> None:
        """Close the connections idle for over ``_IDLE_FOR`` (one timer per pool, not one
        per connection: after a burst of 10,000 sessions their sockets do not linger)."""
        self._sweeper = None
        deadline = self.loop.time() - _IDLE_FOR
        for idle in self._idle.values():
            # insertion order is release order, so the oldest are first
            stale = list(itertools.takewhile(lambda c: c.idle_since <= deadline, idle))
            for conn in stale:
                del idle[conn]
                conn.close()
        if any(self._idle.values()):
            self._sweeper = self.loop.call_later(_IDLE_FOR, self._sweep)

    async def aclose(self) -> None:
        """Close every connection (an answer being read fails as disconnected)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conn in list(self._all):
            conn.close()
        self._idle.clear()
        # Let connection_lost run (a TLS transport takes a few loop passes), so no socket
        # is left open when the caller's event loop ends. A connect still in progress
        # closes its own socket when it completes (connection_made).
        for _ in range(8):
            if not any(conn.transport is not None for conn in self._all):
                break
            await asyncio.sleep(0)
