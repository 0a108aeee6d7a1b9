"""Durable sessions on Temporal (extra ``managedloop[temporal]``).

A session request runs as a Temporal workflow (:class:`SessionWorkflow`): the loop's
decisions inside the workflow, every host turn and tool call as an activity on the
user's own workers (see ``_workflow`` and ``_activities`` for the invariants)::

    from temporalio.client import (
        Client,
        WorkflowExecutionStatus,
        WorkflowFailureError,
        WorkflowUpdateRPCTimeoutOrCancelledError,
    )
    from temporalio.service import RPCError
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
workflow history. Local transcripts travel inside Temporal by default (in the turn
activities' inputs and results), so any worker can take any turn; ``store=`` (one store
every worker of the queue shares: a ``SQLiteStore`` on one machine, a ``RedisStore``
across machines) keeps them out of the history, for long sessions, and only their keys
cross. What the history then holds in plain text — prompts, tool inputs and results —
is encrypted with a payload codec (:mod:`managedloop.contrib.temporal.codec`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from managedloop import _validate
from managedloop.errors import InvalidOptionsError, ProviderError
from managedloop.hosts import Provider
from managedloop.provisioning.specs import AgentSpec
from managedloop.results import ApprovalRequest, Approve, Deny, SessionResult
from managedloop.session import output as _output
from managedloop.stores import Store
from managedloop.tools import Toolset, as_tool

try:
    from temporalio.client import (
        Client,
        WorkflowExecutionStatus,
        WorkflowFailureError,
        WorkflowUpdateRPCTimeoutOrCancelledError,
    )
    from temporalio.service import RPCError
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "managedloop.contrib.temporal needs the temporal extra: pip install 'managedloop[temporal]'"
    ) from exc

from ._activities import SessionActivities
from ._wire import SessionStart
from ._workflow import LIVE_MEMO, PENDING_MEMO, SERVED_MEMO, WORKFLOW_NAME, SessionWorkflow

__all__ = [
    "SessionWorker",
    "SessionWorkflow",
    "close",
    "decide",
    "events",
    "pending",
    "result",
    "run",
    "send",
    "start",
    "worker",
]


class SessionWorker:
    """A Temporal ``Worker`` serving managedloop sessions. While it runs it holds its
    tools' lifespan open (MCP servers connect once per worker) and when it stops it closes
    the providers it built. ``async with`` it, or ``await run()`` it."""

    def __init__(self, worker: Worker, activities: SessionActivities) -> None:
        self.worker = worker
        """The underlying ``temporalio.worker.Worker``."""
        self._activities = activities
        self._stack = contextlib.AsyncExitStack()

    async def run(self) -> None:
        async with self._activities.serving():
            await self.worker.run()

    async def __aenter__(self) -> SessionWorker:
        await self._stack.enter_async_context(self._activities.serving())
        try:
            await self.worker.__aenter__()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.worker.__aexit__(*exc)
        finally:
            await self._stack.aclose()


def worker(
    client: Client,
    *,
    task_queue: str,
    providers: Mapping[str, Callable[[], Provider]] | None = None,
    agents: Mapping[str, AgentSpec] | None = None,
    tools: Iterable[Any] = (),
    store: Store | None = None,
    tool_queues: Mapping[str, str] | None = None,
    **worker_options: Any,
) -> SessionWorker:
    """A :class:`SessionWorker` serving managedloop sessions on ``task_queue``.

    ``providers`` map a name to a factory called once per worker (so each worker builds
    its own clients and credentials); ``agents`` map a name to its spec, whose tool
    implementations this worker runs. A worker that only runs pinned tools (a GPU
    machine, say) passes ``tools=`` and no providers. ``store`` keeps Local transcripts by
    key instead of inline in the workflow history (default: inline, which needs no shared
    storage, up to 1 MiB of transcript); when given, every worker of the queue must share
    it.
    ``tool_queues`` pins tools to task queues (``{"render": "gpu"}``: the ``render`` calls
    of sessions this worker opens run on a worker of queue ``gpu``, which passes the tool
    as ``tools=[render]``); ``start(tool_queues=...)`` overrides it per session.
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
        store=store,
        tools=Toolset(list(seen.values())),
        tool_queues=tool_queues,
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


def _options(**given: Any) -> dict[str, Any]:
    for name in ("provider", "agent", "task_queue"):
        value = given[name]
        if not isinstance(value, str) or not value:
            raise InvalidOptionsError(f"{name} must be a non-empty str", option=name)
    if not isinstance(given["prompt"], str):
        raise InvalidOptionsError("prompt must be a str", option="prompt")
    _validate.integer("max_turns", given["max_turns"], minimum=1)
    _validate.integer("requests_per_run", given["requests_per_run"], minimum=1, allow_none=True)
    _validate.duration("tool_timeout", given["tool_timeout"])
    _validate.duration("turn_timeout", given["turn_timeout"], allow_none=False)
    _validate.duration("heartbeat_timeout", given["heartbeat_timeout"], allow_none=False)
    return given


