"""The Bedrock AgentCore harness host: one ``InvokeHarness`` per turn (botocore prepares,
signs and decodes it; aiohttp carries the bytes: see ``_client``).

Protocol invariants this provider relies on (``agentcore-wire.md``, reference §3.3-3.7):

* a turn is one ``InvokeHarness`` whose event stream ends with ``messageStop`` (then
  ``metadata``); a stream that ends without ``messageStop`` was cut short and is retried
  (bounded), ending in ``TransportError(code="early_termination")``;
* exception frames mean the harness itself failed the turn: they become
  ``HostStreamError(code="harness_stream_error")`` and are never retried;
* botocore never retries the invoke (it only prepares it; the send is ours): replaying a
  stateful turn can duplicate work, so only this loop retries, and it tells the session
  loop to drop the failed attempt's events (``RESTART``);
* the harness keeps the conversation server-side per runtime session id (33-100 chars,
  ``[a-zA-Z0-9][a-zA-Z0-9-_]*``); resuming after inline tools re-sends the assistant
  ``toolUse`` message plus the user ``toolResult`` message;
* a per-invocation ``tools`` list *replaces* the harness's tools, so client tools are merged
  with the harness's own (read once with ``GetHarness``);
* ``endpoint_name`` travels as ``qualifier``; the per-invocation budgets
  (``timeoutSeconds``, ``maxIterations``, ``maxTokens``) bound cost *server-side*. A client
  timeout closes our stream but does not stop the harness (see docs/agentcore.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import anyio

from managedloop import _retry, _validate, telemetry
from managedloop.config import MISSING
from managedloop.errors import (
    InvalidOptionsError,
    ManagedLoopError,
    ProviderError,
    TransportError,
)
from managedloop.hosts import (
    RESTART,
    ConnectionBase,
    DefineOutcome,
    OpenRequest,
    RawInput,
    TextDelta,
    ToolResults,
    TurnInput,
    TurnItem,
    UserMessage,
)
from managedloop.providers.agentcore import _converse
from managedloop.providers.agentcore._client import (
    SERVICE,
    Clients,
    map_error,
    raise_mapped,
    retryable,
    stream_call,
)
from managedloop.results import CommandResult, RawEvent
from managedloop.tools import ToolDefinition

__all__ = [
    "AgentCoreHandle",
    "BedrockAgentCore",
    "new_runtime_session_id",
    "validate_runtime_session_id",
]

logger = logging.getLogger("managedloop.agentcore")

DEFAULT_IDLE_TIMEOUT = 300.0  # seconds of silence between chunks; a turn may last longer
DEFAULT_INVOKE_RETRIES = 2  # 3 attempts: transient drops are common on long streams, but each
# retry re-runs a stateful turn, so keep it small
DEFAULT_RETRY_BACKOFF = 0.5  # seconds, doubled per retry (capped below): drops are blips
MAX_RETRY_BACKOFF = 4.0  # seconds; a retry is for a blip, not for an outage
DEFAULT_COMMAND_IDLE_TIMEOUT = 300.0  # seconds; matches the service's default command timeout

# Every pattern is applied with re.fullmatch (``_validate.matches``): ``re.match`` with
# ``$`` accepts a trailing newline, and ``qualifier=DEFAULT%0A`` then reached the wire.
_SESSION_ID_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_-]*")
_PREFIX_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_-]{0,59}")
_ENDPOINT_RE = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,47}")
# The harness id is what the control plane takes in a path: no '/', no whitespace/controls.
_HARNESS_ARN_RE = re.compile(r"arn:aws[a-z-]*:bedrock-agentcore:[a-z0-9-]*:\d*:harness/([^/\s]+)")

# The keywords botocore's ``create_client`` (and boto3's ``Session.client``) take, besides
# the ones this constructor names itself (region_name, endpoint_url, the keys, config):
# they go to botocore untouched. Anything else is refused here, not at run time.
_BOTOCORE_CLIENT_KEYWORDS = frozenset({"api_version", "use_ssl", "verify", "aws_account_id"})


def validate_runtime_session_id(value: Any, *, option: str = "runtime_session_id") -> str:
    """Return ``value`` if the service would accept it as a runtime session id.

    33-100 characters matching ``[a-zA-Z0-9][a-zA-Z0-9-_]*``; else
    ``InvalidOptionsError(code="invalid_session_id")``. (botocore only checks the minimum
    length locally; the rest would be a server-side 400 after a round trip.)
    """
    if (
        not isinstance(value, str)
        or not 33 <= len(value) <= 100
        or _SESSION_ID_RE.fullmatch(value) is None
    ):
        shown = value if isinstance(value, str) and len(value) <= 120 else type(value).__name__
        raise InvalidOptionsError(
            f"{option} must be 33-100 characters of [a-zA-Z0-9_-] starting with a letter or "
            f"digit, got {shown!r} (use new_runtime_session_id())",
            code="invalid_session_id",
            option=option,
        )
    return value


def new_runtime_session_id(prefix: str = "ml") -> str:
    """A fresh, valid runtime session id: ``<prefix>-<32 hex>`` (prefix: up to 60 chars)."""
    _validate.matches(
        "prefix",
        prefix,
        _PREFIX_RE,
        "1-60 characters of [a-zA-Z0-9_-] starting with a letter or digit",
    )
    return validate_runtime_session_id(f"{prefix}-{uuid.uuid4().hex}")


def validate_endpoint_name(value: Any) -> str:
    return _validate.matches(
        "endpoint_name", value, _ENDPOINT_RE, "a name matching [a-zA-Z][a-zA-Z0-9_]{0,47}"
    )


def harness_id_of(arn: str) -> str:
    """The control plane's harness id (the text after ``harness/``) of a harness ARN."""
    match = _HARNESS_ARN_RE.fullmatch(arn) if isinstance(arn, str) else None
    if match is None:
        raise InvalidOptionsError(f"not a harness ARN: {arn!r}", option="harness_arn")
    return match.group(1)


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentCoreHandle:
    """What ``provision`` made: a harness. Pass it as ``agent=`` or its ARN to the provider.

    The endpoint is deliberately not part of it: it is a call-time routing choice
    (``endpoint_name=``), and one harness has many endpoints.
    """

    harness_arn: str
    harness_id: str
    harness_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "harness_arn": self.harness_arn,
            "harness_id": self.harness_id,
            "harness_name": self.harness_name,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentCoreHandle:
        return cls(
            harness_arn=data["harness_arn"],
            harness_id=data["harness_id"],
            harness_name=data.get("harness_name"),
        )


