"""Durable sessions on Temporal (extra ``managedloop[temporal]``).

A session request runs as a Temporal workflow (:class:`SessionWorkflow`): the loop's
decisions inside the workflow, every host turn and tool call as an activity on the
user's own workers (see ``_workflow`` and ``_activities`` for the invariants)::

    from temporalio.client import Client
    from managedloop.contrib import temporal as mlt

    client = await Client.connect("127.0.0.1:7233")
    # on each worker machine: the providers and agents by name, built there
    async with mlt.worker(client, task_queue="agents",
                          providers={"local": lambda: Local(model=..., base_url=...)},
                          agents={"calc": calc_spec}, store=SQLiteStore("ml.sqlite3")):
        ...
    # anywhere: start a session and wait for its SessionResult
    result = await mlt.run(client, provider="local", agent="calc",
                           prompt="What is 2 + 2?", task_queue="agents")

Providers and agents cross the workflow boundary by *name*, so credentials never enter a
workflow history. Local transcripts are kept in the workers' shared
:class:`~managedloop.stores.Store` (one every worker of the queue can read: a
``SQLiteStore`` on one machine, a ``RedisStore`` across machines) and only their keys
cross.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from managedloop.errors import InvalidOptionsError
from managedloop.hosts import Provider
from managedloop.provisioning.specs import AgentSpec
from managedloop.results import SessionResult
from managedloop.stores import MemoryStore, Store
from managedloop.tools import Toolset, as_tool

try:
    from temporalio.client import Client
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "managedloop.contrib.temporal needs the temporal extra: pip install 'managedloop[temporal]'"
    ) from exc

from ._activities import SessionActivities
from ._wire import SessionStart
from ._workflow import WORKFLOW_NAME, SessionWorkflow

__all__ = ["SessionWorker", "SessionWorkflow", "run", "worker"]


class SessionWorker:
    """A Temporal ``Worker`` serving managedloop sessions, which also closes the providers
    it built when it stops. ``async with`` it, or ``await run()`` it."""

    def __init__(self, worker: Worker, activities: SessionActivities) -> None:
        self.worker = worker
        """The underlying ``temporalio.worker.Worker``."""
        self._activities = activities

    async def run(self) -> None:
        try:
            await self.worker.run()
        finally:
            await self._activities.aclose()

    async def __aenter__(self) -> SessionWorker:
        await self.worker.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.worker.__aexit__(*exc)
        finally:
            await self._activities.aclose()


def worker(
    client: Client,
    *,
    task_queue: str,
    providers: Mapping[str, Callable[[], Provider]] | None = None,
    agents: Mapping[str, AgentSpec] | None = None,
    tools: Iterable[Any] = (),
    store: Store | None = None,
    **worker_options: Any,
) -> SessionWorker:
    """A :class:`SessionWorker` serving managedloop sessions on ``task_queue``.

    ``providers`` map a name to a factory called once per worker (so each worker builds
    its own clients and credentials); ``agents`` map a name to its spec, whose tool
    implementations this worker runs. A worker that only runs pinned tools (a GPU
    machine, say) passes ``tools=`` and no providers. ``store`` holds Local transcripts
    and must be shared by every worker of the queue (default: in-process, one worker).
    Use the result as ``async with worker(...):`` or ``await worker(...).run()``.
    """
    agents = dict(agents or {})
    implementations = [as_tool(t) for t in tools]
    for spec in agents.values():
        implementations.extend(t for t in spec.toolset())
    seen: dict[str, Any] = {}
    for t in implementations:
        seen.setdefault(t.name, t)
    activities = SessionActivities(
        providers=providers or {},
        agents=agents,
        store=store if store is not None else MemoryStore(),
        tools=Toolset(list(seen.values())),
    )
    worker_options.setdefault(
        # A dead worker's sticky queue otherwise delays the workflow task ~10 s.
        "sticky_queue_schedule_to_start_timeout",
        timedelta(seconds=2),
    )
    # managedloop's modules do no I/O at import and keep no state the workflow shares, so
    # the sandbox passes them through instead of re-importing them for every workflow run
    # (re-importing also breaks on their enum and dataclass subclasses).
    worker_options.setdefault(
        "workflow_runner",
        SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("managedloop")
        ),
    )
    made = Worker(
        client,
        task_queue=task_queue,
        workflows=[SessionWorkflow],
        activities=activities.all(),
        **worker_options,
    )
    return SessionWorker(made, activities)


async def run(
    client: Client,
    *,
    provider: str,
    agent: str,
    prompt: str,
    task_queue: str,
    workflow_id: str | None = None,
    store: Store | None = None,
    tool_queues: Mapping[str, str] | None = None,
    resume: str | None = None,
    max_turns: int = 50,
    terminal_tool: str | None = None,
    require_terminal_tool: bool = False,
    tool_timeout: float | None = None,
    turn_timeout: float = 1800.0,
    heartbeat_timeout: float = 10.0,
) -> SessionResult:
    """Run one session request durably and return its :class:`~managedloop.SessionResult`.

    ``workflow_id`` makes the call idempotent (Temporal refuses a second running workflow
    with the same id); by default a fresh id is minted. With ``store`` (the workers'
    store), a Local result carries its transcript; otherwise the transcript stays in the
    store (``result`` has ``transcript=None``).
    """
    for name, value in (("provider", provider), ("agent", agent), ("task_queue", task_queue)):
        if not isinstance(value, str) or not value:
            raise InvalidOptionsError(f"{name} must be a non-empty str", option=name)
    if not isinstance(prompt, str):
        raise InvalidOptionsError("prompt must be a str", option="prompt")
    start = SessionStart(
        provider=provider,
        agent=agent,
        prompt=prompt,
        task_queue=task_queue,
        tool_queues=dict(tool_queues or {}),
        resume=resume,
        max_turns=max_turns,
        terminal_tool=terminal_tool,
        require_terminal_tool=require_terminal_tool,
        tool_timeout=tool_timeout,
        turn_timeout=turn_timeout,
        heartbeat_timeout=heartbeat_timeout,
    )
    data: dict[str, Any] = await client.execute_workflow(
        WORKFLOW_NAME,
        start,
        id=workflow_id or f"managedloop-{uuid.uuid4().hex}",
        task_queue=task_queue,
        result_type=dict,
    )
    key = data.pop("transcript_key", None)
    result = SessionResult.from_dict(data)
    if store is not None and key is not None:
        stored = store.get(key)
        if stored is not None:
            import dataclasses

            result = dataclasses.replace(result, transcript=stored["messages"])
    return result