async def start(
    client: Client,
    *,
    provider: str,
    agent: str,
    prompt: str,
    task_queue: str,
    workflow_id: str | None = None,
    live: bool = False,
    requests_per_run: int | None = None,
    tool_queues: Mapping[str, str] | None = None,
    resume: str | None = None,
    max_turns: int = 50,
    terminal_tool: str | None = None,
    require_terminal_tool: bool = False,
    tool_timeout: float | None = None,
    turn_timeout: float = 1800.0,
    heartbeat_timeout: float = 10.0,
    output: Any = None,
    output_strategy: str | None = None,
    output_retries: int = 2,
    output_validator: Any = None,
) -> str:
    """Start a durable session and return its workflow id (at once; nothing waits).

    Any process can then follow it by id: :func:`result`, :func:`pending`,
    :func:`decide`, :func:`events`, and for a ``live`` session :func:`send` and
    :func:`close`. Options are checked here, before anything reaches Temporal.

    ``output`` (a type importable by name on the workers, or its ``"module:Type"``) asks
    for a typed result as ``ml.run`` does (:mod:`managedloop.session.output`): the
    strategy is ``"tool"`` unless ``output_strategy`` says otherwise, the workers validate
    (pydantic, then each ``output_validator``: a function, or a list of them, importable by
    name on the workers, or its ``"module:function"``; one may raise ``ml.ModelRetry``),
    and ``result(..., output=Type)`` reads ``result.output`` back as an instance.
    """
    opts = _options(
        provider=provider,
        agent=agent,
        prompt=prompt,
        task_queue=task_queue,
        max_turns=max_turns,
        tool_timeout=tool_timeout,
        turn_timeout=turn_timeout,
        heartbeat_timeout=heartbeat_timeout,
        requests_per_run=requests_per_run,
    )
    typed = _typed(output, output_strategy, output_retries, output_validator)
    session = SessionStart(
        **opts,
        tool_queues=dict(tool_queues or {}),
        resume=resume,
        terminal_tool=terminal_tool,
        require_terminal_tool=require_terminal_tool,
        live=live,
        **typed,
    )
    wid = workflow_id or f"managedloop-{uuid.uuid4().hex}"
    # The memo is set at the start, not by the workflow's first task: `result` reads it to
    # know how to wait, possibly before any worker has run the workflow.
    await client.start_workflow(
        WORKFLOW_NAME,
        session,
        id=wid,
        task_queue=task_queue,
        memo={LIVE_MEMO: live, SERVED_MEMO: 0},
    )
    return wid


def _typed(output: Any, strategy: Any, retries: Any, validators: Any) -> dict[str, Any]:
    """The ``output*`` fields of a :class:`SessionStart`, checked."""
    if output is None:
        if validators is not None:
            raise InvalidOptionsError(
                "output_validator needs output= (the type it checks)", option="output_validator"
            )
        return {}
    path = _output.type_path(output)
    if strategy is None:
        strategy = "tool"  # every host takes it; "native" (Local) must be asked for
    if strategy not in _output.STRATEGIES:
        raise InvalidOptionsError(
            f"output_strategy must be one of {', '.join(_output.STRATEGIES)}, got {strategy!r}",
            option="output_strategy",
        )
    _validate.integer("output_retries", retries, minimum=0)
    return {
        "output": path,
        "output_strategy": strategy,
        "output_retries": retries,
        "output_validators": _validator_paths(validators),
    }


def _validator_paths(validators: Any) -> list[str]:
    """The ``"module:qualname"`` of each output validator, which the workers import: a
    function must import by that name to itself (not a lambda, a nested function or one
    of ``__main__``)."""
    if validators is None:
        return []
    given = list(validators) if isinstance(validators, list | tuple) else [validators]
    paths: list[str] = []
    for fn in given:
        if isinstance(fn, str):
            module, sep, function = fn.partition(":")
            if not (sep and module and function):
                raise InvalidOptionsError(
                    f"output_validator as a string is 'module:function', got {fn!r}",
                    option="output_validator",
                )
            paths.append(fn)
            continue
        where, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
        path = f"{where}:{qualname}"
        try:
            found = (
                _output.import_type(path)
                if callable(fn) and isinstance(where, str) and isinstance(qualname, str)
                else None
            )
        except (ImportError, AttributeError):
            found = None
        if found is not fn or where == "__main__":
            raise InvalidOptionsError(
                f"output_validator must be a function importable by name (or "
                f"'module:function'), got {fn!r}: a durable session's workers import it",
                option="output_validator",
            )
        paths.append(path)
    return paths


def _output_type(output: Any) -> Any:
    """The type to validate a result's output with: ``output`` itself, or the type its
    ``"module:Type"`` names when it imports here (else the output stays JSON)."""
    if not isinstance(output, str):
        return output
    try:
        return _output.import_type(output)
    except (ImportError, AttributeError):
        return None


