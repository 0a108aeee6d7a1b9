"""botocore plumbing: client construction, the thread-to-loop event pipe, error mapping.

botocore does the wire: SigV4 signing, the AWS credential chain, endpoint resolution and
event-stream decoding. It is synchronous, so each streamed call runs in a worker thread
that pushes decoded events to the event loop through :class:`_Pipe`; the async side reads
them with an *idle* watchdog (silence between events, not the whole call) and, when it
stops early (cancellation, a ``run`` timeout, the watchdog), shuts the socket down so the
blocked read in the worker returns at once and the HTTP stream is really torn down.

botocore behaviours relied on (``agentcore-wire.md`` §2.4-2.5, checked against 1.44.x):

* ``response["stream"]`` is a ``botocore.eventstream.EventStream`` yielding one
  single-key dict per event as its bytes arrive (chunked transfer is read incrementally);
* an exception frame raises ``EventStreamError`` (a ``ClientError`` whose code is the
  member name, e.g. ``runtimeClientError``) *during iteration*; a bad CRC raises
  ``ChecksumMismatch``; a gap longer than ``read_timeout`` raises urllib3's raw
  ``ReadTimeoutError``; a stream cut short ends *silently* (callers check ``messageStop``);
* ``retries={"total_max_attempts": 1}`` means exactly one attempt (``max_attempts: 1``
  would mean two): a stateful invoke is never replayed by botocore, only by our own loop,
  which can tell the caller (``RESTART``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import queue
import re
import select
import socket
import threading
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from managedloop import telemetry
from managedloop.config import MISSING, Secret, resolve, reveal
from managedloop.errors import (
    APIStatusError,
    AuthenticationError,
    ConfigError,
    HostStreamError,
    InvalidOptionsError,
    MalformedResponseError,
    ManagedLoopError,
    TransportError,
)

__all__ = ["Clients", "map_error", "stream_call"]

logger = logging.getLogger("managedloop.agentcore")

SERVICE = "bedrock-agentcore"  # the signing name of both planes
CONNECT_TIMEOUT = 10.0  # seconds; a TCP+TLS handshake to a regional endpoint takes well under 1 s
IDLE_BACKSTOP = 5.0  # seconds added to botocore's read_timeout: our own watchdog fires first,
# botocore's only frees a worker thread stuck before the response headers arrived.
CONTROL_READ_TIMEOUT = 600.0  # seconds; reference default for control-plane calls outside a budget
_INSTALL_HINT = "Bedrock AgentCore needs botocore: pip install 'managedloop[agentcore]'"


def _botocore() -> Any:
    try:
        import botocore.session
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ConfigError(_INSTALL_HINT, code="missing_dependency", package="botocore") from exc
    _install_redaction()
    return botocore


# botocore's own DEBUG logging prints the canonical request (``botocore.auth``) and the
# prepared request's headers (``botocore.endpoint``), both carrying the session token in
# clear. Secrets must not reach a log line, whoever writes it, so those two loggers get a
# filter that masks the token (and a bearer-style Authorization signature is harmless: it
# is per request). A filter runs only for records that pass the level check: free when
# DEBUG is off.
_TOKEN_RE = re.compile(r"(x-amz-security-token[\"']?\s*[:=]\s*b?[\"']?)[^\s\"',}]+", re.IGNORECASE)
_REDACTED_LOGGERS = ("botocore.auth", "botocore.endpoint", "botocore.parsers")


class _RedactTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "ecurity-token" in message or "ECURITY-TOKEN" in message:
            record.msg = _TOKEN_RE.sub(r"\1<redacted>", message)
            record.args = None
        return True


_redaction = _RedactTokens()


def _install_redaction() -> None:
    for name in _REDACTED_LOGGERS:
        target = logging.getLogger(name)
        if _redaction not in target.filters:
            target.addFilter(_redaction)


_shared_lock = threading.Lock()
_shared_session: Any = None


def _default_session() -> Any:
    """One botocore session per process: it caches the loaded service models (~100 ms)."""
    global _shared_session
    with _shared_lock:
        if _shared_session is None:
            _shared_session = _botocore().session.get_session()
        return _shared_session


class Clients:
    """Builds and owns the data-plane and control-plane botocore clients.

    Credentials: explicit keywords, then :func:`managedloop.configure`, then the
    ``AWS_*`` environment variables (via :func:`managedloop.config.resolve`); when those
    give no key pair, botocore's own credential chain (profiles, SSO, web identity,
    container, IMDS...). A ``session=`` (boto3 or botocore) supplies its own credentials.
    Secrets are held as :class:`Secret` and revealed only when a client is built.
    """

    def __init__(
        self,
        *,
        client: Any = None,
        control_client: Any = None,
        session: Any = None,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        control_endpoint_url: str | None = None,
        aws_access_key_id: str | Any | None = MISSING,
        aws_secret_access_key: str | Secret | Any | None = MISSING,
        aws_session_token: str | Secret | Any | None = MISSING,
        config: Any = None,
        read_timeout: float,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self._client = client
        self._control = control_client
        self._owned: list[Any] = []
        self._session = session
        self._lock = threading.Lock()
        self.endpoint_url = endpoint_url
        self.control_endpoint_url = control_endpoint_url or endpoint_url
        self._config = config
        self._read_timeout = read_timeout
        self._options = dict(options or {})
        # A session or a client carries its own credentials; otherwise configure()/env first.
        from_config = session is None and client is None

        def pick(name: str, value: Any) -> Any:
            if value is not MISSING:
                return resolve(name, value)
            return resolve(name) if from_config else None

        self._key_id: str | None = pick("aws_access_key_id", aws_access_key_id)
        self._secret: Secret | None = pick("aws_secret_access_key", aws_secret_access_key)
        self._token: Secret | None = pick("aws_session_token", aws_session_token)
        if region_name is None and session is not None:
            region_name = getattr(session, "region_name", None) or _get_config(session)
        if region_name is None and client is not None:
            region_name = client.meta.region_name
        self.region_name: str = region_name or resolve("aws_region")

    def __repr__(self) -> str:
        return f"Clients(region_name={self.region_name!r}, endpoint_url={self.endpoint_url!r})"

    def _credential_kwargs(self) -> dict[str, Any]:
        if self._key_id is not None and self._secret is not None:
            out = {
                "aws_access_key_id": self._key_id,
                "aws_secret_access_key": reveal(self._secret),
            }
            if self._token is not None:
                out["aws_session_token"] = reveal(self._token)
            return out
        if self._session is None and self._client is not None:
            # A caller-built data client: reuse its credentials for the control plane.
            creds = getattr(getattr(self._client, "_request_signer", None), "_credentials", None)
            if creds is not None:
                frozen = creds.get_frozen_credentials()
                out = {
                    "aws_access_key_id": frozen.access_key,
                    "aws_secret_access_key": frozen.secret_key,
                }
                if frozen.token:
                    out["aws_session_token"] = frozen.token
                return out
        return {}

    def build(self, service: str, *, read_timeout: float, attempts: int = 1) -> Any:
        """A new client of ``service`` (the caller closes it, or :meth:`data` owns it)."""
        _botocore()
        from botocore.config import Config

        cfg = Config(
            read_timeout=read_timeout,
            connect_timeout=min(CONNECT_TIMEOUT, read_timeout),
            retries={"mode": "standard", "total_max_attempts": attempts},
            tcp_keepalive=True,
            user_agent_extra="managedloop",
        )
        if self._config is not None:
            cfg = self._config.merge(cfg)
        endpoint = self.control_endpoint_url if service.endswith("-control") else self.endpoint_url
        if endpoint is None and self._client is not None and service.endswith("-control"):
            url = self._client.meta.endpoint_url
            if "amazonaws.com" not in url:
                endpoint = url  # a custom endpoint (an emulator) serves both planes
        kwargs: dict[str, Any] = {
            "region_name": self.region_name,
            "config": cfg,
            **self._credential_kwargs(),
            **self._options,
        }
        if endpoint is not None:
            kwargs["endpoint_url"] = endpoint
        session = self._session
        with self._lock:  # botocore sessions are not thread-safe while creating clients
            if session is None:
                return _default_session().create_client(service, **kwargs)
            make = getattr(session, "create_client", None) or session.client
            return make(service, **kwargs)

    def data(self) -> Any:
        """The data-plane client (``bedrock-agentcore``), built once; no botocore retries."""
        if self._client is None:
            self._client = self.build(
                "bedrock-agentcore", read_timeout=self._read_timeout + IDLE_BACKSTOP
            )
            self._owned.append(self._client)
        return self._client

    def control(self, *, read_timeout: float | None = None) -> tuple[Any, bool]:
        """A control-plane client whose per-attempt read timeout is ``read_timeout``.

        Returns ``(client, owned)``: an owned client is per-call and must be closed.
        A caller's ``control_client=`` is used as is (its own timeouts apply).
        """
        if self._control is not None:
            return self._control, False
        return (
            self.build(
                "bedrock-agentcore-control",
                read_timeout=read_timeout if read_timeout is not None else CONTROL_READ_TIMEOUT,
            ),
            True,
        )

    def close(self) -> None:
        for client in self._owned:
            client.close()
            if client is self._client:
                self._client = None
        self._owned.clear()


def _get_config(session: Any) -> str | None:
    getter = getattr(session, "get_config_variable", None)
    return getter("region") if getter is not None else None


# ---------------------------------------------------------------------------- errors


def map_error(
    exc: BaseException, *, operation: str, stream_code: str = "harness_stream_error"
) -> ManagedLoopError:
    """Translate a botocore/urllib3 failure into the managedloop tree (never leaks keys)."""
    if isinstance(exc, ManagedLoopError):
        return exc
    from botocore import exceptions as be
    from botocore.eventstream import ParserError as FrameError
    from botocore.parsers import ResponseParserError

    try:
        from urllib3.exceptions import ProtocolError, ReadTimeoutError
    except ImportError:  # pragma: no cover
        ProtocolError = ReadTimeoutError = OSError  # type: ignore[misc,assignment] # noqa: N806

    if isinstance(exc, be.EventStreamError):
        err = exc.response.get("Error", {})
        kind, message = err.get("Code"), err.get("Message", "")
        error = HostStreamError(
            f"{operation}: the host reported {kind}: {message}",
            code=stream_code,
            type=kind,
            operation=operation,
        )
        error.context["message"] = message  # the host's own text (``message`` is positional)
        return error
    if isinstance(exc, be.ClientError):
        meta = exc.response.get("ResponseMetadata", {})
        err = exc.response.get("Error", {})
        status = meta.get("HTTPStatusCode")
        cls = AuthenticationError if status in (401, 403) else APIStatusError
        return cls(
            f"{operation} failed with HTTP {status} {err.get('Code')}: {err.get('Message', '')}",
            status=status,
            error_code=err.get("Code"),
            body={"message": err.get("Message", "")},
            operation=operation,
        )
    if isinstance(exc, FrameError | ResponseParserError):
        return MalformedResponseError(
            f"{operation}: undecodable event-stream frame ({type(exc).__name__}: {exc})",
            code="bad_frame",
            operation=operation,
        )
    if isinstance(exc, ReadTimeoutError | be.ReadTimeoutError):
        return TransportError(
            f"{operation}: no bytes within the read timeout",
            code="stream_idle_timeout",
            operation=operation,
        )
    if isinstance(exc, be.NoCredentialsError | be.PartialCredentialsError):
        return AuthenticationError(
            f"{operation}: no AWS credentials found (explicit, managedloop.configure, "
            "AWS_* env, or botocore's chain)",
            operation=operation,
        )
    if isinstance(exc, be.NoRegionError):
        return ConfigError(f"{operation}: no AWS region configured", key="aws_region")
    if isinstance(exc, be.ParamValidationError):
        return InvalidOptionsError(f"{operation}: {exc}", operation=operation)
    if isinstance(exc, ProtocolError | be.HTTPClientError | OSError):
        return TransportError(
            f"{operation}: connection failed ({type(exc).__name__}: {exc})",
            code="transport_error",
            operation=operation,
        )
    return TransportError(
        f"{operation}: unexpected failure ({type(exc).__name__}: {exc})",
        code="transport_error",
        operation=operation,
    )


def retryable(exc: ManagedLoopError) -> bool:
    """Transport failures, undecodable frames, throttling and 5xx (but not 424)."""
    if isinstance(exc, TransportError | MalformedResponseError):
        return True
    if type(exc) is APIStatusError:
        status = exc.status
        return status is not None and (status == 429 or (status >= 500))
    return False


# ---------------------------------------------------------------------------- streaming

_END = object()


class _Pipe:
    """Worker thread → event loop hand-off. Streamed events are queued without a wake-up and
    flushed (one wake-up, only if the loop is waiting) when the worker is about to wait on
    the network (:class:`_Batching`) or the call ends; if the idle timer fires with events
    queued, they are returned (the stream was not idle)."""

    __slots__ = ("_items", "_lock", "_loop", "_waiter")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._items: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: Any, *, wake: bool = True) -> None:
        """Queue ``item``; with ``wake=False`` the loop is not woken yet (see :meth:`flush`)."""
        with self._lock:
            self._items.append(item)
            if not wake:
                return
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            # RuntimeError: the loop is gone (the caller was torn down); nothing to wake.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(_wake, waiter)

    def flush(self) -> None:
        """Wake the loop if it is waiting and items are queued."""
        with self._lock:
            if not self._items:
                return
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(_wake, waiter)

    async def get(self, idle_timeout: float) -> Any:
        """The next item; ``TimeoutError`` after ``idle_timeout`` seconds with none."""
        while True:
            with self._lock:
                if self._items:
                    return self._items.popleft()
                waiter = self._loop.create_future()
                self._waiter = waiter
            # A timer handle rather than a cancel scope per wait: this is the hot path.
            timer = self._loop.call_later(idle_timeout, _expire, waiter)
            try:
                await waiter
            except TimeoutError:
                with self._lock:
                    if self._waiter is waiter:
                        self._waiter = None
                    if self._items:  # queued but not flushed: the stream was not idle
                        return self._items.popleft()
                raise
            finally:
                timer.cancel()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _Workers:
    """A tiny pool of reusable *daemon* threads for blocking botocore calls.

    Daemon, unlike ``concurrent.futures`` workers, so a call stuck before its response
    headers (bounded only by botocore's read timeout) never holds up interpreter exit;
    reused, because starting a thread per turn is measurable on a loopback turn.
    """

    IDLE_EXIT = 60.0  # seconds an idle worker waits for a job before exiting

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            reuse = self._idle > 0
            if reuse:
                self._idle -= 1  # reserve one waiting worker for this job
        if reuse:
            self._jobs.put(job)
        else:
            threading.Thread(
                target=self._run, args=(job,), name="managedloop-agentcore", daemon=True
            ).start()

    def _run(self, job: Callable[[], None]) -> None:
        while True:
            job()
            with self._lock:
                self._idle += 1
            while True:
                try:
                    job = self._jobs.get(timeout=self.IDLE_EXIT)
                    break
                except queue.Empty:
                    with self._lock:
                        if self._idle > 0 and self._jobs.empty():
                            self._idle -= 1
                            return


_workers = _Workers()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Call:
    """State shared between the worker thread and the async reader."""

    __slots__ = ("cancelled", "lock", "response", "stream")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cancelled = False
        self.stream: Any = None
        self.response: Any = None


def abort_stream(stream: Any) -> None:
    """Tear a botocore EventStream down so a read blocked in another thread returns now.

    ``close()`` alone does not wake a thread blocked in ``recv``; shutting the socket down
    does. Reaches urllib3's public ``HTTPResponse.connection.sock``.
    """
    raw = getattr(stream, "_raw_stream", None)
    conn = getattr(raw, "connection", None) or getattr(raw, "_connection", None)
    sock = getattr(conn, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    try:
        stream.close()
    except Exception:  # a half-closed urllib3 response may raise on close; it is gone either way
        logger.debug("closing an aborted event stream raised", exc_info=True)


class _Batching:
    """Wraps the urllib3 response botocore's ``EventStream`` reads: before each read of the
    next chunk that would *wait* on the network, the events decoded so far are handed to the
    loop in one wake-up. A burst of frames already received costs one cross-thread wake-up
    instead of one per event, and no event waits for the network behind a read."""

    __slots__ = ("_pipe", "_raw", "_sock")

    def __init__(self, raw: Any, pipe: _Pipe) -> None:
        self._raw = raw
        self._pipe = pipe
        conn = getattr(raw, "connection", None) or getattr(raw, "_connection", None)
        self._sock = getattr(conn, "sock", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def _ready(self) -> bool:
        """Bytes of the next chunk are already here (reading them will not wait)."""
        sock = self._sock
        if sock is None:
            return False
        pending = getattr(sock, "pending", None)  # TLS: decrypted bytes held by the SSL object
        if pending is not None and pending():
            return True
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(readable)

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        chunks = self._raw.stream(*args, **kwargs)
        while True:
            if not self._ready():
                self._pipe.flush()
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            yield chunk


def _worker(call: Callable[[], Any], pipe: _Pipe, state: _Call) -> None:
    stream: Any = None
    try:
        response = call()
        stream = response["stream"]
        with state.lock:
            state.response = response
            state.stream = stream
            cancelled = state.cancelled
        if cancelled:
            return
        stream._raw_stream = _Batching(stream._raw_stream, pipe)
        for event in stream:
            pipe.put(event, wake=False)  # woken by _Batching before the next blocking read
        stream = None  # read to the end: urllib3 has released the connection to its pool
        pipe.put(_END)
    except BaseException as exc:  # handed to the reader, which maps and raises it
        pipe.put(exc)
    finally:
        if stream is not None:  # ended early (exception frame, bad CRC, abort): drop the socket
            abort_stream(stream)


async def stream_call(
    call: Callable[[], Any],
    *,
    operation: str,
    idle_timeout: float,
    stream_code: str = "harness_stream_error",
    span_meta: dict[str, Any] | None = None,
    inflight: set[Callable[[], None]] | None = None,
) -> AsyncGenerator[dict[str, Any], None]:
    """Run a blocking streamed botocore call in a thread; yield its events live.

    Raises the mapped error of the call; ``TransportError(code="stream_idle_timeout")``
    when nothing arrives for ``idle_timeout`` seconds. Stopping early aborts the stream;
    so does calling the abort function registered in ``inflight`` while it runs (a
    connection's ``aclose`` uses it when the consumer was torn down between events).
    """
    pipe = _Pipe()
    state = _Call()

    def abort() -> None:
        with state.lock:
            state.cancelled = True
            stream = state.stream
        if stream is not None:
            abort_stream(stream)

    finished = False
    with telemetry.span("agent_core.request", span_meta or {"operation": operation}) as extra:
        _workers.submit(lambda: _worker(call, pipe, state))
        if inflight is not None:
            inflight.add(abort)
        try:
            while True:
                try:
                    item = await pipe.get(idle_timeout)
                except TimeoutError:
                    raise TransportError(
                        f"{operation}: no event for {idle_timeout}s (idle_timeout)",
                        code="stream_idle_timeout",
                        operation=operation,
                        idle_timeout=idle_timeout,
                    ) from None
                if item is _END:
                    finished = True
                    extra["status"] = 200
                    return
                if isinstance(item, BaseException):
                    finished = True
                    mapped = map_error(item, operation=operation, stream_code=stream_code)
                    extra["status"] = mapped.context.get("status", 200 if state.stream else None)
                    raise mapped from (item if isinstance(item, Exception) else None)
                yield item
        finally:
            if inflight is not None:
                inflight.discard(abort)
            if not finished:
                abort()