def _arn_of(agent: Any) -> str | None:
    if isinstance(agent, AgentCoreHandle):
        return agent.harness_arn
    if isinstance(agent, Mapping) and isinstance(agent.get("harness_arn"), str):
        return str(agent["harness_arn"])
    if isinstance(agent, str) and agent.startswith("arn:"):
        return agent
    arn = getattr(agent, "harness_arn", None)
    return arn if isinstance(arn, str) else None


_OWN_KEYWORDS = (
    "harness_arn",
    "runtime_session_id",
    "session_id",
    "endpoint_name",
    "timeout_seconds",
    "max_iterations",
    "max_tokens",
    "model",
    "system_prompt",
    "actor_id",
    "runtime_user_id",
    "harness_tools",
    "idle_timeout",
    "invoke_retries",
    "retry_backoff",
    "client",
    "control_client",
    "session",
    "region_name",
    "endpoint_url",
    "control_endpoint_url",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "config",
)

OutputCallback = Callable[[str, str], Awaitable[None] | None]


class BedrockAgentCore:
    """The Bedrock AgentCore harness host (extra ``managedloop[agentcore]``).

    ``harness_arn``: the harness to invoke (or pass a provisioned handle as ``agent=``).
    ``runtime_session_id``: pin the runtime session (else each ``run`` mints a fresh one);
    ``session_id``: reattach to an existing one (like ``resume=``). ``endpoint_name``: sent
    as ``qualifier`` (``None``: omitted, the service uses ``DEFAULT``). ``timeout_seconds``,
    ``max_iterations``, ``max_tokens``, ``model``: per-invocation server-side budgets and
    model override. ``idle_timeout``: seconds of silence between chunks before the turn
    fails (not a cap on the turn). ``invoke_retries``: our own retries of a dropped or
    truncated turn (botocore never retries it).

    Clients: ``client=`` (a ``bedrock-agentcore`` botocore client), ``control_client=``,
    ``session=`` (boto3 or botocore), or the standard client keywords (``region_name``,
    ``endpoint_url``, ``aws_access_key_id``, ``aws_secret_access_key``,
    ``aws_session_token``, ``config``, and botocore's other ``create_client`` keywords:
    ``api_version``, ``use_ssl``, ``verify``, ``aws_account_id``). Any other keyword, a
    wrong type, or a NaN/infinite duration raises ``InvalidOptionsError(code="invalid_opts")``
    here, before any request.
    """

    name: ClassVar[str] = "agentcore"
    supports_outcomes: ClassVar[bool] = False
    supports_raw_events: ClassVar[bool] = False

    def __init__(
        self,
        *,
        harness_arn: str | None = None,
        runtime_session_id: str | None = None,
        session_id: str | None = None,
        endpoint_name: str | None = "DEFAULT",
        timeout_seconds: int | None = None,
        max_iterations: int | None = None,
        max_tokens: int | None = None,
        model: str | Mapping[str, Any] | None = None,
        system_prompt: str | Any | None = MISSING,
        actor_id: str | None = None,
        runtime_user_id: str | None = None,
        harness_tools: Sequence[Mapping[str, Any]] | None = None,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        invoke_retries: int = DEFAULT_INVOKE_RETRIES,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
        client: Any = None,
        control_client: Any = None,
        session: Any = None,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        control_endpoint_url: str | None = None,
        aws_access_key_id: str | Any | None = MISSING,
        aws_secret_access_key: str | Any | None = MISSING,
        aws_session_token: str | Any | None = MISSING,
        config: Any = None,
        **client_options: Any,
    ) -> None:
        unknown = {k: v for k, v in client_options.items() if k not in _BOTOCORE_CLIENT_KEYWORDS}
        _validate.no_unknown_keywords(
            "BedrockAgentCore", unknown, [*_OWN_KEYWORDS, *_BOTOCORE_CLIENT_KEYWORDS]
        )
        if harness_arn is not None:
            harness_id_of(harness_arn)
        if runtime_session_id is not None:
            validate_runtime_session_id(runtime_session_id)
        if session_id is not None:
            validate_runtime_session_id(session_id, option="session_id")
        if endpoint_name is not None:
            validate_endpoint_name(endpoint_name)
        for opt, value in (
            ("timeout_seconds", timeout_seconds),
            ("max_iterations", max_iterations),
            ("max_tokens", max_tokens),
        ):
            _validate.integer(opt, value, minimum=1, allow_none=True)
        for opt, given in (
            ("actor_id", actor_id),
            ("runtime_user_id", runtime_user_id),
            ("region_name", region_name),
            ("endpoint_url", endpoint_url),
            ("control_endpoint_url", control_endpoint_url),
        ):
            if given is not None:
                _validate.text(opt, given)
        if system_prompt is not MISSING and system_prompt is not None:
            _validate.text("system_prompt", system_prompt, allow_empty=True)
        if harness_tools is not None and (
            isinstance(harness_tools, str | bytes | Mapping)
            or not isinstance(harness_tools, Sequence)
            or not all(isinstance(t, Mapping) for t in harness_tools)
        ):
            raise InvalidOptionsError(
                "harness_tools must be a list of harness tool mappings", option="harness_tools"
            )
        _validate.duration("idle_timeout", idle_timeout, allow_none=False)
        _validate.duration("retry_backoff", retry_backoff, allow_none=False, allow_zero=True)
        _validate.integer("invoke_retries", invoke_retries, minimum=0)
        if model is not None and not isinstance(model, str | Mapping):
            raise InvalidOptionsError("model must be a model id or a model union", option="model")
        self.harness_arn = harness_arn
        self.runtime_session_id = runtime_session_id
        self.session_id = session_id
        self.endpoint_name = endpoint_name
        self.timeout_seconds = timeout_seconds
        self.max_iterations = max_iterations
        self.max_tokens = max_tokens
        self.model = model
        self.system_prompt = system_prompt
        self.actor_id = actor_id
        self.runtime_user_id = runtime_user_id
        self.harness_tools = list(harness_tools) if harness_tools is not None else None
        self.idle_timeout = float(idle_timeout)
        self.invoke_retries = invoke_retries
        self.retry_backoff = float(retry_backoff)
        self.clients = Clients(
            client=client,
            control_client=control_client,
            session=session,
            region_name=region_name,
            endpoint_url=endpoint_url,
            control_endpoint_url=control_endpoint_url,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
            config=config,
            read_timeout=self.idle_timeout,
            options=client_options,
        )
        self._harness_info: dict[str, dict[str, Any]] = {}
        self._harness_flights: dict[tuple[asyncio.AbstractEventLoop, str], _Flight] = {}
        # Close the data client this provider built when it goes away. It never sends (aiohttp
        # carries the data plane), so this frees botocore's resources, not open sockets.
        self._finalizer = weakref.finalize(self, Clients.close, self.clients)

    def __repr__(self) -> str:
        return (
            f"BedrockAgentCore(harness_arn={self.harness_arn!r}, "
            f"region_name={self.clients.region_name!r}, endpoint_name={self.endpoint_name!r})"
        )

    def cache_identity(self) -> tuple[Any, ...]:
        """What the provisioning cache keys on: the account endpoint, not this object."""
        return ("agentcore", self.clients.region_name, self.clients.control_endpoint_url)

    # -------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Close the botocore clients this provider built (idempotent)."""
        self._finalizer()

    def __enter__(self) -> BedrockAgentCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> BedrockAgentCore:
        self.clients.http.acquire()  # keep this loop's HTTP session open across runs
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.clients.http.release()
        self.close()

    # -------------------------------------------------------------- sessions

    async def open(self, request: OpenRequest) -> _Connection:
        arn = _arn_of(request.agent) or self.harness_arn
        if arn is None:
            raise InvalidOptionsError(
                "BedrockAgentCore needs harness_arn= (or a provisioned handle as agent=)",
                option="harness_arn",
            )
        harness_id_of(arn)
        if request.session_id is not None:
            sid = validate_runtime_session_id(request.session_id, option="resume")
            resumed = True
        elif self.session_id is not None:
            sid, resumed = self.session_id, True
        elif self.runtime_session_id is not None:
            sid, resumed = self.runtime_session_id, False
        else:
            sid, resumed = new_runtime_session_id(), False
        tools: list[dict[str, Any]] | None = None
        allowed: list[str] | None = None
        if request.tools:
            info = await self._harness_tools(arn)
            tools = _converse.merge_tools(info.get("tools") or [], request.tools)
            deployed = info.get("allowedTools")
            if deployed and "*" not in deployed:
                allowed = [*deployed, *(t.name for t in request.tools)]
        system = self.system_prompt
        if system is MISSING:
            system = request.spec.system_prompt if request.spec is not None else None
        return _Connection(
            self,
            harness_arn=arn,
            session_id=sid,
            resumed=resumed,
            tools=tools,
            allowed_tools=allowed,
            system_prompt=system,
        )

    async def _harness_tools(self, arn: str) -> dict[str, Any]:
        """The harness's deployed tools and allowedTools (read once per harness).

        Concurrent first uses on one event loop share one in-flight ``GetHarness`` (200
        sessions opened at once made 200 calls): the first caller fetches, the others wait
        for its outcome, success or failure. A failure is not cached: the next use retries.
        """
        if self.harness_tools is not None:
            return {"tools": self.harness_tools, "allowedTools": None}
        cached = self._harness_info.get(arn)
        if cached is not None:
            return cached
        # Keyed by loop as well: an anyio.Event belongs to one event loop, and run_sync from
        # several threads runs one loop per thread.
        key = (asyncio.get_running_loop(), arn)
        flight = self._harness_flights.get(key)
        if flight is not None:
            await flight.done.wait()
            if flight.info is not None:
                return flight.info
            assert flight.error is not None
            raise _tools_unavailable(harness_id_of(arn), flight.error)
        flight = self._harness_flights[key] = _Flight()
        try:
            hid = harness_id_of(arn)
            try:
                harness = (await self.control_call("get_harness", harnessId=hid))["harness"]
            except ManagedLoopError as exc:
                flight.error = exc
                raise _tools_unavailable(hid, exc) from exc
            info = {
                "tools": harness.get("tools") or [],
                "allowedTools": harness.get("allowedTools"),
            }
            self._harness_info[arn] = flight.info = info
            return info
        finally:
            if flight.info is None and flight.error is None:  # cancelled or a raw failure
                flight.error = ProviderError("GetHarness did not complete", code="cancelled")
            del self._harness_flights[key]
            flight.done.set()

    async def control_call(
        self, operation: str, *, read_timeout: float | None = None, **params: Any
    ) -> dict[str, Any]:
        """One control-plane call in a worker thread, with ``agent_core.request`` telemetry."""
        meta = _request_meta(operation)

        def call() -> dict[str, Any]:
            client, owned = self.clients.control(read_timeout=read_timeout)
            try:
                result: dict[str, Any] = getattr(client, operation)(**params)
                return result
            finally:
                if owned:
                    client.close()

        secrets = self.clients.secrets()
        with telemetry.span("agent_core.request", meta) as extra:
            failure: tuple[ManagedLoopError, Exception] | None = None
            try:
                result = await anyio.to_thread.run_sync(call)
            except Exception as exc:
                mapped = map_error(exc, operation=operation, secrets=secrets)
                extra["status"] = mapped.context.get("status")
                failure = (mapped, exc)
            if failure is not None:
                raise_mapped(*failure, secrets)  # outside the except: no __context__ leak
            extra["status"] = result.get("ResponseMetadata", {}).get("HTTPStatusCode", 200)
            return result

    # -------------------------------------------------------------- commands

    async def run_command(
        self,
        command: str,
        *,
        session_id: str,
        harness_arn: str | None = None,
        timeout: int | None = None,
        on_output: OutputCallback | None = None,
        idle_timeout: float = DEFAULT_COMMAND_IDLE_TIMEOUT,
        qualifier: str | None = None,
    ) -> CommandResult:
        """Run a shell command in the session's microVM (``InvokeAgentRuntimeCommand``).

        stdout/stderr stream to ``on_output(stream, text)`` (``stream`` is ``"stdout"`` or
        ``"stderr"``) as they arrive. A non-zero exit is a result, not an error; an
        exception frame raises ``HostStreamError(code="command_stream_error")``; silence
        longer than ``idle_timeout`` raises ``TransportError(code="stream_idle_timeout")``.
        ``timeout`` is the server-side cap in seconds (service default 300, max 3600).
        """
        arn = harness_arn or self.harness_arn
        if arn is None:
            raise InvalidOptionsError("run_command needs a harness_arn", option="harness_arn")
        harness_id_of(arn)
        validate_runtime_session_id(session_id, option="session_id")
        if not isinstance(command, str) or not 1 <= len(command) <= 65536:
            raise InvalidOptionsError("command must be 1-65536 characters", option="command")
        _validate.integer("timeout", timeout, minimum=1, allow_none=True)
        _validate.duration("idle_timeout", idle_timeout, allow_none=False)
        if qualifier is not None:
            validate_endpoint_name(qualifier)
        body: dict[str, Any] = {"command": command}
        if timeout is not None:
            body["timeout"] = timeout
        params: dict[str, Any] = {
            "agentRuntimeArn": arn,
            "runtimeSessionId": session_id,
            "body": body,
        }
        if qualifier is not None:
            params["qualifier"] = qualifier
        stdout: list[str] = []
        stderr: list[str] = []
        exit_code: int | None = None
        stream = stream_call(
            self.clients,
            "invoke_agent_runtime_command",
            params,
            idle_timeout=idle_timeout,
            stream_code="command_stream_error",
            span_meta=_request_meta("invoke_agent_runtime_command"),
        )
        self.clients.http.acquire()
        try:
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    body_ev = event.get("chunk", event)
                    delta = body_ev.get("contentDelta")
                    if isinstance(delta, Mapping):
                        for key, sink in (("stdout", stdout), ("stderr", stderr)):
                            text = delta.get(key)
                            if isinstance(text, str) and text:
                                sink.append(text)
                                if on_output is not None:
                                    value = on_output(key, text)
                                    if inspect.isawaitable(value):
                                        await value
                    stop = body_ev.get("contentStop")
                    if isinstance(stop, Mapping):
                        code = stop.get("exitCode")
                        exit_code = code if isinstance(code, int) else None
        finally:
            await self.clients.http.release()
        return CommandResult(stdout="".join(stdout), stderr="".join(stderr), exit_code=exit_code)

    def artifact_store(
        self, session_id: str, *, mount: str = "/mnt/data", harness_arn: str | None = None
    ) -> Any:
        """A session-storage :class:`~managedloop.ArtifactStore` reached through commands."""
        from managedloop.providers.agentcore._artifacts import SessionStorage

        return SessionStorage(self, session_id=session_id, mount=mount, harness_arn=harness_arn)

    # -------------------------------------------------------------- provisioning

    async def provision(self, spec: Any, *, environment: Any = None, **options: Any) -> Any:
        """Create (or adopt) a harness for ``spec`` and wait for it and its endpoint."""
        from managedloop.providers.agentcore._provision import provision

        return await provision(self, spec, environment=environment, **options)

    async def teardown(self, handle: Any, **options: Any) -> Any:
        """Delete a provisioned harness (asynchronous on AWS: it goes DELETING first)."""
        from managedloop.providers.agentcore._provision import teardown

        return await teardown(self, handle, **options)


