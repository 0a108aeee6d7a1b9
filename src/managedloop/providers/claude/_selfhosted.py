"""Self-hosted sandboxes: a worker that serves a ``self_hosted`` environment's work queue.

On a ``self_hosted`` environment the agent loop stays at Anthropic and the built-in tools
(``bash``, ``read``, ``write``, ``edit``, ``glob``, ``grep``) run on the user's machine: a
work item is queued for each session, a worker long-polls the queue, claims the item and
answers each built-in ``agent.tool_use`` with a ``user.tool_result``
(``host-surface-2026-12.md`` §1). Custom tools are unchanged: the process running the
session (``ml.run``) answers them, as on any environment.

What is the SDK's and what is ours:

* **Reused from** ``anthropic.lib.environments``: everything from the claim on.
  ``EnvironmentWorker.handle_item`` holds the lease (first heartbeat with
  ``NO_HEARTBEAT``, renewal every ``min(ttl/2, 30 s)`` echoing ``last_heartbeat``, a 412
  or a lapsed lease = lost, ``lease_extended: false`` = shut down), reads the session,
  downloads its skills, runs the SDK's session tool runner (attach, dispatch, post each
  result once, retries within the lease) and force-stops the item unless the lease was
  lost. The tools are the SDK's ``agent_toolset_20260401`` (see
  :mod:`~managedloop.providers.claude._sandbox_tools` for the limits we add). The
  bearer-only client copies are the SDK's own helper.
* **Ours**: the poll loop (:meth:`SandboxWorker._poll_once`). The SDK's poller offers no
  request timeout (a poll that hangs would hang the worker) and acks every item it sees,
  while an in-process worker must take only its own session's item: an item of another
  session is left un-acked, so the service offers it again to another worker after
  ``reclaim_older_than_ms``. And the drain (:meth:`SandboxWorker.run`): on a stop request
  no new item is taken, running tool calls finish and their results are posted, then the
  items are released.

The environment key is a :class:`~managedloop.config.Secret` from the moment it is given:
it is in no ``repr``, log line, error or telemetry attribute; it reaches the wire only as a
bearer header of the SDK's scoped client copies.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from managedloop import _validate
from managedloop.config import Secret
from managedloop.errors import InvalidOptionsError, ManagedLoopError
from managedloop.providers.claude._ids import check_id
from managedloop.providers.claude._sandbox_tools import (
    DEFAULT_MAX_OUTPUT,
    DEFAULT_TOOL_TIMEOUT,
    InFlight,
    builtin_tools,
    scrubbed_environment,
)

if TYPE_CHECKING:
    import anthropic
    from anthropic.lib.tools.agent_toolset import AgentToolContext
    from anthropic.types.beta.environments import BetaSelfHostedWork

__all__ = ["SandboxWorker", "SelfHostedEnvironment"]

logger = logging.getLogger("managedloop.providers.claude.selfhosted")

POLL_BLOCK_MS = 999  # the service caps a long poll at 999 ms
POLL_TIMEOUT = 30.0
"""Seconds one poll may take before it is abandoned and retried: a long poll answers within
``block_ms`` (999 ms), so 30 s of silence is a hung request, not a slow queue."""
POLL_BACKOFF_CAP = 30.0  # seconds between failed polls, at most
EMPTY_POLL_PAUSE = 0.0
"""Seconds between two empty long polls: each one already waited ``block_ms`` server side."""
RECLAIM_OLDER_THAN_MS = 5000  # the service's default: a polled, un-acked item is re-offered


@dataclass(frozen=True, kw_only=True)
class SelfHostedEnvironment:
    """A ``self_hosted`` environment whose built-in tools this process serves.

    Pass it as ``ClaudeManagedAgents(..., environment=SelfHostedEnvironment(...))``: each
    session opened on it gets an in-process worker that claims the session's work item and
    runs its built-in tool calls in ``workdir`` while the session is open, so one
    ``ml.run`` does everything. For a fleet, run ``managedloop worker`` instead and pass
    the bare environment id.

    ``environment_key`` (the environment's key from the console) is kept as a
    :class:`~managedloop.config.Secret`. ``tool_timeout`` bounds each call (seconds),
    ``max_output`` each result's text (characters). ``max_idle`` is how long a worker
    holds an item whose session has ended its turn (the SDK's default, 60 s; ``None``:
    until the session ends). ``worker_id`` defaults to ``<hostname>-<12 hex>``.
    """

    environment_id: str
    environment_key: Secret | str
    workdir: str | os.PathLike[str] = field(default_factory=os.getcwd)
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    max_output: int = DEFAULT_MAX_OUTPUT
    max_idle: float | None = 60.0
    poll_timeout: float = POLL_TIMEOUT
    worker_id: str | None = None

    def __post_init__(self) -> None:
        check_id("environment", self.environment_id)
        key: object = self.environment_key
        if isinstance(key, str):
            if not key:
                raise InvalidOptionsError(
                    "environment_key must be a non-empty string", option="environment_key"
                )
            object.__setattr__(self, "environment_key", Secret(key))
        elif not isinstance(key, Secret):
            raise InvalidOptionsError(
                "environment_key must be a string (the environment's key)",
                option="environment_key",
            )
        workdir = os.fspath(self.workdir)
        if not os.path.isdir(workdir):
            raise InvalidOptionsError(f"workdir {workdir!r} is not a directory", option="workdir")
        object.__setattr__(self, "workdir", os.path.realpath(workdir))
        _validate.duration("tool_timeout", self.tool_timeout, allow_none=False)
        _validate.duration("poll_timeout", self.poll_timeout, allow_none=False)
        _validate.duration("max_idle", self.max_idle, allow_zero=True)
        _validate.integer("max_output", self.max_output, minimum=1)
        if self.worker_id is not None:
            _validate.text("worker_id", self.worker_id)


def _key(options: SelfHostedEnvironment) -> str:
    key = options.environment_key
    return key.reveal() if isinstance(key, Secret) else key


def _refused(exc: Any, environment_id: str) -> ManagedLoopError:
    """A poll the service refuses for good, as the project's error (no secret in it)."""
    from managedloop.errors import AuthenticationError, ProviderError

    status = int(exc.status_code)
    if status in (401, 403):
        return AuthenticationError(
            f"the environment key for {environment_id} was refused",
            code="invalid_environment_key",
            status=status,
            environment_id=environment_id,
        )
    return ProviderError(
        f"polling {environment_id} was refused ({status})",
        code="poll_refused",
        status=status,
        environment_id=environment_id,
    )


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"


class SandboxWorker:
    """Serves a self-hosted environment's work items with the SDK's worker (see above).

    ``client`` is the caller's ``anthropic.AsyncAnthropic`` (its API key is never used by
    the worker: every request goes through a bearer-only copy). ``secrets`` are values the
    tool subprocess environment must not contain besides the environment key (the
    organisation API key). ``sleep`` is the pause between failed polls (tests inject it).
    """

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        options: SelfHostedEnvironment,
        *,
        secrets: Collection[str] = (),
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self._client = client
        self.options = options
        self.worker_id = options.worker_id or default_worker_id()
        self._key = _key(options)
        self._secrets = (self._key, *secrets)
        self._sleep = sleep or anyio.sleep
        self.inflight = InFlight()
        self.served: list[str] = []
        """Work item ids this worker has claimed, in order."""
        self._poll_client: anthropic.AsyncAnthropic | None = None

    def __repr__(self) -> str:
        return (
            f"SandboxWorker(environment_id={self.options.environment_id!r}, "
            f"worker_id={self.worker_id!r})"
        )

    async def check_key(self) -> None:
        """Fail fast on an environment key the service refuses (a one-item ``list``, the
        endpoint that takes only that key), before a session waits for this worker."""
        import anthropic

        from managedloop.errors import AuthenticationError

        try:
            await self._poller().beta.environments.work.list(
                self.options.environment_id, limit=1, timeout=self.options.poll_timeout
            )
        except anthropic.AuthenticationError as exc:
            raise AuthenticationError(
                f"the environment key for {self.options.environment_id} was refused",
                code="invalid_environment_key",
                status=exc.status_code,
                environment_id=self.options.environment_id,
            ) from None

    # -- polling ------------------------------------------------------------------------
    def _poller(self) -> anthropic.AsyncAnthropic:
        if self._poll_client is None:
            from anthropic.lib._scoped_client import _copy_client_with_bearer_auth

            self._poll_client = _copy_client_with_bearer_auth(
                self._client,
                auth_token=self._key,
                helper="environments-work-poller",
            ).with_options(max_retries=0)
        return self._poll_client

    async def _poll_once(self, session_id: str | None) -> BetaSelfHostedWork | None:
        """One long poll, acked if it is ours to take (``session_id``: only that
        session's item); ``None`` when there was nothing to take."""
        work = self._poller().beta.environments.work
        env_id = self.options.environment_id
        item = await work.poll(
            env_id,
            block_ms=POLL_BLOCK_MS,
            reclaim_older_than_ms=RECLAIM_OLDER_THAN_MS,
            anthropic_worker_id=self.worker_id,
            timeout=self.options.poll_timeout,
        )
        if item is None:
            return None
        if session_id is not None and item.data.id != session_id:
            return None  # another session's: left un-acked, so another worker gets it
        # Shielded: an item acked by a worker that then vanished would sit leased until its
        # TTL. Once acked it goes straight to ``serve`` (no checkpoint in between), whose
        # lease stops it on any exit, a cancellation included.
        with anyio.CancelScope(shield=True):
            await work.ack(item.id, environment_id=env_id, timeout=self.options.poll_timeout)
        return item

    async def _next_item(self, session_id: str | None) -> BetaSelfHostedWork:
        """Poll until an item is claimed; failed polls back off (capped), a permanent
        refusal (a 4xx other than 408/409/429) is raised."""
        import anthropic

        failures = 0
        while True:
            try:
                item = await self._poll_once(session_id)
            except anthropic.APIStatusError as exc:
                if exc.status_code < 500 and exc.status_code not in (408, 409, 429):
                    raise _refused(exc, self.options.environment_id) from None
                failures += 1
            except (anthropic.APIConnectionError, TimeoutError):
                failures += 1
            else:
                if item is not None:
                    return item
                failures = 0
                if EMPTY_POLL_PAUSE:
                    await self._sleep(EMPTY_POLL_PAUSE)
                continue
            delay = min(POLL_BACKOFF_CAP, 0.5 * 2 ** min(failures, 6))
            logger.warning(
                "self-hosted worker %s: poll failed (%d in a row); retrying in %.3gs",
                self.worker_id,
                failures,
                delay,
            )
            await self._sleep(delay)

    # -- serving ------------------------------------------------------------------------
    def _tools(self, ctx: AgentToolContext) -> Any:
        env = scrubbed_environment(self._secrets)
        return builtin_tools(
            ctx,
            timeout=self.options.tool_timeout,
            max_output=self.options.max_output,
            inflight=self.inflight,
            env=env,
        )

    async def serve(self, item: BetaSelfHostedWork) -> None:
        """Serve one claimed item with the SDK's ``EnvironmentWorker.handle_item``."""
        from anthropic.lib.environments import EnvironmentWorker

        self.served.append(item.id)
        worker = EnvironmentWorker(
            self._client,
            environment_id=self.options.environment_id,
            environment_key=self._key,
            tools=self._tools,
            workdir=self.options.workdir,
            max_idle=self.options.max_idle,
            memory_sync_interval=None,
            worker_id=self.worker_id,
        )
        await worker.handle_item(
            work_id=item.id,
            environment_id=item.environment_id,
            session_id=item.data.id,
            work_secret=item.secret or None,
        )

    async def serve_session(self, session_id: str) -> None:
        """Serve one session's items until cancelled (the in-process worker): a lost
        lease or an item stopped while the session lives sends it back to polling."""
        while True:
            try:
                item = await self._next_item(session_id)
            except Exception as exc:
                # A refusal no retry can mend (a revoked key): say so loudly; the session
                # then waits as for a dead worker, until its stream idle timeout.
                logger.error(
                    "self-hosted worker %s: polling for session %s failed permanently (%s)",
                    self.worker_id,
                    session_id,
                    type(exc).__name__,
                )
                raise
            try:
                await self.serve(item)
            except Exception as exc:  # one failed item must not end the session's worker
                logger.warning(
                    "self-hosted worker %s: work item %s failed (%s); polling again",
                    self.worker_id,
                    item.id,
                    type(exc).__name__,
                )

    async def run(self, stop: anyio.Event, *, drain_timeout: float | None = None) -> None:
        """Serve every item of the environment until ``stop`` is set, then drain: take no
        new item, let running tool calls finish (at most ``drain_timeout`` seconds) and
        post their results, then release the items held."""
        async with anyio.create_task_group() as items:
            async with anyio.create_task_group() as polling:

                async def poll_loop() -> None:
                    while True:
                        item = await self._next_item(None)
                        items.start_soon(self._serve_logged, item)

                async def until_stop() -> None:
                    await stop.wait()
                    polling.cancel_scope.cancel()

                polling.start_soon(poll_loop)
                polling.start_soon(until_stop)
            logger.info(
                "self-hosted worker %s: draining %d running tool call(s)",
                self.worker_id,
                self.inflight.count,
            )
            with anyio.move_on_after(drain_timeout if drain_timeout is not None else float("inf")):
                while self.inflight.count:
                    await self.inflight.idle.wait()
            # Cancelled with no call running: results already computed are still posted
            # (the SDK shields the post), then each lease is stopped.
            items.cancel_scope.cancel()

    async def _serve_logged(self, item: BetaSelfHostedWork) -> None:
        try:
            await self.serve(item)
        except Exception as exc:
            logger.warning(
                "self-hosted worker %s: work item %s failed (%s)",
                self.worker_id,
                item.id,
                type(exc).__name__,
            )
