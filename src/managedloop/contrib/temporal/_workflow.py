"""The session workflow: the loop's sans-IO :class:`~managedloop.session.machine.Machine`
run deterministically inside Temporal, with every piece of I/O an activity.

The workflow only decides (turn count, guards, terminal, what waits for a person); it
never touches a host, a tool, a clock or a random number, so a replay on another worker
makes the same decisions from the same activity results. The managedloop modules it uses
are pure (no I/O at import) and are passed through the sandbox.

One request: ``open`` (once per session), then ``turn`` -> (``tool`` x n, in parallel,
each on its tool's task queue) -> ``turn`` ... until the machine finishes.

People and live sessions:

* **Approvals.** A tool whose approval rule holds a call (``@ml.tool(requires_approval=
  ...)``) makes the tool activity answer ``hold`` instead of running. The workflow then
  waits — durably: no worker is busy, for days if need be — until the
  ``managedloop.decide`` signal brings an :class:`~managedloop.Approve` or
  :class:`~managedloop.Deny` for every held call (the ``managedloop.pending`` query lists
  them). Approved calls run; denied ones answer the model with the denial. Nothing of the
  turn reaches the host before every call of it is answered, so each tool use is answered
  once.
* **Follow-ups.** A ``live`` session serves the ``managedloop.send`` update (a message; the
  update returns that request's result) until the ``managedloop.close`` signal; the
  ``managedloop.result`` update waits for request *n*'s result (1: the prompt's). The
  workflow's own result is its last request's.
* **Events.** The ``managedloop.events`` query returns the raw events of the current
  request from an offset (poll it to stream them out).
* **Continue-as-new.** Between two requests of a live session, when Temporal suggests it
  (a long history), the workflow continues as new with the host session, the transcript
  key, the last seen event and the unserved follow-ups (:class:`._wire.Carry`).
* **At most once per tool-use id**: a host re-delivering a call it already had answered
  gets the stored result again; the tool does not run again.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from managedloop.hosts import ToolResults, TurnInput, UserMessage
    from managedloop.results import ApprovalRequest, Approve, Deny, ToolResult, ToolUse, TurnResult
    from managedloop.session.approvals import denial
    from managedloop.session.machine import (
        CheckOutput,
        Finish,
        LoopOptions,
        Machine,
        RunTools,
        Send,
    )
    from managedloop.session.output import OUTPUT_TOOL

    from ._wire import (
        Carry,
        OpenCall,
        Opened,
        OutputCall,
        SessionStart,
        ToolCall,
        TurnCall,
        TurnDone,
        decision,
        encode_input,
    )

__all__ = ["LIVE_MEMO", "PENDING_MEMO", "SERVED_MEMO", "WORKFLOW_NAME", "SessionWorkflow"]

WORKFLOW_NAME = "managedloop.session"
PENDING_MEMO = "managedloop.pending"
LIVE_MEMO = "managedloop.live"
"""Memo key: whether the session is live (its own result is its last request's)."""
SERVED_MEMO = "managedloop.served"
"""Memo key: how many requests the session has served (the number of its last result)."""
"""Memo key of the calls waiting for a decision (readable with no worker running)."""

_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=0.5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=10,
    # A refused option or a missing registration does not heal by retrying.
    non_retryable_error_types=["InvalidOptionsError", "KeyError", "AuthenticationError"],
)


def _turn_options(start: SessionStart, *, queue: str | None = None) -> dict[str, Any]:
    """The options of every activity a session runs: its task queue (``queue``, a tool's
    own, else the session's), the turn's timeout, a heartbeat, the retry policy."""
    return {
        "task_queue": start.task_queue if queue is None else queue,
        "start_to_close_timeout": timedelta(seconds=start.turn_timeout),
        "heartbeat_timeout": timedelta(seconds=start.heartbeat_timeout),
        "retry_policy": _RETRY,
    }


def _last_id(events: Any, default: str) -> str:
    for event in reversed(list(events)):
        eid = event.get("id") if isinstance(event, dict) else None
        if isinstance(eid, str) and eid:
            return eid
    return default


