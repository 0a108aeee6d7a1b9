"""``ClaudeManagedAgents``: the Claude Managed Agents loop host on the ``anthropic`` SDK.

The provider is configured once (a client, an agent, an environment) and opens one
:class:`~managedloop.providers.claude._connection.ClaudeConnection` per session. Its
provisioning and Files API methods hold a client lease and delegate to
:mod:`~managedloop.providers.claude._provision` and :mod:`~managedloop.providers.claude._files`.

What ``agent=`` means at run time:

* a :class:`ClaudeHandle` (or its dict, or ``{"agent_id": ...}``), or a raw ``agent_...``
  id: that agent is used;
* an :class:`~managedloop.AgentSpec`: the agent the provider was built with (``agent=`` on
  the constructor) if any; otherwise the spec is provisioned on the fly through the
  ``managedloop.provision`` cache (so it is created once per process and reused), with the
  provider's ``environment=`` (or the default cloud environment). ``ml.teardown`` releases
  it like any provisioned handle.

Provisioned names are ``<spec.name>_<digest[:8]>``, so two different specs with one base
name never collide and a changed spec gets a new agent rather than mutating the old one;
the spec's full digest is also stored in the agent's ``metadata`` (``managedloop_digest``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

import anyio

from managedloop import _validate
from managedloop.config import MISSING
from managedloop.errors import (
    APIStatusError,
    AuthenticationError,
    InvalidOptionsError,
    ManagedLoopError,
    ProviderError,
    UnsupportedError,
)
from managedloop.hosts import OpenRequest
from managedloop.providers.claude import _files, _provision
from managedloop.providers.claude._api import (
    Api,
    ClientSettings,
    ClientSource,
    Lease,
    settings,
)
from managedloop.providers.claude._artifacts import ClaudeArtifactStore
from managedloop.providers.claude._connection import (
    RESULT_ECHO_TIMEOUT,
    ClaudeConnection,
    StreamOptions,
)
from managedloop.providers.claude._ids import ID_PATTERN, check_id
from managedloop.providers.claude._provision import (
    DEFAULT_ENVIRONMENT_CONFIG,
    DEFAULT_MODEL,
    ClaudeHandle,
    coerce_environment,
    id_of,
    normalize_model_id,
)
from managedloop.providers.claude._sandbox_tools import BUILTIN_TOOL_NAMES
from managedloop.providers.claude._selfhosted import SandboxWorker, SelfHostedEnvironment
from managedloop.provisioning.specs import AgentSpec

if TYPE_CHECKING:
    import anthropic

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
logger = logging.getLogger("managedloop.providers.claude")


def _leased(fn: F) -> F:
    """Hold a client lease for the call (see :class:`ClientSource`): provisioning and file
    calls are often made from ``*_sync`` wrappers on a fresh loop, and a provider-built
    client must be closed on the loop that used it."""

    @functools.wraps(fn)
    async def wrapper(self: ClaudeManagedAgents, *args: Any, **kwargs: Any) -> Any:
        client = self._clients.acquire()
        try:
            return await fn(self, *args, **kwargs)
        finally:
            with anyio.CancelScope(shield=True):
                await self._clients.release(client)

    return wrapper  # type: ignore[return-value]


__all__ = [
    "DEFAULT_ENVIRONMENT_CONFIG",
    "DEFAULT_MODEL",
    "ClaudeHandle",
    "ClaudeManagedAgents",
    "normalize_model_id",
]

STREAM_IDLE_TIMEOUT = 1800.0  # seconds; the reference's 30 min: long tool-free thinking is normal
MAX_RECONNECTS = 10  # consecutive failed reconnects (≈ 4 min of backoff at the default base)


class ClaudeManagedAgents:
    """Claude Managed Agents as a loop host.

    ``client`` is an ``anthropic.AsyncAnthropic``; without one, a client is built from
    configuration (``api_key`` or ``bearer_token_file``, ``base_url``...; see
    :mod:`managedloop.config`). ``agent`` / ``environment`` take a :class:`ClaudeHandle`
    (or its dict) or raw ids; ``session_id`` reattaches to an existing session.

    Client ownership (see :class:`~managedloop.providers.claude._api.ClientSource`): a
    ``client=`` you pass is never closed; you own it (``async with client:``) and it serves
    one event loop. ``run_sync`` / ``*_sync`` run each call on a throwaway loop, served by a
    copy of your client with its own HTTP pool, closed with the call. Without ``client=``
    the provider builds one client per loop from config and closes it when the last
    session or call on that loop ends (``async with provider:`` keeps it open across
    sessions).

    Options are checked at construction, before any request: an unknown keyword raises
    ``InvalidOptionsError`` listing the accepted ones; a wrong type, a negative, NaN or
    infinite duration (``stream_idle_timeout``, ``reconnect_backoff``,
    ``result_echo_timeout``, ``receive_timeout``) is ``invalid_opts``; a ``base_url`` with
    credentials or without an http(s) host is refused (without echoing it). Session,
    agent, environment and file ids must be in the API's id alphabet (see
    :mod:`~managedloop.providers.claude._ids`): ``invalid_session_id``,
    ``invalid_agent_id``, ``invalid_environment_id``, ``invalid_file_id``.
    ``session_budget`` (``{"type": "limit", "max_list_cost": {"amount": "2500",
    "currency": "USD"}}``, amounts in minor units) caps each session's list cost; a
    session that reaches it ends ``terminated`` with ``reason="budget_reached"``.
    ``result_echo_timeout`` (default 30 s) bounds how long a sent tool result may go
    unechoed before the history is checked and a lost result re-sent (see
    :mod:`~managedloop.providers.claude._connection`).
    """

    name: ClassVar[str] = "claude"
    supports_outcomes: ClassVar[bool] = True
    supports_raw_events: ClassVar[bool] = True

    def __init__(
        self,
        client: anthropic.AsyncAnthropic | None = None,
        *,
        agent: Any = None,
        environment: Any = None,
        session_id: str | None = None,
        api_key: Any = MISSING,
        bearer_token_file: Any = MISSING,
        base_url: Any = MISSING,
        beta: Any = MISSING,
        files_beta: Any = MISSING,
        anthropic_version: Any = MISSING,
        receive_timeout: Any = MISSING,
        max_retries: int = 2,
        stream_idle_timeout: float = STREAM_IDLE_TIMEOUT,
        reconnect_backoff: float = 0.5,
        max_reconnects: int = MAX_RECONNECTS,
        result_echo_timeout: float = RESULT_ECHO_TIMEOUT,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        session_title: str | None = None,
        session_metadata: Mapping[str, str] | None = None,
        session_budget: Mapping[str, Any] | None = None,
        **unknown: Any,
    ) -> None:
        try:
            import anthropic
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                "ClaudeManagedAgents needs the anthropic SDK: pip install 'managedloop[claude]'"
            ) from exc
        # Every option is checked here, before any request: a bad one is an
        # InvalidOptionsError naming it (never a TypeError, never a surprise at run time).
        _validate.no_unknown_keywords("ClaudeManagedAgents", unknown, _ACCEPTED)
        if client is not None and not isinstance(client, anthropic.AsyncAnthropic):
            raise InvalidOptionsError(
                f"client must be an anthropic.AsyncAnthropic, got {type(client).__name__}",
                option="client",
            )
        _validate.integer("max_retries", max_retries)
        _validate.integer("max_reconnects", max_reconnects)
        for name, seconds, zero in (
            ("stream_idle_timeout", stream_idle_timeout, False),
            ("reconnect_backoff", reconnect_backoff, True),
            ("result_echo_timeout", result_echo_timeout, False),
        ):
            _validate.duration(name, seconds, allow_none=False, allow_zero=zero)
        if sleep is not None and not callable(sleep):
            raise InvalidOptionsError("sleep must be an async callable or None", option="sleep")
        if session_title is not None:
            _validate.text("session_title", session_title, allow_empty=True)
        if session_metadata is not None and not (
            isinstance(session_metadata, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in session_metadata.items())
        ):
            raise InvalidOptionsError(
                "session_metadata must map strings to strings", option="session_metadata"
            )
        if receive_timeout is not MISSING:
            _validate.duration("receive_timeout", receive_timeout, allow_none=False)
        self._settings: ClientSettings = settings(
            api_key=api_key,
            bearer_token_file=bearer_token_file,
            base_url=base_url if client is None else getattr(client, "base_url", base_url),
            beta=beta,
            files_beta=files_beta,
            anthropic_version=anthropic_version,
            receive_timeout=receive_timeout,
            need_auth=client is None,
        )
        self._clients = ClientSource(self._settings, client=client, max_retries=max_retries)
        self.agent = agent
        self.agent_id = id_of(agent, "agent_id")
        if not isinstance(agent, str):
            id_of(agent, "environment_id")  # a handle's environment id is checked up front too
        if agent is not None and self.agent_id is None and not isinstance(agent, AgentSpec):
            raise InvalidOptionsError(
                "agent= takes a ClaudeHandle, its dict, an agent id or an AgentSpec",
                option="agent",
            )
        self.environment = environment
        self.self_hosted = environment if isinstance(environment, SelfHostedEnvironment) else None
        """The self-hosted environment this process serves in-process (``_selfhosted``)."""
        self.environment_id = id_of(environment, "environment_id")
        self._environment_spec = (
            None if self.environment_id is not None else coerce_environment(environment)
        )
        self.session_id = None if session_id is None else check_id("session", session_id)
        self.session_title = session_title
        self.session_metadata = dict(session_metadata or {})
        self.session_budget = _provision.check_budget(session_budget)
        self._stream_options = StreamOptions(
            backoff=float(reconnect_backoff),
            max_reconnects=max_reconnects,
            idle_timeout=float(stream_idle_timeout),
            sleep=sleep,
            result_echo_timeout=float(result_echo_timeout),
        )

    def __repr__(self) -> str:
        return (
            f"ClaudeManagedAgents(base_url={self._settings.base_url!r}, "
            f"agent_id={self.agent_id!r}, environment_id={self.environment_id!r})"
        )

    def cache_identity(self) -> tuple[str, str, str]:
        """Provision-cache key: the endpoint and the credential (a one-way fingerprint, never
        the secret), so providers for one account share provisioned agents and two
        accounts on one endpoint never receive each other's handles."""
        return ("claude", self._settings.base_url, self._credential_fingerprint())

    def _credential_fingerprint(self) -> str:
        s = self._settings
        user = self._clients.user_client
        if user is not None:
            secret = getattr(user, "api_key", None) or getattr(user, "auth_token", None)
        elif s.api_key is not None:
            secret = s.api_key.reveal()
        else:
            return f"bearer-file:{os.path.abspath(s.bearer_token_file or '')}"
        if not isinstance(secret, str) or not secret:
            return "anonymous"
        return "key:" + hashlib.sha256(secret.encode()).hexdigest()[:16]

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The SDK client for the running event loop: the one passed as ``client=`` (the
        caller owns and closes it; inside a ``*_sync`` call, a per-call copy of it), or one
        built from config per event loop and closed when the last session or call on that
        loop ends (or at ``aclose()``)."""
        return self._clients.current()

    def _api(self, metadata: Mapping[str, Any] | None = None) -> Api:
        return Api(self.client, self._settings, caller=metadata)

    async def __aenter__(self) -> Self:
        """Keep a config-built client (and its connection pool) open across sessions."""
        self._clients.pin()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client if this provider built it (a passed ``client=`` is yours)."""
        await self._clients.unpin()

    # -- sessions -----------------------------------------------------------------------
    async def _resolve_agent(self, request: OpenRequest) -> tuple[str, str]:
        agent_id = id_of(request.agent, "agent_id") if request.spec is None else None
        # A bare agent id names no environment (only a handle or its dict carries one).
        environment_id = (
            id_of(request.agent, "environment_id")
            if request.spec is None and not isinstance(request.agent, str)
            else None
        )
        if request.spec is None and agent_id is None:
            raise InvalidOptionsError(
                "agent= takes an AgentSpec, a ClaudeHandle, its dict or an agent id",
                option="agent",
            )
        if request.environment is not None:  # run(environment=...) wins over the rest
            environment_id = id_of(request.environment, "environment_id")
            if environment_id is None:
                raise InvalidOptionsError(
                    "environment= takes an environment handle, its dict or an environment id",
                    option="environment",
                )
        if agent_id is None:
            agent_id = self.agent_id
        if environment_id is None:
            environment_id = self.environment_id
        if agent_id is None and request.spec is not None:
            from managedloop.provisioning.facade import provision

            handle = await provision(self, request.spec, environment=self._environment_spec)
            agent_id, environment_id = handle.agent_id, environment_id or handle.environment_id
        if environment_id is None:
            raise InvalidOptionsError(
                "no environment: pass environment= (a handle or id) to ClaudeManagedAgents, "
                "or provision the agent with ml.provision(provider, spec, environment=...)",
                option="environment",
            )
        assert agent_id is not None
        return agent_id, environment_id

    async def open(self, request: OpenRequest) -> ClaudeConnection:
        lease = self._clients.lease()
        try:
            return await self._open(request, lease)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await lease.release()
            raise

    async def _open(self, request: OpenRequest, lease: Lease) -> ClaudeConnection:
        """Open a session; the connection owns ``lease`` from its creation on."""
        api = Api(lease.client, self._settings, caller=request.metadata)
        # An empty resume id is an error (invalid_session_id), never "start a new session".
        session_id = request.session_id if request.session_id is not None else self.session_id
        if session_id is not None:
            check_id("session", session_id)
            conn = ClaudeConnection(
                api,
                session_id,
                options=self._stream_options,
                metadata=request.metadata,
                resumed=True,
                lease=lease,
                replay_from=request.replay_from,
            )
            try:
                await conn.start()
            except APIStatusError as exc:
                await conn.aclose()
                if exc.status == 404 and not isinstance(exc, AuthenticationError):
                    raise InvalidOptionsError(
                        f"no session {session_id!r} to reattach to",
                        code="invalid_session_id",
                        session_id=session_id,
                    ) from exc
                raise
            except BaseException:
                await conn.aclose()
                raise
            # A reattached session on the self-hosted environment this process serves gets
            # its worker back (its environment is not re-read: a worker for another
            # environment's session finds no item of it and stays idle).
            resumed = self._sandbox_worker(request, lease.client, None)
            if resumed is not None:
                self._serve_sandbox(resumed, conn)
            return conn
        agent_id, environment_id = await self._resolve_agent(request)
        sandbox = self._sandbox_worker(request, lease.client, environment_id)
        if sandbox is not None:
            await sandbox.check_key()  # a refused key fails here, before a session waits
        body: dict[str, Any] = {"agent": agent_id, "environment_id": environment_id}
        if self.session_title is not None:
            body["title"] = self.session_title
        if self.session_metadata:
            body["metadata"] = self.session_metadata
        if self.session_budget is not None:
            body["budget"] = self.session_budget
        try:
            session = await api.call(
                "post",
                "/v1/sessions",
                lambda: api.client.beta.sessions.create(
                    **body, extra_headers=api.headers, timeout=self._settings.receive_timeout
                ),
            )
        except AuthenticationError:
            raise
        except ManagedLoopError as exc:
            raise ProviderError(
                f"could not create a session: {exc.message}",
                code="create_session_failed",
                reason=exc.code,
                status=exc.context.get("status"),
                body=exc.context.get("body"),
            ) from exc
        sid = getattr(session, "id", None)
        if not isinstance(sid, str) or ID_PATTERN.fullmatch(sid) is None:
            # The id goes into every later URL path: a server's odd id is not followed.
            raise ProviderError(
                "create session returned no well-formed session id",
                code="unexpected_create_session_response",
                response=repr(sid)[:200],
            )
        if request.spec is not None:
            _check_tools(request, session)
        conn = ClaudeConnection(
            api, session.id, options=self._stream_options, metadata=request.metadata, lease=lease
        )
        try:
            await conn.start()
            if sandbox is not None:
                self._serve_sandbox(sandbox, conn)
        except BaseException:
            await conn.aclose()
            raise
        return conn

    def _sandbox_worker(
        self, request: OpenRequest, client: anthropic.AsyncAnthropic, environment_id: str | None
    ) -> SandboxWorker | None:
        """The in-process worker of a self-hosted environment this process serves (see
        ``_selfhosted``), or ``None``; ``environment_id`` is the session's (``None``: not
        known, a reattach). Checked before the session is created."""
        options = (
            request.environment
            if isinstance(request.environment, SelfHostedEnvironment)
            else self.self_hosted
        )
        if options is None or environment_id not in (None, options.environment_id):
            return None
        clash = sorted(BUILTIN_TOOL_NAMES & {d.name for d in request.tools})
        if clash:
            # The worker dispatches by name: a custom tool named like a built-in one would
            # be answered twice (by the worker and by the loop).
            raise InvalidOptionsError(
                f"custom tools {clash} share a name with a built-in tool the self-hosted "
                "worker runs; rename them",
                code="tool_name_collision",
                option="tools",
            )
        secret = self._api_secret()
        return SandboxWorker(client, options, secrets=[secret] if secret else [])

    @staticmethod
    def _serve_sandbox(worker: SandboxWorker, conn: ClaudeConnection) -> None:
        """Run ``worker`` for the session until the connection closes."""
        assert conn.session_id is not None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError as exc:  # pragma: no cover - a trio loop
            raise UnsupportedError(
                "the in-process self-hosted worker runs on asyncio", code="unsupported"
            ) from exc
        # Level-triggered cancellation (an anyio scope), not one task.cancel(): the SDK
        # shields the item's stop, and a one-shot cancel landing inside that shield would be
        # spent there, leaving the worker polling and the close waiting on it.
        scope = anyio.CancelScope()
        session_id = conn.session_id

        async def serve() -> None:
            with scope:
                await worker.serve_session(session_id)

        task = loop.create_task(serve())

        async def stop() -> None:
            scope.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

        conn.closers.append(stop)

    def _api_secret(self) -> str | None:
        """The organisation credential in use (kept out of every tool subprocess)."""
        user = self._clients.user_client
        if user is not None:
            secret = getattr(user, "api_key", None) or getattr(user, "auth_token", None)
            return secret if isinstance(secret, str) else None
        return self._settings.api_key.reveal() if self._settings.api_key is not None else None

    # -- provisioning (see _provision) ---------------------------------------------------
    @_leased
    async def provision(
        self,
        spec: AgentSpec,
        *,
        environment: Any = None,
        name: str | None = None,
        **options: Any,
    ) -> ClaudeHandle:
        """Create an agent (and an environment) for ``spec``; roll the agent back if the
        environment fails. Use ``ml.provision`` for the cached create-or-reuse."""
        return await _provision.provision(
            self._api(), spec, environment=environment, name=name, **options
        )

    @contextlib.asynccontextmanager
    async def lifecycle(self) -> AsyncIterator[_provision.ClaudeLifecycle]:
        """This host for the lifecycle verbs (``ml.ensure_agent``, ``ml.prune_agents``...),
        holding a client lease while they run."""
        client = self._clients.acquire()
        try:
            account = _provision.account_of(self.cache_identity())
            yield _provision.ClaudeLifecycle(self._api(), account)
        finally:
            with anyio.CancelScope(shield=True):
                await self._clients.release(client)

    @_leased
    async def teardown(self, handle: Any, **options: Any) -> dict[str, str]:
        """Archive the handle's agent and (if provisioning made it) its environment.

        Both are attempted even if one fails. Returns ``{"agent": "ok", "environment":
        "ok"}`` (``"skipped"`` for an environment the handle does not own); if either failed
        raises ``ProvisioningError(code="teardown_failed")`` with each side's outcome in
        ``context`` (and the handle stays cached).
        """
        return await _provision.teardown(self._api(), handle, **options)

    # -- files (see _files) ---------------------------------------------------------------
    @_leased
    async def upload_file(
        self,
        file: str | os.PathLike[str] | bytes | tuple[str, bytes],
        *,
        filename: str | None = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        """Upload a file (a path, ``bytes`` with ``filename=``, or ``(name, bytes)``)."""
        return await _files.upload(self._api(), file, filename=filename, content_type=content_type)

    @_leased
    async def attach_file(
        self, session_id: str, file_id: str, *, mount_path: str | None = None
    ) -> dict[str, Any]:
        """Mount an uploaded file into a session (default ``/mnt/session/uploads/<id>``)."""
        return await _files.attach(self._api(), session_id, file_id, mount_path=mount_path)

    @_leased
    async def list_files(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Every file (all pages); ``session_id`` scopes to that session's files."""
        return await _files.list_files(self._api(), session_id)

    @_leased
    async def download_file(self, file_id: str) -> bytes:
        return await _files.download(self._api(), file_id)

    @_leased
    async def delete_file(self, file_id: str) -> None:
        await _files.delete(self._api(), file_id)

    def artifact_store(self, session_id: str, **options: Any) -> ClaudeArtifactStore:
        """The Files-API artifact store of one session (for ``ml.Artifacts.for_session``)."""
        return ClaudeArtifactStore(self, session_id, **options)


_ACCEPTED = tuple(
    name
    for name in inspect.signature(ClaudeManagedAgents.__init__).parameters
    if name not in ("self", "unknown")
)
"""The constructor's keywords (an unknown one is refused with this list)."""


def _check_tools(request: OpenRequest, session: Any) -> None:
    """Compare the session's agent (the server's snapshot) with the spec run against it.

    Why: with ``agent=spec`` and a provider bound to a provisioned agent, the spec's tool
    implementations serve the agent's calls. A custom tool the agent may call but the spec
    lacks could only ever be answered with an "unknown tool" error, and a spec tool the
    agent lacks is never called: both mean the spec and the agent drifted apart (a changed
    spec needs a new ``ml.provision``). So a difference in tool *names* raises
    ``InvalidOptionsError(code="agent_tools_mismatch")`` before anything is sent; the same
    names with a different description or schema are logged as a warning (the tool still
    validates its own input). The session was created and stays idle (id in the context).
    """
    try:
        snapshot = session.model_dump(mode="json").get("agent") or {}
    except AttributeError:  # pragma: no cover - the SDK always returns a model
        return
    raw_tools = snapshot.get("tools")
    if not isinstance(raw_tools, list):
        return  # no snapshot to compare with
    agent_tools = {
        t["name"]: t
        for t in raw_tools
        if isinstance(t, Mapping) and t.get("type") == "custom" and isinstance(t.get("name"), str)
    }
    spec_tools = {d.name: d for d in request.tools}
    missing = sorted(set(agent_tools) - set(spec_tools))
    extra = sorted(set(spec_tools) - set(agent_tools))
    if missing or extra:
        raise InvalidOptionsError(
            "the agent's custom tools differ from the AgentSpec's: agent-only "
            f"{missing}, spec-only {extra}; provision the spec (ml.provision) or run with "
            "the agent's handle",
            code="agent_tools_mismatch",
            option="agent",
            agent_only=missing,
            spec_only=extra,
            session_id=getattr(session, "id", None),
        )
    for name, definition in spec_tools.items():
        tool = agent_tools[name]
        same_text = (tool.get("description") or "") == (definition.description or "")
        if tool.get("input_schema") != definition.input_schema or not same_text:
            logger.warning(
                "tool %r differs between the agent and the AgentSpec (description or input "
                "schema); the spec's implementation serves it",
                name,
            )
