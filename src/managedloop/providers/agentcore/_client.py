"""botocore plumbing: client construction, the data plane's async transport, error mapping.

botocore does the AWS work: the service model and request serialization, endpoint
resolution, the AWS credential chain, SigV4 signing, event-stream decoding and error
parsing. It is synchronous, so the control plane (provisioning, ``GetHarness``) runs its
calls in a worker thread. The data plane (``InvokeHarness``, ``InvokeAgentRuntimeCommand``)
does not: botocore's own client pipeline prepares and signs each request on the event loop
(CPU only; its ``before-send`` hook hands us the signed request instead of sending it), and
only the HTTP I/O is aiohttp's (already a core dependency): the response bytes are fed, as
they arrive, to botocore's ``EventStreamBuffer`` and event parser. No worker thread, no
thread switch per turn; cancelling the reader closes the connection itself.

botocore behaviours relied on (``agentcore-wire.md`` §2.4-2.5, checked against 1.44.x):

* a ``before-send`` handler that returns a response replaces the send (documented event
  semantics); what it receives is the final, signed ``AWSPreparedRequest``;
* an exception frame is a message whose ``status_code`` is not 200: botocore's
  ``EventStreamError`` (a ``ClientError`` whose code is the member name, e.g.
  ``runtimeClientError``); a bad CRC raises ``ChecksumMismatch``; a stream cut short ends
  *silently* (callers check ``messageStop``);
* ``retries={"total_max_attempts": 1}`` means exactly one attempt (``max_attempts: 1``
  would mean two), and every client built here has it. A data-plane call is never retried
  by botocore (the stand-in answer is a 200), only by our own loop, which can tell the
  caller (``RESTART``); provisioning retries its idempotent control-plane reads itself,
  within its budget (``_provision._call``).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import re
import ssl
import threading
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn

import aiohttp
import anyio
import yarl

from managedloop import _retry, telemetry
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

__all__ = ["Clients", "EventDecoder", "map_error", "stream_call"]

logger = logging.getLogger("managedloop.agentcore")

SERVICE = "bedrock-agentcore"  # the signing name of both planes
CONNECT_TIMEOUT = 10.0  # seconds; a TCP+TLS handshake to a regional endpoint takes well under 1 s
CONTROL_READ_TIMEOUT = 600.0  # seconds; reference default for control-plane calls outside a budget
_INSTALL_HINT = "Bedrock AgentCore needs botocore: pip install 'managedloop[agentcore]'"


def _botocore() -> Any:
    try:
        import botocore.session
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ConfigError(_INSTALL_HINT, code="missing_dependency", package="botocore") from exc
    _install_redaction()
    return botocore


# Credentials must never reach a log line, an error's text or its context, whoever wrote
# the text: botocore's DEBUG logging prints the canonical request (``botocore.auth``) and
# the prepared request's headers (``botocore.endpoint``), and AWS answers a signature
# mismatch with a 403 whose message *echoes the canonical request*, signed headers and
# all, so ``x-amz-security-token:<token>`` arrives inside the error body. :func:`redact`
# masks, in any text: the session token (header, query, JSON or repr form), SigV4
# signatures (``Signature=``/``X-Amz-Signature=``), the credential scope of a presigned
# URL (``X-Amz-Credential=``), secret-key/token assignments, and the literal values of
# the credentials this client holds (whatever form the text has).
_REDACTED = "<redacted>"
_VALUE = r"[^\s\"',}&\\]+"
_SECRET_PATTERNS = (
    re.compile(r"(x-amz-security-token[\"']?\s*[:=]\s*b?[\"']?)" + _VALUE, re.IGNORECASE),
    re.compile(r"(x-amz-signature[\"']?\s*[:=]\s*[\"']?)" + _VALUE, re.IGNORECASE),
    re.compile(r"(x-amz-credential[\"']?\s*[:=]\s*[\"']?)" + _VALUE, re.IGNORECASE),
    re.compile(r"(\bSignature=)[0-9a-fA-F]+"),
    re.compile(
        r"((?:aws_secret_access_key|aws_session_token|secret_?access_?key|session_?token)"
        r"[\"']?\s*[:=]\s*b?[\"']?)" + _VALUE,
        re.IGNORECASE,
    ),
)
_REDACTED_LOGGERS = ("botocore.auth", "botocore.endpoint", "botocore.parsers")
_MIN_LITERAL = 8  # shorter "secrets" (test stubs) would mask ordinary words


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential masked (see above)."""
    for secret in secrets:
        if len(secret) >= _MIN_LITERAL and secret in text:
            text = text.replace(secret, _REDACTED)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1" + _REDACTED, text)
    return text


