"""The session workflow: the loop's sans-IO :class:`~managedloop.session.machine.Machine`
run deterministically inside Temporal, with every piece of I/O an activity.

The workflow only decides (turn count, guards, terminal); it never touches a host, a
tool, a clock or a random number, so a replay on another worker makes the same decisions
from the same activity results. The managedloop modules it uses are pure (no I/O at
import), and are passed through the sandbox rather than re-imported per workflow run.

Order of one request: ``open`` (or reattach), then ``turn`` → (``tool`` x n, in
parallel, each on its tool's task queue) → ``turn`` … until the machine finishes.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from managedloop.hosts import ToolResults, TurnInput, UserMessage
    from managedloop.results import ToolResult, ToolUse, TurnResult
    from managedloop.session.machine import Finish, LoopOptions, Machine, RunTools

    from ._wire import (
        OpenCall,
        Opened,
        SessionStart,
        ToolCall,
        TurnCall,
        TurnDone,
        encode_input,
    )

__all__ = ["SessionWorkflow"]

WORKFLOW_NAME = "managedloop.session"

_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=0.5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=10,
    # A refused option or a missing registration does not heal by retrying.
    non_retryable_error_types=["InvalidOptionsError", "KeyError", "AuthenticationError"],
)


def _last_id(events: Any, default: str) -> str:
    for event in reversed(list(events)):
        eid = event.get("id") if isinstance(event, dict) else None
        if isinstance(eid, str) and eid:
            return eid
    return default


@workflow.defn(name=WORKFLOW_NAME)
class SessionWorkflow:
    """One agent session request, durable: survives its workers."""

    def __init__(self) -> None:
        self._turns = 0
        self._status = "starting"

    @workflow.query(name="managedloop.progress")
    def progress(self) -> dict[str, Any]:
        """Where the session is: ``{"status", "turns"}`` (cheap; safe to poll)."""
        return {"status": self._status, "turns": self._turns}

    @workflow.run
    async def run(self, start: SessionStart) -> dict[str, Any]:
        info = workflow.info()
        base = f"managedloop:temporal:{info.workflow_id}:{info.run_id}"
        machine = Machine(
            LoopOptions(
                max_turns=start.max_turns,
                terminal_tool=start.terminal_tool,
                require_terminal_tool=start.require_terminal_tool,
            )
        )
        machine.begin_request()
        heartbeat = timedelta(seconds=start.heartbeat_timeout)
        opened: Opened = await workflow.execute_activity(
            "managedloop.open",
            OpenCall(
                provider=start.provider,
                agent=start.agent,
                session_id=start.resume,
                transcript_key=f"{base}:0",
            ),
            result_type=Opened,
            task_queue=start.task_queue,
            start_to_close_timeout=timedelta(seconds=start.turn_timeout),
            heartbeat_timeout=heartbeat,
            retry_policy=_RETRY,
        )
        session_id, transcript = opened.session_id, opened.transcript_key
        next_input: TurnInput = UserMessage(start.prompt)
        last_event_id = ""
        seq = 0
        while True:
            seq += 1
            self._status = "turn"
            done: TurnDone = await workflow.execute_activity(
                "managedloop.turn",
                TurnCall(
                    provider=start.provider,
                    agent=start.agent,
                    session_id=session_id,
                    transcript_in=transcript,
                    transcript_out=f"{base}:{seq}",
                    input=encode_input(machine.before_turn(next_input)),
                    last_event_id=last_event_id,
                ),
                result_type=TurnDone,
                task_queue=start.task_queue,
                start_to_close_timeout=timedelta(seconds=start.turn_timeout),
                heartbeat_timeout=heartbeat,
                retry_policy=_RETRY,
            )
            session_id, transcript = done.session_id, done.transcript_key
            last_event_id = _last_id(done.turn.get("events") or (), last_event_id)
            self._turns = seq
            action = machine.on_turn(TurnResult.from_dict(done.turn), session_id)
            if isinstance(action, Finish):
                self._status = "done"
                result = action.result.to_dict()
                result["transcript_key"] = transcript
                return result
            if isinstance(action, RunTools):
                self._status = "tools"
                next_input = await self._run_tools(start, session_id, action.tool_uses)
            else:
                next_input = action.input

    async def _run_tools(
        self, start: SessionStart, session_id: str | None, uses: Any
    ) -> ToolResults:
        calls = [
            workflow.execute_activity(
                "managedloop.tool",
                ToolCall(
                    agent=start.agent,
                    use=use.to_dict(),
                    session_id=session_id,
                    provider=start.provider,
                    timeout=start.tool_timeout,
                ),
                result_type=dict,
                task_queue=start.tool_queues.get(use.name, start.task_queue),
                # The tool's own timeout bounds it; this bound is for a lost worker.
                start_to_close_timeout=timedelta(seconds=start.turn_timeout),
                heartbeat_timeout=timedelta(seconds=start.heartbeat_timeout),
                retry_policy=_RETRY,
            )
            for use in uses
        ]
        results = await asyncio.gather(*calls)
        tool_uses: list[ToolUse] = list(uses)
        return ToolResults(tool_uses=tool_uses, results=[ToolResult.from_dict(r) for r in results])