@workflow.defn(name=WORKFLOW_NAME)
class SessionWorkflow:
    """One agent session, durable: survives its workers, waits for people."""

    @workflow.init
    def __init__(self, start: SessionStart) -> None:
        # State is restored here, not in run(): signals and updates may be handled in the
        # first activation before run() starts, and must see the carried state.
        self._start = start
        self._status = "starting"
        self._turns = 0
        self._events: list[Any] = []
        self._held: dict[str, ApprovalRequest] = {}
        self._decisions: dict[str, Approve | Deny] = {}
        self._inbox: list[dict[str, Any]] = []
        """Follow-ups not yet served: ``{"text"}``, plus ``"result"`` once served."""
        self._results: dict[int, dict[str, Any]] = {}
        self._closed = False
        self._done: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {}
        self._seq = 0
        carry = start.carry
        self._session_id: str | None = carry.session_id if carry else None
        self._transcript: str | None = carry.transcript_key if carry else None
        self._inline: list[dict[str, Any]] | None = carry.transcript if carry else None
        """The transcript itself when the workers keep it inline (no shared store)."""
        self._last_event = carry.last_event_id if carry else ""
        self._inbox = [{"text": t} for t in carry.inbox] if carry else []
        self._requests = carry.requests if carry else 0
        self._first_request = self._requests + 1
        # A tool's task queue: the worker's pins, overridden by the caller's.
        self._queues = {**(carry.tool_queues if carry else {}), **start.tool_queues}
        self._last: dict[str, Any] | None = carry.last if carry else None

    # -- people and observers --------------------------------------------------------------
    @workflow.query(name="managedloop.progress")
    def progress(self) -> dict[str, Any]:
        """``{"status", "turns", "requests"}``: cheap, safe to poll."""
        return {"status": self._status, "turns": self._turns, "requests": self._requests}

    @workflow.query(name="managedloop.pending")
    def pending(self) -> list[dict[str, Any]]:
        """The calls waiting for a decision (``ApprovalRequest.to_dict()`` each)."""
        return [r.to_dict() for i, r in self._held.items() if i not in self._decisions]

    def _publish_pending(self) -> None:
        # In the memo, not only the query: a query needs a running worker, and a session
        # waits for a person with none (``mlt.pending`` reads the memo).
        workflow.upsert_memo({PENDING_MEMO: self.pending()})

    @workflow.query(name="managedloop.events")
    def events(self, since: int) -> list[Any]:
        """The current request's raw events from offset ``since``."""
        return self._events[since:]

    @workflow.signal(name="managedloop.decide")
    def decide(self, decisions: dict[str, Any]) -> None:
        """Decisions by tool-use id (``Approve().to_dict()`` / ``Deny("why").to_dict()``).
        A decision for a call not held is kept: it may be held by a turn still running."""
        for tool_use_id, data in decisions.items():
            self._decisions.setdefault(str(tool_use_id), decision(data))

    @workflow.signal(name="managedloop.close")
    def close(self) -> None:
        """End a live session once its current request is served."""
        self._closed = True

    @workflow.update(name="managedloop.send")
    async def send(self, text: str) -> dict[str, Any]:
        """A follow-up message; returns its request's result (``SessionResult.to_dict()``)."""
        # The run loop fills in the entry's result. (Numbering it here would race the run
        # method: an update can be handled before the run restores a carried count.)
        entry: dict[str, Any] = {"text": text}
        self._inbox.append(entry)
        await workflow.wait_condition(lambda: "result" in entry)
        result: dict[str, Any] = entry["result"]
        return result

    @workflow.update(name="managedloop.result")
    async def result(self, number: int) -> dict[str, Any]:
        """Request ``number``'s result (1: the prompt's), once it is there."""
        await workflow.wait_condition(lambda: number in self._results)
        return self._results[number]

    @result.validator
    def _check_result(self, number: int) -> None:
        if not isinstance(number, int) or number < 1:
            raise ValueError("requests are numbered from 1")
        if number < self._first_request:
            raise ValueError(
                f"request {number} was served before the session continued as new; its "
                "result is no longer kept"
            )

    @send.validator
    def _check_send(self, text: str) -> None:
        if self._closed:
            raise ValueError("the session is closed")
        if not isinstance(text, str):
            raise TypeError("a follow-up is a str")

    # -- the session -------------------------------------------------------------------------
    @workflow.run
    async def run(self, start: SessionStart) -> dict[str, Any]:
        info = workflow.info()
        self._base = f"managedloop:temporal:{info.workflow_id}:{info.run_id}"
        # In the memo (readable once the workflow has ended, with no worker): how to read a
        # result back after the session is over (``mlt.result``).
        workflow.upsert_memo({LIVE_MEMO: start.live, SERVED_MEMO: self._requests})
        text: str | None = None
        if start.carry is None:
            opened: Opened = await workflow.execute_activity(
                "managedloop.open",
                OpenCall(
                    provider=start.provider,
                    agent=start.agent,
                    session_id=start.resume,
                    transcript_key=f"{self._base}:0",
                    output=start.output,
                    output_strategy=start.output_strategy,
                ),
                result_type=Opened,
                **_turn_options(start),
            )
            self._session_id, self._transcript = opened.session_id, opened.transcript_key
            self._inline = opened.transcript
            self._queues = {**opened.tool_queues, **start.tool_queues}
            text = start.prompt
        while True:
            if text is None:
                if not start.live:
                    break
                self._status = "idle"
                if not self._inbox and self._should_continue_as_new(start):
                    # Only between requests, with no follow-up queued and no update
                    # waiting: nothing in flight is lost to the new run.
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    self._continue_as_new()
                await workflow.wait_condition(lambda: bool(self._inbox) or self._closed)
                if not self._inbox:
                    break
                entry = self._inbox.pop(0)
                text = entry["text"]
            else:
                entry = {}
            self._requests += 1
            self._last = await self._request(text)
            self._results[self._requests] = entry["result"] = self._last
            workflow.upsert_memo({SERVED_MEMO: self._requests})
            text = None
        self._status = "done"
        assert self._last is not None  # a fresh run serves its prompt; a carried one had one
        return self._last

    def _should_continue_as_new(self, start: SessionStart) -> bool:
        if workflow.info().is_continue_as_new_suggested():
            return True
        served = self._requests - self._first_request + 1
        return start.requests_per_run is not None and served >= start.requests_per_run

    def _continue_as_new(self) -> None:
        start = self._start
        carry = Carry(
            session_id=self._session_id,
            transcript_key=self._transcript,
            transcript=self._inline,
            last_event_id=self._last_event,
            inbox=[e["text"] for e in self._inbox],
            tool_queues=self._queues,
            requests=self._requests,
            last=self._last,
        )
        workflow.continue_as_new(
            SessionStart(**{**start.__dict__, "carry": carry, "prompt": ""}),
            # The memo the readers rely on goes along (not left to the new run's first task).
            memo={LIVE_MEMO: start.live, SERVED_MEMO: self._requests, PENDING_MEMO: []},
        )

    async def _request(self, text: str) -> dict[str, Any]:
        start = self._start
        strategy = start.output_strategy if start.output is not None else None
        machine = Machine(
            LoopOptions(
                max_turns=start.max_turns,
                terminal_tool=start.terminal_tool,
                require_terminal_tool=start.require_terminal_tool,
                output_strategy=strategy,
                output_tool=OUTPUT_TOOL if strategy == "tool" else None,
                output_retries=start.output_retries,
            )
        )
        machine.begin_request()
        self._events = []
        next_input: TurnInput = UserMessage(text)
        while True:
            self._seq += 1
            self._status = "turn"
            done: TurnDone = await workflow.execute_activity(
                "managedloop.turn",
                TurnCall(
                    provider=start.provider,
                    agent=start.agent,
                    session_id=self._session_id,
                    transcript_in=self._transcript,
                    transcript_out=f"{self._base}:{self._seq}",
                    input=encode_input(machine.before_turn(next_input)),
                    last_event_id=self._last_event,
                    transcript=self._inline,
                    output=start.output,
                    output_strategy=start.output_strategy,
                ),
                result_type=TurnDone,
                **_turn_options(start),
            )
            self._session_id, self._transcript = done.session_id, done.transcript_key
            self._inline = done.transcript
            turn = TurnResult.from_dict(done.turn)
            self._events.extend(turn.events)
            self._last_event = _last_id(turn.events, self._last_event)
            self._turns += 1
            action = machine.on_turn(turn, self._session_id)
            if isinstance(action, CheckOutput):
                action = await self._check_output(machine, action)
            if isinstance(action, Finish):
                result = action.result.to_dict()
                if self._transcript is not None:
                    result["transcript_key"] = self._transcript
                elif self._inline is not None:
                    result["transcript"] = self._inline
                return result
            if isinstance(action, RunTools):
                next_input = await self._run_tools(action.tool_uses, action.host_approvals)
            elif isinstance(action, Send):
                next_input = action.input
            else:  # pragma: no cover - _check_output answers every CheckOutput
                raise AssertionError(f"unexpected action {action!r}")

    async def _check_output(self, machine: Machine, check: CheckOutput) -> Any:
        """The turn's other tool uses run first; then a worker validates the output (it
        imports the type); the machine finishes with it or asks the model again."""
        start = self._start
        answered: ToolResults | None = None
        if check.tool_uses or check.host_approvals:
            answered = await self._run_tools(check.tool_uses, check.host_approvals)
        if check.output_uses:
            payloads = [
                {"payload": u.input, "input_error": u.input_error} for u in check.output_uses
            ]
        else:
            payloads = [{"payload": check.payload, "input_error": None}]
        assert start.output is not None
        assert start.output_strategy is not None
        self._status = "output"
        checked: dict[str, Any] = await workflow.execute_activity(
            "managedloop.output",
            OutputCall(
                provider=start.provider,
                agent=start.agent,
                output=start.output,
                output_strategy=start.output_strategy,
                payloads=payloads,
                output_validators=start.output_validators,
            ),
            result_type=dict,
            **_turn_options(start),
        )
        return machine.on_output(
            check, checked["value"], checked["errors"], answered, self._session_id
        )

    def _tool(self, use: ToolUse, *, decided: bool) -> Any:
        start = self._start
        return workflow.execute_activity(
            "managedloop.tool",
            ToolCall(
                agent=start.agent,
                use=use.to_dict(),
                session_id=self._session_id,
                provider=start.provider,
                timeout=start.tool_timeout,
                decided=decided,
            ),
            result_type=dict,
            # The tool's own timeout bounds it; this bound is for a lost worker.
            **_turn_options(start, queue=self._queues.get(use.name)),
        )

    async def _run_tools(self, uses: Any, host_held: Any = ()) -> ToolResults:
        """Results for the custom calls, and decisions for the host-run tools the host holds
        (a Claude permission policy): every held call waits for ``managedloop.decide``."""
        tool_uses: list[ToolUse] = list(uses)
        host = {r.tool_use.id or "": r for r in host_held}
        results: dict[int, ToolResult] = {}
        fresh: list[int] = []
        for i, use in enumerate(tool_uses):
            stored = self._done.get(use.id or "")
            if stored is not None and stored[:2] == (use.name, use.input):
                results[i] = ToolResult.from_dict(stored[2])  # answered before: not rerun
            else:
                fresh.append(i)
        self._status = "tools"
        outs = await asyncio.gather(*(self._tool(tool_uses[i], decided=False) for i in fresh))
        held: list[int] = []
        for i, out in zip(fresh, outs, strict=True):
            if "hold" in out:
                use = tool_uses[i]
                self._held[use.id or ""] = ApprovalRequest(
                    tool_use=use, source="tool", reason=out["hold"]
                )
                held.append(i)
            else:
                results[i] = ToolResult.from_dict(out["result"])
        self._held.update(host)
        if held or host:
            self._status = "waiting_for_approval"
            self._publish_pending()
            ids = [tool_uses[i].id or "" for i in held] + list(host)
            await workflow.wait_condition(lambda: all(i in self._decisions for i in ids))
            approved = [
                i for i in held if isinstance(self._decisions[tool_uses[i].id or ""], Approve)
            ]
            runs = await asyncio.gather(*(self._tool(tool_uses[i], decided=True) for i in approved))
            for i, out in zip(approved, runs, strict=True):
                results[i] = ToolResult.from_dict(out["result"])
            for i in held:
                verdict = self._decisions[tool_uses[i].id or ""]
                if isinstance(verdict, Deny):
                    results[i] = denial(tool_uses[i], verdict)
                self._held.pop(tool_uses[i].id or "", None)
            self._publish_pending()
            self._status = "tools"
        decisions = {hid: self._decisions[hid] for hid in host}
        for hid in host:
            self._held.pop(hid, None)
        if host:
            self._publish_pending()
        ordered = [results[i] for i in range(len(tool_uses))]
        for use, result in zip(tool_uses, ordered, strict=True):
            if use.id:
                self._done[use.id] = (use.name, dict(use.input), result.to_dict())
        return ToolResults(tool_uses=tool_uses, results=ordered, decisions=decisions)