def _redact_value(value: Any, secrets: Iterable[str]) -> Any:
    """A context value with every string inside it redacted (dicts, lists, tuples)."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, Mapping):
        return {k: _redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_redact_value(v, secrets) for v in value)
    return value


def scrubbed(error: ManagedLoopError, secrets: Iterable[str] = ()) -> ManagedLoopError:
    """``error`` with its message, args and context redacted in place (and returned)."""
    secrets = tuple(secrets)
    error.args = tuple(_redact_value(a, secrets) for a in error.args)
    for key, value in list(error.context.items()):
        error.context[key] = _redact_value(value, secrets)
    return error


def leaks(exc: BaseException, secrets: Iterable[str] = ()) -> bool:
    """Whether ``exc`` (its text or its botocore response) holds a credential."""
    secrets = tuple(secrets)
    text = f"{exc!s}\n{getattr(exc, 'response', '')!r}"
    return redact(text, secrets) != text


class _RedactTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg = masked
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
        self._owns_client = False  # the data client is ours to close (not a caller's client=)
        self._wire: Wire | None = None
        self.http = HttpSessions()  # the data plane's aiohttp sessions, one per event loop
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
            creds, _verify = client_internals(self._client)
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

    def secrets(self) -> tuple[str, ...]:
        """The secret values this client signs with (to mask them in error text)."""
        found = [reveal(v) for v in (self._secret, self._token) if v is not None]
        credentials = client_internals(self._client)[0] if self._client is not None else None
        for name in ("secret_key", "token"):
            # A plain or cached value only: never trigger a credential refresh here.
            value = getattr(credentials, f"_{name}", None) or getattr(credentials, name, None)
            if isinstance(value, str):
                found.append(value)
        return tuple(v for v in found if isinstance(v, str) and v)

    def build(self, service: str, *, read_timeout: float) -> Any:
        """A new client of ``service`` (the caller closes it, or :meth:`data` owns it)."""
        _botocore()
        from botocore.config import Config

        cfg = Config(
            read_timeout=read_timeout,
            connect_timeout=min(CONNECT_TIMEOUT, read_timeout),
            retries={"mode": "standard", "total_max_attempts": 1},
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
        """The data-plane client (``bedrock-agentcore``), built once; no botocore retries.

        It prepares and signs requests (see :func:`prepare_request`); a caller's
        ``client=`` is used as is, with a ``before-send`` hook added that is inert outside
        our own calls.
        """
        if self._client is None:
            # It never sends, so its read timeout only caps the connect timeout that
            # :class:`Wire` hands to aiohttp (``min(CONNECT_TIMEOUT, idle_timeout)``).
            self._client = self.build("bedrock-agentcore", read_timeout=self._read_timeout)
            self._owns_client = True
        return self._client

    def wire(self) -> Wire:
        """The data-plane client with its transport settings (read once per client)."""
        client = self.data()
        wire = self._wire
        if wire is None or wire.client is not client:
            install_capture(client)
            wire = self._wire = Wire(client)
        return wire

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
        if self._owns_client:
            self._client.close()
            self._client = self._wire = None
            self._owns_client = False


def _get_config(session: Any) -> str | None:
    getter = getattr(session, "get_config_variable", None)
    return getter("region") if getter is not None else None


# ---------------------------------------------------------------------------- errors


def map_error(
    exc: BaseException,
    *,
    operation: str,
    stream_code: str = "harness_stream_error",
    secrets: Iterable[str] = (),
) -> ManagedLoopError:
    """Translate a botocore/urllib3 failure into the managedloop tree.

    Its text and context are redacted (:func:`redact`, plus the literal ``secrets``): a
    403 echoes the canonical request, session token included. The caller must not chain
    ``exc`` when :func:`leaks` says it holds a credential (see :func:`raise_mapped`).
    """
    if isinstance(exc, ManagedLoopError):
        return exc
    return scrubbed(_map_error(exc, operation=operation, stream_code=stream_code), secrets)


def raise_mapped(mapped: ManagedLoopError, exc: BaseException, secrets: Iterable[str]) -> NoReturn:
    """Raise ``mapped``, chained to ``exc`` unless ``exc`` itself holds a credential.

    Must be called *outside* the ``except`` block that caught ``exc``: inside it, Python
    would still attach ``exc`` as ``__context__`` (printed in tracebacks as "During
    handling of the above exception...").
    """
    if mapped is exc:
        raise mapped
    if leaks(exc, secrets):
        mapped.context["cause_redacted"] = type(exc).__name__
        raise mapped
    raise mapped from exc


def _map_error(exc: BaseException, *, operation: str, stream_code: str) -> ManagedLoopError:
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
    """Whether a failed call may be tried again: :func:`managedloop._retry.retryable`
    (transport failures, damaged frames, 408, 429 and 5xx; never 424 or another 4xx)."""
    return _retry.retryable(exc)


# ---------------------------------------------------------------------------- data plane


def client_internals(client: Any) -> tuple[Any, Any]:
    """The credentials object and the TLS ``verify`` setting of a botocore client.

    botocore has no public accessor for either, and a caller's ``client=`` carries its own
    (a profile, a role, a CA bundle): this is the one place that reads private attributes
    (``client._request_signer._credentials``, ``client._endpoint.http_session._verify``).
    ``tests/agentcore/test_transport.py`` fails loudly if botocore moves them; at run time
    a missing attribute degrades to ``None`` (no credentials to lend the control plane, no
    refresh ahead of signing) and ``True`` (verify with botocore's default CA bundle).
    """
    signer = getattr(client, "_request_signer", None)
    credentials = getattr(signer, "_credentials", None)
    http_session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    verify = getattr(http_session, "_verify", True)
    return credentials, verify


_CAPTURE: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "managedloop_agentcore_capture", default=None
)
_CAPTURE_ID = "managedloop-agentcore-capture"


def _capture(request: Any, **_: Any) -> Any:
    """``before-send`` hook: take the serialized, signed request instead of sending it.

    Inert outside :func:`prepare_request` (a caller's own calls on a shared client are sent
    by botocore as usual). The stand-in answer is an empty ``200``: botocore neither retries
    nor reads it.
    """
    box = _CAPTURE.get()
    if box is None:
        return None
    box.append(request)
    from botocore.awsrequest import AWSResponse
    from botocore.compat import HTTPHeaders

    return AWSResponse(request.url, 200, HTTPHeaders(), None)


def install_capture(client: Any) -> None:
    """Register :func:`_capture` last on ``client``'s ``before-send`` (idempotent).

    Last, so a caller's own ``before-send`` hooks (e.g. a bearer token) still apply.
    """
    service_id = client.meta.service_model.service_id.hyphenize()
    client.meta.events.register_last(f"before-send.{service_id}", _capture, unique_id=_CAPTURE_ID)


def prepare_request(client: Any, operation: str, params: Mapping[str, Any]) -> Any:
    """The ``AWSPreparedRequest`` botocore would send for ``client.<operation>(**params)``.

    botocore's own pipeline runs (parameter validation, serialization, endpoint resolution,
    user agent, the client's signer with its credentials and region); only the send is
    skipped (:func:`_capture`). CPU only, unless the credentials are due for a refresh:
    :func:`refresh_credentials` does that in a thread first.
    """
    box: list[Any] = []
    token = _CAPTURE.set(box)
    try:
        getattr(client, operation)(**params)
    finally:
        _CAPTURE.reset(token)
    if not box:
        raise ConfigError(
            f"{operation}: the botocore client answered without sending a request (a stub or "
            "a before-send hook returning a response?); the data plane needs the request",
            code="unsupported_client",
        )
    return box[-1]


async def refresh_credentials(credentials: Any) -> None:
    """Refresh expiring credentials in a worker thread, so signing never blocks the loop.

    botocore's chain is synchronous (STS, SSO, IMDS...); a refresh that is due would
    otherwise run inside :func:`prepare_request` on the event loop.
    """
    due = getattr(credentials, "refresh_needed", None)
    if due is not None and due():
        await anyio.to_thread.run_sync(credentials.get_frozen_credentials)


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

        self._buffer.add_data(data)
        for message in self._buffer:
            response = message.to_response_dict()
            parsed = self._parser.parse(response, self._shape)
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


class Wire:
    """How to reach the data plane from a botocore client: its endpoint's TLS and proxy
    settings and its connect timeout, read once (botocore resolves them per client)."""

    __slots__ = ("_ops", "client", "connect_timeout", "credentials", "proxy", "ssl")

    def __init__(self, client: Any) -> None:
        from botocore.utils import get_environ_proxies

        self.client = client
        self.credentials, verify = client_internals(client)
        config = client.meta.config
        url = client.meta.endpoint_url
        scheme = url.split(":", 1)[0]
        proxies = config.proxies or get_environ_proxies(url)
        self.proxy: str | None = proxies.get(scheme)
        self.connect_timeout: float | None = config.connect_timeout
        self.ssl: ssl.SSLContext | bool | None = None
        if scheme == "https":
            self.ssl = _ssl_context(verify, config.client_cert)
        self._ops: dict[str, Any] = {}

    def operation_model(self, operation: str) -> Any:
        model = self._ops.get(operation)
        if model is None:
            meta = self.client.meta
            model = meta.service_model.operation_model(meta.method_to_api_mapping[operation])
            self._ops[operation] = model
        return model


def _ssl_context(verify: Any, client_cert: Any) -> ssl.SSLContext | bool:
    if verify is False:
        return False
    from botocore.httpsession import get_cert_path

    path: Any = get_cert_path(verify)
    if not isinstance(path, str):
        context = ssl.create_default_context()
    elif os.path.isdir(path):
        context = ssl.create_default_context(capath=path)
    else:
        context = ssl.create_default_context(cafile=path)
    if isinstance(client_cert, str):
        context.load_cert_chain(client_cert)
    elif isinstance(client_cert, tuple):
        context.load_cert_chain(*client_cert)
    return context


class HttpSessions:
    """One aiohttp ``ClientSession`` per running event loop, open while something uses it.

    A connection (or a command, or ``async with provider``) acquires it on its loop and
    releases it when done; the last release closes it. Per loop, so ``run_sync`` (a fresh
    loop per call) and ``run_sync`` from several threads at once never share sockets
    across loops or leave a session behind on a dead loop.
    """

    __slots__ = ("_by_loop",)

    def __init__(self) -> None:
        self._by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}  # loop: [session, users]

    def __repr__(self) -> str:
        return f"HttpSessions(loops={len(self._by_loop)})"

    def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        entry = self._by_loop.get(loop)
        if entry is None or entry[0].closed:
            connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=False)
            session = aiohttp.ClientSession(
                connector=connector,
                # botocore's request carries its own User-Agent; it sends no Accept headers
                # and reads the event stream as is.
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
                auto_decompress=False,
            )
            entry = self._by_loop[loop] = [session, 0]
        entry[1] += 1

    def session(self) -> aiohttp.ClientSession:
        session: aiohttp.ClientSession = self._by_loop[asyncio.get_running_loop()][0]
        return session

    async def release(self) -> None:
        loop = asyncio.get_running_loop()
        entry = self._by_loop.get(loop)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del self._by_loop[loop]
            with anyio.CancelScope(shield=True):  # a cancelled caller still closes it
                await entry[0].close()


def _map_stream_error(
    exc: Exception,
    *,
    operation: str,
    stream_code: str,
    idle_timeout: float,
    secrets: tuple[str, ...],
) -> ManagedLoopError:
    if isinstance(exc, aiohttp.SocketTimeoutError) or (
        isinstance(exc, aiohttp.ServerTimeoutError)
        and not isinstance(exc, aiohttp.ConnectionTimeoutError)
    ):
        return TransportError(
            f"{operation}: no bytes for {idle_timeout}s (idle_timeout)",
            code="stream_idle_timeout",
            operation=operation,
            idle_timeout=idle_timeout,
        )
    if isinstance(exc, aiohttp.ClientError):
        # A dropped or refused connection (``ClientPayloadError``, ``ServerDisconnectedError``,
        # ...): most are not ``OSError``s, and ``map_error`` only knows botocore and urllib3.
        return scrubbed(
            TransportError(
                f"{operation}: connection failed ({type(exc).__name__}: {exc})",
                code="transport_error",
                operation=operation,
            ),
            secrets,
        )
    return map_error(exc, operation=operation, stream_code=stream_code, secrets=secrets)


async def stream_call(
    clients: Clients,
    operation: str,
    params: Mapping[str, Any],
    *,
    idle_timeout: float,
    stream_code: str = "harness_stream_error",
    span_meta: dict[str, Any] | None = None,
    inflight: set[Callable[[], None]] | None = None,
) -> AsyncGenerator[dict[str, Any], None]:
    """One streamed data-plane call (``operation`` is the client method name); yields its
    events live, decoded as their bytes arrive.

    botocore prepares and signs the request (:func:`prepare_request`); aiohttp sends it on
    the session of the running loop (:meth:`Clients.http`, acquired by the caller) and
    reads the body; :class:`EventDecoder` decodes it. Raises the mapped error;
    ``TransportError(code="stream_idle_timeout")`` when no bytes arrive for
    ``idle_timeout`` seconds (headers included). Stopping early (cancellation, a ``run``
    timeout, ``aclose``) closes the connection, and so does calling the abort function
    registered in ``inflight`` while it runs (a connection's ``aclose`` uses it when the
    consumer was torn down between events).
    """
    secrets = clients.secrets()
    failure: tuple[ManagedLoopError, Exception] | None = None
    with telemetry.span("agent_core.request", span_meta or {"operation": operation}) as extra:
        try:
            wire = clients.wire()
            await refresh_credentials(wire.credentials)
            request = prepare_request(wire.client, operation, params)
            headers = {
                k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()
            }
            response = await clients.http.session().request(
                request.method,
                yarl.URL(request.url, encoded=True),  # as signed: never re-quoted
                data=request.body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=wire.connect_timeout, sock_read=idle_timeout
                ),
                ssl=wire.ssl if wire.ssl is not None else True,
                proxy=wire.proxy,
            )
        except Exception as exc:
            mapped = _map_stream_error(
                exc,
                operation=operation,
                stream_code=stream_code,
                idle_timeout=idle_timeout,
                secrets=secrets,
            )
            extra["status"] = mapped.context.get("status")
            failure = (mapped, exc)
        if failure is not None:  # raised outside the except: no __context__ to leak through
            raise_mapped(*failure, secrets)
        finished = False
        if inflight is not None:
            inflight.add(response.close)
        try:
            op_model = wire.operation_model(operation)
            if response.status >= 300:
                body = await response.read()
                finished = True
                raise client_error(wire.client, op_model, response.status, response.headers, body)
            decoder = EventDecoder(op_model)
            content = response.content
            while chunk := await content.readany():
                for event in decoder.feed(chunk):
                    yield event
            finished = True
            extra["status"] = 200
        except Exception as exc:
            mapped = _map_stream_error(
                exc,
                operation=operation,
                stream_code=stream_code,
                idle_timeout=idle_timeout,
                secrets=secrets,
            )
            extra["status"] = mapped.context.get("status", response.status)
            failure = (mapped, exc)
        finally:
            if inflight is not None:
                inflight.discard(response.close)
            if finished:
                response.release()
            else:  # ended early: drop the connection, so the server sees us go
                response.close()
        if failure is not None:
            raise_mapped(*failure, secrets)
