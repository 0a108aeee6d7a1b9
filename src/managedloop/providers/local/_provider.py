"""``Local``: the in-process loop host over a chat function.

Every option is checked in ``__init__``, before any request, and a bad one raises
:class:`~managedloop.InvalidOptionsError` naming it (``option=``). The API key is held as a
:class:`~managedloop.Secret` and never appears in a ``repr`` or an error.

The model comes from ``Local(model=...)``, else the agent spec's ``model``, else its
``model_config["model"]``. A model named ``anthropic:<id>`` is served by the ``anthropic``
SDK's Messages API (extra ``managedloop[claude]``); any other by the OpenAI Chat Completions
chat function over HTTP, unless ``chat=`` injects one.
"""

from __future__ import annotations

import inspect
import math
import re
import secrets
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Self
from urllib.parse import urlsplit

from managedloop import _retry, _validate, config
from managedloop.config import MISSING, Secret
from managedloop.errors import InvalidOptionsError
from managedloop.hosts import OpenRequest
from managedloop.providers.local._connection import LocalConnection, RetryPolicy
from managedloop.providers.local._http import ClientPool, OpenAIChat, redact_url
from managedloop.providers.local._profiles import Profile, resolve_profile
from managedloop.providers.local._transports import AsyncTransport, HttpTransport
from managedloop.providers.local._types import ChatFunction, History, encode
from managedloop.provisioning.specs import refuse_fields

__all__ = ["ANTHROPIC_PREFIX", "DEFAULT_BASE_URL", "Local", "set_testing"]

ANTHROPIC_PREFIX = "anthropic:"
DEFAULT_BASE_URL = "https://api.openai.com/v1"  # what the OpenAI SDK defaults to
DEFAULT_TIMEOUT = 300.0  # seconds without a byte from the model; local models can be slow
DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds; a loopback or LAN endpoint connects in ms
DEFAULT_MAX_RETRY_AFTER = 60.0  # seconds; never let a server park a session for longer
# Connections per provider. 0 = unbounded: 1,000 concurrent sessions on one provider ran
# fastest with one keep-alive connection each (bench/README.md); bound it for a real server.
DEFAULT_MAX_CONNECTIONS = 0
_RESERVED = frozenset({"model", "api_key", "base_url", "metadata"})  # model_config keys we read


def set_testing(on: bool = True) -> None:
    """Zero the retry waits of every host that uses the default sleep (for tests): Local's,
    and the other hosts' too (they share :func:`managedloop._retry.sleep`)."""
    _retry.set_testing(on)


def _check_url(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidOptionsError(
            f"base_url must be a string, got {type(value).__name__}", option="base_url"
        )
    try:
        parts = urlsplit(value)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # a bad port or a malformed IPv6 host
        parts, port_ok = urlsplit(""), False
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or not port_ok
        or any(c.isspace() or ord(c) < 32 for c in value)
    ):
        raise InvalidOptionsError(
            f"base_url must be an http(s) URL with a host, got {redact_url(value)!r}",
            option="base_url",
        )
    if parts.query or parts.fragment:
        raise InvalidOptionsError("base_url must not carry a query or fragment", option="base_url")
    return value


# RFC 9110: a field name is a token; a field value has no control character but HTAB.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _check_headers(headers: Mapping[str, str]) -> None:
    """Refuse a header the transport could not send (a name that is no HTTP token), and any
    CR/LF or control character that could inject a header. The value is never shown: it
    may be a credential."""
    for name, value in headers.items():
        if _HEADER_NAME.fullmatch(name) is None:
            raise InvalidOptionsError(
                f"header name {name!r} is not an HTTP token (letters, digits, !#$%&'*+-.^_`|~)",
                option="headers",
            )
        if _HEADER_VALUE_BAD.search(value) is not None:
            raise InvalidOptionsError(
                f"the value of header {name!r} contains a control character (CR, LF, NUL...)",
                option="headers",
            )


def _seconds(name: str, value: Any, *, allow_zero: bool = False) -> float:
    if type(value) is float and 0.0 < value < math.inf:
        return value  # what _validate.duration returns for it, without the call
    seconds = _validate.duration(name, value, allow_none=False, allow_zero=allow_zero)
    assert seconds is not None  # allow_none=False
    return seconds


def _int(name: str, value: Any) -> int:
    number = _validate.integer(name, value)
    assert number is not None  # allow_none=False
    return number


