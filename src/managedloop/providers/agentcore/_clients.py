"""Building and owning the botocore clients of both planes, with their credentials.

``retries={"total_max_attempts": 1}`` means exactly one attempt (``max_attempts: 1``
would mean two), and every client built here has it. A data-plane call is never retried
by botocore (:mod:`._signing`'s stand-in answer is a 200), only by the connection's own
loop, which can tell the caller (``RESTART``); provisioning retries its idempotent
control-plane reads itself, within its budget (``_waits.call``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from managedloop import _validate
from managedloop._urls import redact_url
from managedloop.config import MISSING, Secret, resolve, reveal
from managedloop.errors import InvalidOptionsError
from managedloop.providers.agentcore._botocore import client_internals, default_session, load
from managedloop.providers.agentcore._http import HttpSessions, Wire
from managedloop.providers.agentcore._redact import register
from managedloop.providers.agentcore._signing import install_capture

__all__ = [
    "CONNECT_TIMEOUT",
    "CONTROL_READ_TIMEOUT",
    "SERVICE",
    "Clients",
    "check_endpoint_url",
    "check_region",
    "request_meta",
]

SERVICE = "bedrock-agentcore"  # the signing name of both planes
CONNECT_TIMEOUT = 10.0  # seconds; a TCP+TLS handshake to a regional endpoint takes well under 1 s
CONTROL_READ_TIMEOUT = 600.0  # seconds; reference default for control-plane calls outside a budget


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
        for option, url in (
            ("endpoint_url", endpoint_url),
            ("control_endpoint_url", control_endpoint_url),
        ):
            if url is not None:
                check_endpoint_url(option, url)
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
        self.region_name: str = check_region(region_name or resolve("aws_region"))
        register(self)  # the log filter masks our secrets while we live (weakly held)

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
        """The secret values this client signs with (to mask them in error text and logs).

        The access key id is among them: it is not what signs, but it names the account's
        key, and botocore's DEBUG log of a prepared request shows it in the SigV4
        ``Authorization: ... Credential=<key id>/...`` header (tests/test_leaks.py)."""
        found = [reveal(v) for v in (self._secret, self._token) if v is not None]
        if isinstance(self._key_id, str):
            found.append(self._key_id)
        credentials = client_internals(self._client)[0] if self._client is not None else None
        for name in ("access_key", "secret_key", "token"):
            # A plain or cached value only: never trigger a credential refresh here.
            value = getattr(credentials, f"_{name}", None) or getattr(credentials, name, None)
            if isinstance(value, str):
                found.append(value)
        return tuple(v for v in found if isinstance(v, str) and v)

    def build(self, service: str, *, read_timeout: float) -> Any:
        """A new client of ``service`` (the caller closes it, or :meth:`data` owns it)."""
        load()
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
                return default_session().create_client(service, **kwargs)
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


_REGION = re.compile(r"[a-z0-9-]+")


def check_region(value: Any) -> str:
    """``value`` if it is an AWS region name (``[a-z0-9-]+``, whole string), else
    ``invalid_opts``: the region becomes part of the endpoint's host name and of the
    signature's scope, so ``"us-east-1\\n"`` or ``"evil.com/"`` must never reach a URL."""
    return _validate.matches("region_name", value, _REGION, "an AWS region name like us-east-1")


def check_endpoint_url(option: str, value: Any) -> str:
    """``value`` if it is an ``http(s)`` URL with a host and a valid port, without
    credentials (``user:password@``), whitespace or control characters; else
    ``invalid_opts``. The error never shows a URL's userinfo."""
    if not isinstance(value, str):
        raise InvalidOptionsError(
            f"{option} must be a string, got {type(value).__name__}", option=option
        )
    try:
        parts = urlsplit(value)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # a non-numeric or out-of-range port, a malformed IPv6 host
        parts, port_ok = urlsplit(""), False
    if "@" in parts.netloc:
        raise InvalidOptionsError(
            f"{option} must not carry credentials (user:password@): AgentCore requests are "
            f"signed with SigV4; got {redact_url(value)!r}",
            option=option,
        )
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or not port_ok
        or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value)
    ):
        raise InvalidOptionsError(
            f"{option} must be an http(s) URL with a host and a valid port, "
            f"got {redact_url(value)!r}",
            option=option,
        )
    return value


def _get_config(session: Any) -> str | None:
    getter = getattr(session, "get_config_variable", None)
    return getter("region") if getter is not None else None


def request_meta(operation: str) -> dict[str, Any]:
    """The ``agent_core.request`` telemetry attributes of one call of ``operation``."""
    method, template = _ROUTES.get(operation, ("post", "/"))
    return {"operation": operation, "service": SERVICE, "method": method, "path": template}


_ROUTES: dict[str, tuple[str, str]] = {
    "create_harness": ("post", "/harnesses"),
    "get_harness": ("get", "/harnesses/{harnessId}"),
    "list_harnesses": ("get", "/harnesses"),
    "delete_harness": ("delete", "/harnesses/{harnessId}"),
    "get_harness_endpoint": ("get", "/harnesses/{harnessId}/endpoints/{endpointName}"),
    "invoke_harness": ("post", "/harnesses/invoke"),
    "invoke_agent_runtime_command": ("post", "/runtimes/{arn}/commands"),
}