def _session_result(data: dict[str, Any], store: Store | None, output: Any = None) -> SessionResult:
    data = dict(data)
    key = data.pop("transcript_key", None)
    result = SessionResult.from_dict(data, output=_output_type(output))
    if store is not None and key is not None:
        stored = store.get(key)
        if stored is not None:
            result = dataclasses.replace(result, transcript=stored["messages"])
    return result


async def result(
    client: Client,
    workflow_id: str,
    *,
    request: int = 1,
    store: Store | None = None,
    output: Any = None,
) -> SessionResult:
    """The result of request ``request`` of a session (1: its prompt's), once it is there —
    also after the session has ended (then from the workflow's own result: a one-request
    session's, or a live session's last request's).

    With ``store`` (the workers' store), a Local result carries its transcript; with
    ``output`` (the session's output type), ``result.output`` is an instance of it.
    """
    _validate.integer("request", request, minimum=1)
    handle = client.get_workflow_handle(workflow_id)
    described = await handle.describe()
    live = await described.memo_value(LIVE_MEMO, default=False)
    if not live:  # one request: the workflow's result is it (no race with its end)
        if request != 1:
            raise InvalidOptionsError(
                f"a session that is not live serves one request, not {request}",
                option="request",
            )
        data = await _workflow_result(handle)
        return _session_result(data, store, output)
    try:
        data = await handle.execute_update("managedloop.result", request, result_type=dict)
    except (WorkflowUpdateRPCTimeoutOrCancelledError, RPCError):
        # The session may have ended while we asked: its last result is still readable.
        described = await handle.describe()
        served = await described.memo_value(SERVED_MEMO, default=0)
        if described.status is WorkflowExecutionStatus.RUNNING or request != served:
            raise
        data = await _workflow_result(handle)
    return _session_result(data, store, output)


async def _workflow_result(handle: Any) -> dict[str, Any]:
    """The workflow's result; a failed workflow raises a :class:`ProviderError` whose
    message is the innermost cause (an activity's own error), not Temporal's bare
    "Workflow execution failed"."""
    try:
        data: dict[str, Any] = await handle.result()
    except WorkflowFailureError as exc:
        cause: BaseException = exc
        chain = []
        while cause.__cause__ is not None:
            cause = cause.__cause__
            chain.append(getattr(cause, "type", None) or type(cause).__name__)
        raise ProviderError(
            f"durable session {handle.id} failed: {cause}",
            code="durable_session_failed",
            workflow_id=handle.id,
            cause_type=chain[-1] if chain else None,
        ) from exc
    return data


async def run(client: Client, *, store: Store | None = None, **options: Any) -> SessionResult:
    """:func:`start` a session and wait for its first result (the options of :func:`start`;
    with ``output=``, ``result.output`` is an instance of it)."""
    wid = await start(client, **options)
    return await result(client, wid, store=store, output=options.get("output"))


async def pending(client: Client, workflow_id: str) -> list[ApprovalRequest]:
    """The tool calls the session waits on a decision for (also while no worker runs)."""
    # From the workflow's memo: it needs no running worker (a query would).
    described = await client.get_workflow_handle(workflow_id).describe()
    data = await described.memo_value(PENDING_MEMO, default=[])
    return [ApprovalRequest.from_dict(d) for d in data]


async def decide(client: Client, workflow_id: str, decisions: Mapping[str, Approve | Deny]) -> None:
    """Send decisions (``{tool_use_id: ml.Approve() | ml.Deny("why")}``); from any process,
    any time later: the session waits durably."""
    if not isinstance(decisions, Mapping) or not all(
        isinstance(k, str) and isinstance(v, Approve | Deny) for k, v in decisions.items()
    ):
        raise InvalidOptionsError(
            "decisions map tool-use ids to ml.Approve() or ml.Deny('why')", option="decisions"
        )
    handle = client.get_workflow_handle(workflow_id)
    await handle.signal("managedloop.decide", {k: v.to_dict() for k, v in decisions.items()})


async def send(
    client: Client, workflow_id: str, text: str, *, store: Store | None = None
) -> SessionResult:
    """A follow-up message to a ``live`` session; returns its request's result."""
    if not isinstance(text, str):
        raise InvalidOptionsError("text must be a str", option="text")
    handle = client.get_workflow_handle(workflow_id)
    data = await handle.execute_update("managedloop.send", text, result_type=dict)
    return _session_result(data, store)


async def events(client: Client, workflow_id: str, since: int = 0) -> list[Any]:
    """The current request's raw events from offset ``since`` (poll to stream them)."""
    handle = client.get_workflow_handle(workflow_id)
    return list(await handle.query("managedloop.events", since, result_type=list))


async def close(client: Client, workflow_id: str) -> None:
    """End a ``live`` session once its current request is served."""
    await client.get_workflow_handle(workflow_id).signal("managedloop.close")