class _Flight:
    """One in-flight GetHarness that concurrent first uses wait on."""

    __slots__ = ("done", "error", "info")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.info: dict[str, Any] | None = None
        self.error: ManagedLoopError | None = None


def _tools_unavailable(hid: str, exc: ManagedLoopError) -> ProviderError:
    return ProviderError(
        f"cannot read harness {hid} to merge its tools with the client's ({exc.code}); "
        "pass harness_tools=[...] (or []) to skip GetHarness",
        code="harness_tools_unavailable",
        cause=exc.code,
    )


def _request_meta(operation: str) -> dict[str, Any]:
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


class _Connection(ConnectionBase):
    """One runtime session on one harness."""

    def __init__(
        self,
        provider: BedrockAgentCore,
        *,
        harness_arn: str,
        session_id: str,
        resumed: bool,
        tools: list[dict[str, Any]] | None,
        allowed_tools: list[str] | None,
        system_prompt: str | None,
    ) -> None:
        super().__init__()
        self.provider = provider
        self.harness_arn = harness_arn
        self.session_id = session_id
        self.resumed = resumed
        self._last_events: list[RawEvent] = []
        self._parsed: _converse.ParsedTurn | None = None
        self._inflight: set[Callable[[], None]] = set()
        self._http_held = False  # this loop's HTTP session, acquired on the first turn
        p = provider
        params: dict[str, Any] = {"harnessArn": harness_arn, "runtimeSessionId": session_id}
        if p.endpoint_name is not None:
            params["qualifier"] = p.endpoint_name
        if p.runtime_user_id is not None:
            params["runtimeUserId"] = p.runtime_user_id
        if tools is not None:
            params["tools"] = tools
        if allowed_tools is not None:
            params["allowedTools"] = allowed_tools
        if system_prompt:
            params["systemPrompt"] = [{"text": system_prompt}]
        if p.model is not None:
            params["model"] = (
                {"bedrockModelConfig": {"modelId": p.model}}
                if isinstance(p.model, str)
                else dict(p.model)
            )
        for key, value in (
            ("timeoutSeconds", p.timeout_seconds),
            ("maxIterations", p.max_iterations),
            ("maxTokens", p.max_tokens),
            ("actorId", p.actor_id),
        ):
            if value is not None:
                params[key] = value
        self._base = params

    def __repr__(self) -> str:
        return f"AgentCoreConnection(session_id={self.session_id!r})"

    def request_params(self, input: TurnInput) -> dict[str, Any]:
        """The ``invoke_harness`` keyword arguments for one turn input."""
        if isinstance(input, UserMessage):
            messages = _converse.user_message(input.text)
        elif isinstance(input, ToolResults):
            parsed = (
                self._parsed if self._parsed is not None else _converse.parse(self._last_events)
            )
            content = parsed.assistant_content
            messages = _converse.resume_messages(input.tool_uses, input.results, content)
        elif isinstance(input, DefineOutcome | RawInput):
            raise InvalidOptionsError(
                "the agentcore host takes no outcomes or raw events", code="unsupported"
            )
        else:  # pragma: no cover - exhaustive over TurnInput
            raise InvalidOptionsError(f"unknown turn input {input!r}")
        return {**self._base, "messages": messages}

    async def turn(self, input: TurnInput) -> AsyncIterator[TurnItem]:
        """One InvokeHarness call (retried with :data:`RESTART`); its envelopes, a
        :class:`TextDelta` after each text delta envelope, then its :class:`TurnResult`,
        from one parse that also builds the next resume (nothing is parsed twice)."""
        params = self.request_params(input)
        p = self.provider
        if not self._http_held:
            p.clients.http.acquire()
            self._http_held = True
        attempts = 1 + p.invoke_retries
        meta = _request_meta("invoke_harness")
        last: ManagedLoopError | None = None
        events: list[RawEvent] = []  # this attempt's, as yielded
        policy = _retry.Policy(
            retries=p.invoke_retries, base=p.retry_backoff, cap=MAX_RETRY_BACKOFF
        )
        for attempt in range(attempts):
            if attempt:
                assert last is not None  # set by the failed attempt before this one
                delay = policy.wait(last, attempt - 1)  # Retry-After, else jittered backoff
                logger.warning(
                    "agentcore invoke retry session_id=%s attempt=%d/%d reason=%s",
                    self.session_id,
                    attempt + 1,
                    attempts,
                    last.code,
                )
                await _retry.sleep(delay)
                if events:  # the failed attempt already yielded some: the loop drops them
                    yield RESTART
            events = []
            stopped = False
            stream = stream_call(
                p.clients,
                "invoke_harness",
                params,
                idle_timeout=p.idle_timeout,
                span_meta=meta,
                inflight=self._inflight,
            )
            check = _converse.StreamCheck()  # a frame delivered twice is named, not merged
            try:
                async with contextlib.aclosing(stream) as live:
                    async for event in live:
                        check.feed(event)
                        events.append(event)
                        if "messageStop" in event:
                            stopped = True
                        yield event
                        if (text := _converse.text_delta(event)) is not None:
                            yield TextDelta(text)
            except ManagedLoopError as exc:
                if not retryable(exc):
                    raise
                last = exc
                continue
            if stopped:
                self._last_events = events
                self._parsed = parsed = _converse.parse(events)
                yield _converse.turn_result(parsed, events)
                return
            last = TransportError(
                f"the InvokeHarness stream ended without messageStop after {attempt + 1} "
                f"attempt(s) (truncated)",
                code="early_termination",
                attempts=attempt + 1,
            )
        assert last is not None
        if last.code != "early_termination":
            last.context.setdefault("attempts", attempts)
        raise last

    async def aclose(self) -> None:
        """Abort an invoke still streaming (a consumer torn down between two events) and
        release the loop's HTTP session (idempotent)."""
        for abort in list(self._inflight):
            abort()
        if self._http_held:
            self._http_held = False
            await self.provider.clients.http.release()


def tool_definitions(tools: Sequence[ToolDefinition]) -> list[dict[str, Any]]:
    return [_converse.inline_function(t) for t in tools]
