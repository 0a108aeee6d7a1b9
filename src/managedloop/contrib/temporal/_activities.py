"""The I/O of a durable session, as Temporal activities run by the user's workers.

Three activities, each one step the workflow cannot do itself:

* ``managedloop.open`` — open a new host session (or reattach to ``resume``);
* ``managedloop.turn`` — one host turn: reattach by session id (or by stored transcript on
  Local), send one input, read the turn to its :class:`~managedloop.TurnResult`, close;
* ``managedloop.tool`` — run one custom tool call with the worker's own implementation;
* ``managedloop.output`` — validate a typed output (``output=``) with the type the worker
  imports by its path (:mod:`managedloop.session.output`; the host is told of the output
  in every open and turn, as in ``ml.run``).

Every activity heartbeats while it works, so a worker that dies (SIGKILL, a redeploy) has
its activity retried on another worker after the workflow's ``heartbeat_timeout``.

Exactly-once on the wire, per host (the workflow retries a turn only when its activity
failed or its worker died):

* **Local** holds no server state: a retried turn re-sends the same chat request, read
  from stored transcript *n* (see :mod:`._wire`), so no result is ever appended twice.
* **Claude** keeps the session: a retried turn reattaches by session id, and when the
  tool results it carries are no longer pending on the host (the dead worker's attempt
  delivered them), it sends nothing and reads the turn from the session instead.
* **AgentCore** answers tool uses on the next invoke of the same runtime session id;
  one invoke is one activity whose timeout exceeds the harness's own budget.

A tool call retried after its worker died runs the tool again (it never finished, so no
result was recorded or sent): tools that act on the world should be idempotent per
``info.metadata["tool_use_id"]``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import anyio
from temporalio import activity
from temporalio.exceptions import ApplicationError

from managedloop.handler import run_tool_calls
from managedloop.hosts import OpenRequest, Provider
from managedloop.provisioning.specs import AgentSpec
from managedloop.results import SessionInfo, ToolUse, TurnResult
from managedloop.session import output as _output
from managedloop.session.approvals import hold_reason
from managedloop.stores import Store
from managedloop.tools import Toolset

from ._wire import (
    INLINE_LIMIT,
    OpenCall,
    Opened,
    OutputCall,
    ToolCall,
    Transcript,
    TurnCall,
    TurnDone,
    decode_input,
)

__all__ = ["HEARTBEAT_EVERY", "SessionActivities"]

HEARTBEAT_EVERY = 1.0
"""Seconds between heartbeats of a working activity; well under any heartbeat timeout."""


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncIterator[None]:
    """Heartbeat every :data:`HEARTBEAT_EVERY` seconds while the body runs."""

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await anyio.sleep(HEARTBEAT_EVERY)

    async with anyio.create_task_group() as tg:
        tg.start_soon(beat)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


class SessionActivities:
    """The activities, bound to one worker's providers, agents, tools and store."""

    def __init__(
        self,
        *,
        providers: Mapping[str, Callable[[], Provider]],
        agents: Mapping[str, AgentSpec],
        store: Store | None,
        tools: Toolset,
        tool_queues: Mapping[str, str] | None = None,
    ) -> None:
        self._tool_queues = dict(tool_queues or {})
        self._factories = dict(providers)
        self._providers: dict[str, Provider] = {}
        self._agents = dict(agents)
        self._store = store
        self._tools = tools

    def _provider(self, name: str) -> Provider:
        made = self._providers.get(name)
        if made is None:
            factory = self._factories.get(name)
            if factory is None:
                raise KeyError(f"this worker has no provider named {name!r}")
            made = self._providers[name] = factory()
        return made

    def _agent(self, name: str) -> AgentSpec:
        spec = self._agents.get(name)
        if spec is None:
            raise KeyError(f"this worker has no agent named {name!r}")
        return spec

    def _plan(
        self,
        provider: str,
        agent: str,
        output: str | None,
        strategy: str | None,
        validators: Sequence[str] = (),
    ) -> _output.OutputPlan | None:
        if output is None:
            return None
        spec = self._agent(agent)
        return _output.plan(
            _output.import_type(output),
            strategy=strategy,
            retries=0,  # the workflow counts the retries
            validators=[_output.import_type(v) for v in validators] or None,
            provider=self._provider(provider),
            spec=spec,
            tools=spec.tool_definitions(),
        )

    def _request(  # noqa: PLR0917 (the three callers pass what they have, in order)
        self,
        call_agent: str,
        session_id: str | None,
        transcript: Any,
        replay_from: str | None = None,
        plan: _output.OutputPlan | None = None,
        provider: str = "",
    ) -> OpenRequest:
        spec = self._agent(call_agent)
        tools = spec.tool_definitions()
        if plan is not None:
            if plan.tool is not None and plan.tool.name not in {t.name for t in tools}:
                tools.append(plan.tool)
            spec = plan.host_spec(spec, self._provider(provider))
        return OpenRequest(
            spec=spec,
            agent=spec,
            tools=tools,
            session_id=session_id,
            transcript=transcript,
            replay_from=replay_from,
        )

    def _load(self, key: str | None, inline: Transcript | None) -> Transcript | None:
        if key is None:
            return inline
        if self._store is None:
            raise ApplicationError(
                f"transcript {key!r} is kept in a shared store and this worker has none: "
                "give every worker of the task queue the same store (worker(store=...))",
                type="TranscriptStoreMissing",
                non_retryable=True,
            )
        stored = self._store.get(key)
        if stored is None:
            raise ApplicationError(
                f"transcript {key!r} is not in this worker's store: every worker of the task "
                "queue must share one store (a SQLiteStore on one machine, a RedisStore "
                "across machines)",
                type="TranscriptNotFound",
                non_retryable=True,
            )
        messages = stored["messages"]
        assert isinstance(messages, list)
        return messages

    def _save(
        self, key: str, transcript: Transcript | None
    ) -> tuple[str | None, Transcript | None]:
        """``(key, None)`` once stored under ``key``; ``(None, transcript)`` to carry inline."""
        if transcript is None:
            return None, None
        if self._store is None:
            size = len(json.dumps(transcript, ensure_ascii=False).encode())
            if size > INLINE_LIMIT:
                raise ApplicationError(
                    f"the session's transcript is {size} bytes, over the {INLINE_LIMIT} a "
                    "Temporal payload can carry inline: give the workers a shared store "
                    "(worker(store=...)) to keep transcripts by key",
                    type="TranscriptTooLarge",
                    non_retryable=True,
                )
            return None, transcript
        self._store.put(key, {"messages": transcript})
        return key, None

    @activity.defn(name="managedloop.open")
    async def open(self, call: OpenCall) -> Opened:
        provider = self._provider(call.provider)
        plan = self._plan(call.provider, call.agent, call.output, call.output_strategy)
        request = self._request(call.agent, call.session_id, None, None, plan, call.provider)
        async with _heartbeating():
            conn = await provider.open(request)
            try:
                key, inline = await anyio.to_thread.run_sync(
                    self._save, call.transcript_key, conn.transcript()
                )
                return Opened(
                    session_id=conn.session_id,
                    transcript_key=key,
                    transcript=inline,
                    pending=[u.to_dict() for u in conn.pending_tool_uses],
                    tool_queues=self._tool_queues,
                )
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.aclose()

    @activity.defn(name="managedloop.turn")
    async def turn(self, call: TurnCall) -> TurnDone:
        provider = self._provider(call.provider)
        transcript = await anyio.to_thread.run_sync(self._load, call.transcript_in, call.transcript)
        # A first attempt follows a finished turn: the history holds nothing new. A retry
        # follows a dead attempt, which may have sent the input and seen part of the turn:
        # the host replays what came after the last event the workflow holds.
        retry = activity.info().attempt > 1 and call.session_id is not None
        plan = self._plan(call.provider, call.agent, call.output, call.output_strategy)
        request = self._request(
            call.agent,
            call.session_id,
            transcript,
            call.last_event_id if retry else None,
            plan,
            call.provider,
        )
        input = decode_input(call.input)
        async with _heartbeating():
            conn = await provider.open(request)
            try:
                result: TurnResult | None = None
                async for item in conn.turn(input):
                    if isinstance(item, TurnResult):
                        result = item
                if result is None:
                    raise RuntimeError("the host's turn ended without a TurnResult")
                key, inline = await anyio.to_thread.run_sync(
                    self._save, call.transcript_out, conn.transcript()
                )
                return TurnDone(
                    turn=result.to_dict(),
                    session_id=conn.session_id,
                    transcript_key=key,
                    transcript=inline,
                )
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.aclose()

    @activity.defn(name="managedloop.tool")
    async def tool(self, call: ToolCall) -> dict[str, Any]:
        """``{"result": ToolResult}``, or ``{"hold": reason}`` when the tool's approval rule
        holds the call for a person (asked only for a call not yet ``decided``)."""
        use = ToolUse.from_dict(call.use)
        info = SessionInfo(
            session_id=call.session_id,
            provider=call.provider,
            metadata={"tool_use_id": use.id, "attempt": activity.info().attempt},
        )
        if not call.decided:
            reason = await hold_reason(self._tools, use, info)
            if reason is not None:
                return {"hold": reason}
        async with _heartbeating():
            [result] = await run_tool_calls(self._tools, [use], info, timeout=call.timeout)
        return {"result": result.to_dict()}

    @activity.defn(name="managedloop.output")
    async def output(self, call: OutputCall) -> dict[str, Any]:
        """``{"value": JSON, "errors": None}`` for the first payload that validates, else
        ``{"value": None, "errors": [...]}`` with the first payload's errors."""
        import pydantic_core

        plan = self._plan(
            call.provider, call.agent, call.output, call.output_strategy, call.output_validators
        )
        assert plan is not None
        first: list[dict[str, Any]] | None = None
        for item in call.payloads:
            value, errors = await plan.check(item.get("payload"), item.get("input_error"))
            if errors is None:
                return {"value": pydantic_core.to_jsonable_python(value), "errors": None}
            first = errors if first is None else first
        return {"value": None, "errors": first or []}

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """While the worker runs: the toolset's lifespan is held open (its MCP servers are
        connected once per worker, not once per call); on the way out the providers this
        worker built are closed."""
        base = self._tools
        try:
            async with base.lifespan() as live:
                self._tools = live
                yield
        finally:
            self._tools = base
            await self.aclose()

    async def aclose(self) -> None:
        """Close the providers this worker built (their clients and connection pools)."""
        made, self._providers = list(self._providers.values()), {}
        for provider in made:
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()
            elif callable(getattr(provider, "close", None)):
                provider.close()  # type: ignore[attr-defined]

    def all(self) -> list[Callable[..., Any]]:
        return [self.open, self.turn, self.tool, self.output]
