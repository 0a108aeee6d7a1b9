"""The Bedrock AgentCore harness host: options, clients, sessions, commands, provisioning.

:class:`BedrockAgentCore` holds what is configured once (the harness, the budgets, the
botocore clients) and opens one :class:`~._connection.AgentCoreConnection` per session;
the turn itself (one ``InvokeHarness``, retried when cut short) lives there. The
provider also reads a harness's own tools once (``GetHarness``) so that client tools can be
merged with them, runs control-plane calls (:meth:`BedrockAgentCore.control_call`), and
hands commands, session storage and provisioning to their modules.

Service rules the provider applies (``agentcore-wire.md``, reference §3.3-3.7):

* the harness keeps the conversation server-side per runtime session id (33-100 chars,
  ``[a-zA-Z0-9][a-zA-Z0-9-_]*``, checked in :mod:`._ids`);
* a per-invocation ``tools`` list *replaces* the harness's tools, so client tools are merged
  with the harness's own (read once with ``GetHarness``);
* ``endpoint_name`` travels as ``qualifier``; the per-invocation budgets
  (``timeoutSeconds``, ``maxIterations``, ``maxTokens``) bound cost *server-side*. A client
  timeout closes our stream but does not stop the harness (see docs/agentcore.md).

Import direction: this module imports every other module of the package, and none of them
imports it back; they reach the provider through small Protocols
(:class:`~._connection.InvokeSettings`, :class:`~._waits.ControlPlane`,
:class:`~._artifacts.CommandRunner`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar

import anyio

from managedloop import _validate, telemetry
from managedloop.config import MISSING
from managedloop.errors import InvalidOptionsError, ManagedLoopError, ProviderError
from managedloop.hosts import OpenRequest
from managedloop.providers.agentcore import _commands, _converse, _provision, _versions
from managedloop.providers.agentcore._artifacts import SessionStorage
from managedloop.providers.agentcore._clients import Clients, request_meta
from managedloop.providers.agentcore._commands import DEFAULT_COMMAND_IDLE_TIMEOUT, OutputCallback
from managedloop.providers.agentcore._connection import AgentCoreConnection
from managedloop.providers.agentcore._errors import map_error, raise_mapped
from managedloop.providers.agentcore._harness_body import CLAUDE_ONLY, model_of
from managedloop.providers.agentcore._harness_config import (
    INVOKE_KEYS,
    check_shape,
    harness_settings,
    host_tools,
)
from managedloop.providers.agentcore._ids import (
    arn_of,
    harness_id_of,
    new_runtime_session_id,
    validate_endpoint_name,
    validate_runtime_session_id,
)
from managedloop.providers.agentcore._lifecycle import AgentCoreLifecycle
from managedloop.providers.agentcore._teardown import teardown
from managedloop.provisioning.specs import AgentSpec, refuse_fields
from managedloop.results import CommandResult

__all__ = ["BedrockAgentCore"]

DEFAULT_IDLE_TIMEOUT = 300.0  # seconds of silence between chunks; a turn may last longer
DEFAULT_INVOKE_RETRIES = 2  # 3 attempts: transient drops are common on long streams, but each
# retry re-runs a stateful turn, so keep it small
DEFAULT_RETRY_BACKOFF = 0.5  # seconds, doubled per retry (capped in _connection): drops are blips

# The keywords botocore's ``create_client`` (and boto3's ``Session.client``) take, besides
# the ones this constructor names itself (region_name, endpoint_url, the keys, config):
# they go to botocore untouched. Anything else is refused here, not at run time.
_BOTOCORE_CLIENT_KEYWORDS = frozenset({"api_version", "use_ssl", "verify", "aws_account_id"})

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
    wrong type, a NaN/infinite duration, a region that is not ``[a-z0-9-]+``, or an
    ``endpoint_url``/``control_endpoint_url`` that is not http(s) with a host and a valid
    port, or that carries ``user:password@``, raises
    ``InvalidOptionsError(code="invalid_opts")`` here, before any request (a URL's
    userinfo is never shown).

    Redirects are never followed, on either plane: any 3xx answer raises
    ``APIStatusError(code="redirect_refused")`` with ``status`` and ``location_origin``
    (the target's origin only). The request carries the conversation and the signed
    headers, session token included, and a SigV4 signature covers the host and path.
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

    async def open(self, request: OpenRequest) -> AgentCoreConnection:
        if request.environment is not None:
            raise InvalidOptionsError(
                "a harness folds its environment in (ml.ensure_agent builds both): "
                "environment= is for Claude Managed Agents",
                option="environment",
            )
        arn = arn_of(request.agent) or self.harness_arn
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
        spec_params, server_tools = _spec_invoke(request.spec)
        if spec_params or server_tools:  # the spec's own part, before GetHarness is read
            check_shape(
                "bedrock-agentcore",
                "InvokeHarness",
                {
                    "harnessArn": arn,
                    "runtimeSessionId": sid,
                    "messages": _converse.user_message("-"),
                    **spec_params,
                    **({"tools": server_tools} if server_tools else {}),
                },
                option="spec",
            )
        tools: list[dict[str, Any]] | None = None
        allowed: list[str] | None = None
        if request.tools or server_tools:
            info = await self._harness_tools(arn)
            names = {t.get("name") for t in server_tools}
            kept = [t for t in info.get("tools") or [] if t.get("name") not in names]
            tools = _converse.merge_tools([*kept, *server_tools], request.tools)
            deployed = info.get("allowedTools")
            if deployed and "*" not in deployed:
                allowed = [*deployed, *(t.name for t in request.tools)]
        system = self.system_prompt
        if system is MISSING:
            system = request.spec.system_prompt if request.spec is not None else None
        params = {
            **spec_params,
            **self._session_params(arn, sid, tools=tools, allowed=allowed, system=system),
        }
        if "allowedTools" in spec_params:  # the spec's own list wins over the harness's
            params["allowedTools"] = spec_params["allowedTools"]
        check_shape(
            "bedrock-agentcore",
            "InvokeHarness",
            {**params, "messages": _converse.user_message("-")},
            option="spec",
        )
        pending = request.pending.host_state if request.pending is not None else None
        return AgentCoreConnection(
            self,
            params=params,
            resumed=resumed,
            pending_state=pending,
            tool_input_deltas=request.tool_input_deltas,
        )

    def _session_params(
        self,
        arn: str,
        sid: str,
        *,
        tools: list[dict[str, Any]] | None,
        allowed: list[str] | None,
        system: str | None,
    ) -> dict[str, Any]:
        """The ``invoke_harness`` keyword arguments every turn of one session shares."""
        params: dict[str, Any] = {"harnessArn": arn, "runtimeSessionId": sid}
        if self.endpoint_name is not None:
            params["qualifier"] = self.endpoint_name
        if self.runtime_user_id is not None:
            params["runtimeUserId"] = self.runtime_user_id
        if tools is not None:
            params["tools"] = tools
        if allowed is not None:
            params["allowedTools"] = allowed
        if system:
            params["systemPrompt"] = [{"text": system}]
        if self.model is not None:
            params["model"] = (
                {"bedrockModelConfig": {"modelId": self.model}}
                if isinstance(self.model, str)
                else dict(self.model)
            )
        for key, value in (
            ("timeoutSeconds", self.timeout_seconds),
            ("maxIterations", self.max_iterations),
            ("maxTokens", self.max_tokens),
            ("actorId", self.actor_id),
        ):
            if value is not None:
                params[key] = value
        return params

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

        def call() -> dict[str, Any]:
            client, owned = self.clients.control(read_timeout=read_timeout)
            try:
                result: dict[str, Any] = getattr(client, operation)(**params)
                return result
            finally:
                if owned:
                    client.close()

        return await self._botocore_call(operation, call, self.clients.control_endpoint_url)

    async def _botocore_call(
        self, operation: str, call: Callable[[], dict[str, Any]], endpoint: str | None
    ) -> dict[str, Any]:
        """``call()`` (one botocore request) in a worker thread, errors mapped and scrubbed."""
        meta = request_meta(operation)

        secrets = self.clients.secrets()
        with telemetry.span("agent_core.request", meta) as extra:
            failure: tuple[ManagedLoopError, Exception] | None = None
            try:
                result = await anyio.to_thread.run_sync(call)
            except Exception as exc:
                mapped = map_error(exc, operation=operation, secrets=secrets, endpoint=endpoint)
                extra["status"] = mapped.context.get("status")
                failure = (mapped, exc)
            if failure is not None:
                raise_mapped(*failure, secrets)  # outside the except: no __context__ leak
            extra["status"] = result.get("ResponseMetadata", {}).get("HTTPStatusCode", 200)
            return result

    async def stop_runtime_session(
        self, session_id: str, *, harness_arn: str | None = None, qualifier: str | None = None
    ) -> dict[str, Any]:
        """End a runtime session's microVM now (``StopRuntimeSession``) rather than at its
        idle timeout: its conversation and session storage go with it. Returns
        ``{"runtime_session_id", "status_code"}``."""
        validate_runtime_session_id(session_id, option="session_id")
        arn = harness_arn or self.harness_arn
        if arn is None:
            raise InvalidOptionsError(
                "stop_runtime_session needs harness_arn=", option="harness_arn"
            )
        harness_id_of(arn)
        params: dict[str, Any] = {"agentRuntimeArn": arn, "runtimeSessionId": session_id}
        if qualifier is not None:
            validate_endpoint_name(qualifier)
            params["qualifier"] = qualifier

        def call() -> dict[str, Any]:
            result: dict[str, Any] = self.clients.data().stop_runtime_session(**params)
            return result

        result = await self._botocore_call("stop_runtime_session", call, None)
        return {
            "runtime_session_id": result.get("runtimeSessionId", session_id),
            "status_code": result.get("statusCode"),
        }

    # -------------------------------------------------------------- versions and endpoints

    async def harness_versions(self, harness: Any = None) -> list[dict[str, Any]]:
        """Every version of a harness (default: this provider's), newest first as listed."""
        return await _versions.harness_versions(self, harness or self._own_harness())

    async def list_endpoints(self, harness: Any = None) -> list[dict[str, Any]]:
        return await _versions.list_endpoints(self, harness or self._own_harness())

    async def create_endpoint(
        self,
        name: str,
        *,
        harness: Any = None,
        target_version: str | None = None,
        description: str | None = None,
    ) -> dict[str, Any]:
        """Create endpoint ``name`` (pinned to ``target_version``, else the latest)."""
        return await _versions.change_endpoint(
            self,
            harness or self._own_harness(),
            name,
            create=True,
            target_version=target_version,
            description=description,
        )

    async def update_endpoint(
        self,
        name: str,
        *,
        target_version: str | None = None,
        description: str | None = None,
        harness: Any = None,
    ) -> dict[str, Any]:
        """Point endpoint ``name`` at ``target_version`` (or change its description)."""
        return await _versions.change_endpoint(
            self,
            harness or self._own_harness(),
            name,
            create=False,
            target_version=target_version,
            description=description,
        )

    async def delete_endpoint(self, name: str, *, harness: Any = None) -> dict[str, Any]:
        return await _versions.delete_endpoint(self, harness or self._own_harness(), name)

    def _own_harness(self) -> str:
        if self.harness_arn is None:
            raise InvalidOptionsError(
                "pass harness= (or build the provider with harness_arn=)", option="harness"
            )
        return self.harness_arn

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
        return await _commands.run_command(
            self.clients,
            command,
            session_id=session_id,
            harness_arn=harness_arn or self.harness_arn,
            timeout=timeout,
            on_output=on_output,
            idle_timeout=idle_timeout,
            qualifier=qualifier,
        )

    def artifact_store(
        self, session_id: str, *, mount: str = "/mnt/data", harness_arn: str | None = None
    ) -> Any:
        """A session-storage :class:`~managedloop.ArtifactStore` reached through commands."""
        return SessionStorage(self, session_id=session_id, mount=mount, harness_arn=harness_arn)

    # -------------------------------------------------------------- provisioning

    async def provision(self, spec: Any, *, environment: Any = None, **options: Any) -> Any:
        """Create (or adopt) a harness for ``spec`` and wait for it and its endpoint."""
        return await _provision.provision(self, spec, environment=environment, **options)

    async def teardown(self, handle: Any, **options: Any) -> Any:
        """Delete a provisioned harness (asynchronous on AWS: it goes DELETING first)."""
        return await teardown(self, handle, **options)

    @contextlib.asynccontextmanager
    async def lifecycle(self) -> AsyncIterator[AgentCoreLifecycle]:
        """This host for the lifecycle verbs (``ml.ensure_agent``, ``ml.prune_agents``...)."""
        account = hashlib.sha256(repr(self.cache_identity()).encode()).hexdigest()[:16]
        yield AgentCoreLifecycle(self, account)


def _spec_invoke(spec: AgentSpec | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What a spec run against an existing harness sends on every ``InvokeHarness`` (the
    provider's own options win): its model, ``timeout_seconds``, the per-invocation
    members of ``harness_config`` and its host tools. A field an invocation cannot carry
    is refused here, before any request (see docs/agentcore.md for the table)."""
    if spec is None:
        return {}, []
    refuse_fields(spec, "agentcore", CLAUDE_ONLY)
    settings = harness_settings(spec)
    only = sorted(set(settings) - set(INVOKE_KEYS))
    if only:
        raise InvalidOptionsError(
            f"harness_config {', '.join(only)} exist only on a harness, not per invocation: "
            "provision the spec (ml.ensure_agent or BedrockAgentCore.provision) and run the "
            "handle",
            code="unsupported_spec_field",
            option="harness_config",
            host="agentcore",
        )
    params: dict[str, Any] = dict(settings)
    model = model_of(spec)
    if model is not None:
        params["model"] = model
    if spec.timeout_seconds is not None:
        params["timeoutSeconds"] = spec.timeout_seconds
    return params, host_tools(spec)


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