class Local:
    """The Local loop host: the agent loop runs here, over any chat endpoint.

    Args:
        model: The model id sent to the endpoint; ``anthropic:<id>`` uses the Messages API.
        base_url: The OpenAI-compatible endpoint, up to ``/v1`` (config ``openai_base_url``
            / env ``OPENAI_BASE_URL``; default OpenAI's). For ``anthropic:`` models it is
            the Anthropic base URL.
        api_key: Sent as ``Authorization: Bearer`` (config ``openai_api_key`` / env
            ``OPENAI_API_KEY``; ``None`` sends none). For ``anthropic:`` models, the
            Anthropic key (default: ``ANTHROPIC_API_KEY``).
        chat: Your own chat function (see :class:`ChatRequest`); replaces HTTP entirely.
        stream: Stream responses; text chunks reach ``handle_event`` as
            ``managedloop.text_delta`` events while the model writes.
        model_config: Extra request-body parameters (``temperature``, ``max_tokens``,
            ``tool_choice``...), sent verbatim, merged over the agent spec's
            ``model_config`` (the exceptions are listed in the package docstring).
        profile: What the HTTP client sends to a given kind of server: ``"llama.cpp"``,
            ``"vllm"``, ``"ollama"``, ``"openai"`` or a :class:`Profile` (default: one that
            works on OpenAI and llama.cpp as written; see ``_profiles``).
        max_retries: Retries of a transient failure per model call.
        retry_backoff: Seconds before the first retry; doubles each retry (at most 60 s;
            jittered: each wait is between half of that and all of it).
        max_retry_after: Cap on a server's ``Retry-After``, in seconds.
        timeout: Seconds to wait for any byte from the endpoint.
        connect_timeout: Seconds to establish a connection.
        max_connections: Connection pool size (``0``: unbounded).
        headers: Extra HTTP headers for every request.
        proxy: A proxy URL (``http://[user:password@]host:port``) for every request;
            ``https://`` targets go through a ``CONNECT`` tunnel. Default: from
            ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``ALL_PROXY``, minus ``NO_PROXY`` (host,
            ``.domain``, ``host:port``, IP or CIDR entries; either case). The credentials
            are secrets: never shown, sent to the proxy only.
        trust_env: Read the proxy variables above (default ``True``; ``False``: direct,
            unless ``proxy=``). ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` are OpenSSL's and
            always apply to ``verify=True``.
        verify: ``True`` (the system trust store), a CA bundle path (a PEM file or a
            hashed directory), an :class:`ssl.SSLContext` (used as is), or ``False`` (no
            check at all; warns loudly). The AgentCore host's (botocore's) name.
        client_cert: A client certificate: one PEM path (certificate and key) or a
            ``(certificate, key)`` pair of paths (botocore's ``client_cert``).
        transport: Another :class:`AsyncTransport` for the bytes (e.g.
            :class:`AiohttpTransport`, or :class:`managedloop.testing.MockTransport`); it
            takes its own network options, so ``proxy``, ``trust_env``, ``verify``,
            ``client_cert``, ``timeout``, ``connect_timeout`` and ``max_connections``
            cannot be combined with it.
        sleep: ``async sleep(seconds)`` used between retries (inject for tests, or use
            :func:`set_testing`).

    Use ``async with Local(...) as provider`` to keep connections pooled across runs;
    otherwise the pool closes when the last session on it ends.

    Unknown keywords, wrong types, NaN or infinite durations, malformed URLs, a header
    name that is not an HTTP token or a header value with a control character (CR, LF, NUL;
    a tab is allowed; the value is never shown) and a
    ``base_url`` with credentials *plus* an ``api_key`` raise ``InvalidOptionsError``
    (``invalid_opts``). A ``base_url``'s userinfo is never shown (``***@host``).
    Redirects: a same-origin 307/308 is followed (method, body and headers kept, at most
    3 hops); any other redirect — another origin, or a 301/302/303 that would turn the POST
    into a GET — is refused with ``APIStatusError(code="redirect_refused")`` naming the
    target's origin only: the conversation and the credentials never leave the origin.
    """

    name: ClassVar[str] = "local"
    supports_outcomes: ClassVar[bool] = False
    supports_raw_events: ClassVar[bool] = False

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = MISSING,
        api_key: str | Secret | None = MISSING,
        chat: ChatFunction | None = None,
        stream: bool = False,
        model_config: Mapping[str, Any] | None = None,
        profile: str | Profile | None = None,
        max_retries: int = 3,
        retry_backoff: float = 1.0,
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        headers: Mapping[str, str] | None = None,
        proxy: str | None = None,
        trust_env: bool = True,
        verify: bool | str | ssl.SSLContext = True,
        client_cert: str | tuple[str, str] | None = None,
        transport: AsyncTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        **unknown: Any,
    ) -> None:
        _validate.no_unknown_keywords("Local", unknown, _ACCEPTED)
        network = {
            name
            for name, value, default in (
                ("proxy", proxy, None),
                ("trust_env", trust_env, True),
                ("verify", verify, True),
                ("client_cert", client_cert, None),
                ("connect_timeout", connect_timeout, DEFAULT_CONNECT_TIMEOUT),
                ("max_connections", max_connections, DEFAULT_MAX_CONNECTIONS),
                ("timeout", timeout, DEFAULT_TIMEOUT),
            )
            if value is not default and value != default
        }
        if transport is not None and not isinstance(transport, AsyncTransport):
            raise InvalidOptionsError(
                "transport must be an AsyncTransport (HttpTransport, AiohttpTransport...)",
                option="transport",
            )
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise InvalidOptionsError("model must be a non-empty string", option="model")
        if chat is not None and not callable(chat):
            raise InvalidOptionsError("chat must be an async callable", option="chat")
        if not isinstance(stream, bool):
            raise InvalidOptionsError("stream must be True or False", option="stream")
        if model_config is not None and not (
            isinstance(model_config, Mapping) and all(isinstance(k, str) for k in model_config)
        ):
            raise InvalidOptionsError(
                "model_config must be a mapping with string keys", option="model_config"
            )
        if headers is not None and not (
            isinstance(headers, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
        ):
            raise InvalidOptionsError("headers must map str to str", option="headers")
        _check_headers(headers or {})
        if sleep is not None and not callable(sleep):
            raise InvalidOptionsError("sleep must be an async callable", option="sleep")
        self.model = model
        self.stream = stream
        self.profile = resolve_profile(profile)
        self.model_config = dict(model_config or {})
        self._anthropic = model is not None and model.startswith(ANTHROPIC_PREFIX)
        self._chat = chat
        self._tools_cache: tuple[tuple[Any, ...], list[dict[str, Any]], bytes | None] | None = None
        self._retry = RetryPolicy(
            max_retries=_int("max_retries", max_retries),
            backoff=_seconds("retry_backoff", retry_backoff, allow_zero=True),
            max_retry_after=_seconds("max_retry_after", max_retry_after, allow_zero=True),
            sleep=sleep or _retry.sleep,
        )
        self._timeout = _seconds("timeout", timeout)
        self._connect_timeout = _seconds("connect_timeout", connect_timeout)
        self._headers = dict(headers or {})

        if self._anthropic:
            url = base_url if base_url is not MISSING else None  # None: the SDK's default
            key = config.resolve("api_key", api_key) if api_key is not MISSING else MISSING
        else:
            url = config.resolve("openai_base_url", base_url)
            if url is None and chat is None:
                url = DEFAULT_BASE_URL
            key = config.resolve("openai_api_key", api_key)
        if url is not None:
            url = _check_url(url)
        if key is not MISSING and key is not None and not isinstance(key, Secret):
            raise InvalidOptionsError("api_key must be a string", option="api_key")
        if url is not None and "@" in urlsplit(url).netloc and isinstance(key, Secret):
            # Two sources for one Authorization header: which wins would be a guess.
            raise InvalidOptionsError(
                "base_url carries credentials (user:password@) and an api_key is set too; "
                "pass only one of them",
                option="base_url",
            )
        self.base_url: str | None = url
        self._api_key: Any = key  # Secret, None, or MISSING (anthropic: the SDK default)
        max_connections = _int("max_connections", max_connections)
        not_http = "chat=" if chat is not None else "anthropic: models" if self._anthropic else ""
        unused = {"connect_timeout", "max_connections", "timeout"}  # read there before, kept
        for name in sorted(network - unused if not_http else ()):
            raise InvalidOptionsError(  # refused, never dropped
                f"{name}= is an option of the Local host's HTTP transport, which {not_http} "
                "do not use",
                option=name,
            )
        if transport is not None and (chat is not None or self._anthropic):
            raise InvalidOptionsError(
                f"transport= carries Chat Completions requests; {not_http} do not use it",
                option="transport",
            )
        if transport is not None and network:
            raise InvalidOptionsError(
                f"{', '.join(sorted(network))} configure the default transport; pass them to "
                "the transport given as transport= instead",
                option=sorted(network)[0],
            )
        # A chat function replaces HTTP entirely: no transport is made.
        self._pool: ClientPool | None = None
        if chat is None and not self._anthropic and transport is not None:
            self._pool = ClientPool(transport)
        elif chat is None and not self._anthropic:
            default = HttpTransport(
                proxy=proxy,
                trust_env=trust_env,
                verify=verify,
                client_cert=client_cert,
                timeout=self._timeout,
                connect_timeout=self._connect_timeout,
                max_connections=max_connections,
            )
            if url is not None:
                # an environment proxy the transport cannot use fails here, not at a request
                parts = urlsplit(url)
                port = parts.port or (443 if parts.scheme == "https" else 80)
                default.proxies.for_url(parts.scheme, parts.hostname or "", port)
            self._pool = ClientPool(default)
        self._http = (
            OpenAIChat(url, key, self._pool, self._headers, self.profile)
            if self._pool is not None and not self._anthropic and url is not None
            else None
        )

    def __repr__(self) -> str:
        parts = [f"model={self.model!r}"]
        if self._chat is not None:
            parts.append(f"chat={self._chat!r}")
        elif self.base_url is not None:
            parts.append(f"base_url={redact_url(self.base_url)!r}")
        if isinstance(self._api_key, Secret):
            parts.append(f"api_key={self._api_key!r}")
        if self.stream:
            parts.append("stream=True")
        if self.profile.name != "default":
            parts.append(f"profile={self.profile.name!r}")
        return f"Local({', '.join(parts)})"

    async def __aenter__(self) -> Self:
        if self._pool is not None:
            self._pool.pin()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close pooled HTTP connections (also done when the last session ends)."""
        if self._pool is not None:
            await self._pool.unpin()

    def _wire_tools(self, definitions: Sequence[Any]) -> tuple[list[dict[str, Any]], bytes | None]:
        """The OpenAI tool list and its encoding for ``definitions``, made once per set of
        definitions (a spec's are the same objects every session): at 10,000 sessions a
        copy per session was ~1 KiB and four tracked objects each (bench/README.md)."""
        cached = self._tools_cache
        if (
            cached is not None
            and len(cached[0]) == len(definitions)
            and all(a is b for a, b in zip(cached[0], definitions, strict=True))
        ):
            return cached[1], cached[2]
        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description or "",
                    "parameters": t.input_schema or {"type": "object"},
                },
            }
            for t in definitions
        ]
        tools_json = encode(tools) if tools else None
        self._tools_cache = (tuple(definitions), tools, tools_json)
        return tools, tools_json

    async def open(self, request: OpenRequest) -> LocalConnection:
        if request.environment is not None:
            raise InvalidOptionsError(
                "the local host has no environments: environment= is for Claude Managed Agents",
                option="environment",
            )
        spec = request.spec
        if spec is not None:
            refuse_fields(spec, "local", _HOST_ONLY)  # refuse or honour, never drop
        spec_config: Mapping[str, Any] = spec.model_config if spec is not None else {}
        model = self.model or (spec.model if spec is not None else None)
        if model is None and isinstance(spec_config.get("model"), str):
            model = spec_config["model"]
        if not model:
            raise InvalidOptionsError(
                "no model: pass Local(model=...) or set AgentSpec.model", option="model"
            )
        options = {k: v for k, v in spec_config.items() if k not in _RESERVED}
        options.update(self.model_config)

        on_close = None
        if self._chat is not None:
            chat: ChatFunction = self._chat
        elif model.startswith(ANTHROPIC_PREFIX):
            from managedloop.providers.local._anthropic import AnthropicChat

            key = self._api_key if self._api_key is not MISSING else config.resolve("api_key")
            anthropic_chat = AnthropicChat(
                base_url=self.base_url,
                api_key=key,
                timeout=self._timeout,
                headers=self._headers,
            )
            chat, on_close = anthropic_chat, anthropic_chat.aclose
            model = model[len(ANTHROPIC_PREFIX) :]
        else:
            assert self._http is not None
            assert self._pool is not None
            chat = self._http
            self._pool.acquire()
            on_close = self._pool.release

        tools, tools_json = self._wire_tools(request.tools)
        if request.transcript:
            history = History(request.transcript)
            resumed = True
        else:
            history = History()
            resumed = False
            if spec is not None and spec.system_prompt:
                history.append({"role": "system", "content": spec.system_prompt})
        return LocalConnection(
            chat=chat,
            model=model,
            history=history,
            resumed=resumed,
            session_id=request.session_id or "local_" + secrets.token_hex(8),
            tools=tools,
            tools_json=tools_json,
            options=options,
            terminal_tool=spec.terminal_tool if spec is not None else None,
            stream=self.stream,
            retry=self._retry,
            on_close=on_close,
            null_content=self.profile.null_content and chat is self._http,
            tool_input_deltas=request.tool_input_deltas,
        )


_HOST_ONLY = {
    "host_tools": "host-run tools need a managed host; a Local agent's tools are AgentSpec.tools",
    "effort": "a Claude agent setting (a Local model's settings go in model_config)",
    "execution_identity": "a Claude agent setting; a Local tool runs in this process",
    "timeout_seconds": "an AgentCore harness setting; bound a Local run with run(timeout=...)",
    "harness_config": "AgentCore harness settings",
    "mcp_servers": "a Claude agent setting (a Local agent's MCP tools: Toolset.from_mcp)",
    "skills": "a Claude agent setting",
    "speed": "a Claude model setting (a Local model's settings go in model_config)",
    "inference_geo": "a Claude model setting",
}

_ACCEPTED = tuple(inspect.signature(Local.__init__).parameters)[1:-1]  # not self, **unknown
