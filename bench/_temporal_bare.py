"""The baseline of ``bench.temporal``: a bare ``temporalio`` workflow running the same
activities as a managedloop durable session, on the same server and the same workers.

:class:`BareSession` calls ``managedloop.open``, ``managedloop.turn``, ``managedloop.tool``
and ``managedloop.turn`` again (the four activities of a one-tool-call session; the worker
processes of ``bench._temporal_worker`` serve them on the baseline's own queue, built as
``mlt.worker`` builds them) with the same arguments, timeouts and retry policy as
``SessionWorkflow``, and nothing else: no loop machine, no memo, no event list, no
queries. What the managedloop session costs above it is its workflow's own work.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from managedloop.contrib.temporal._wire import (
        OpenCall,
        Opened,
        ToolCall,
        TurnCall,
        TurnDone,
        encode_input,
    )
    from managedloop.contrib.temporal._workflow import _RETRY
    from managedloop.hosts import ToolResults, UserMessage
    from managedloop.results import ToolResult, ToolUse

# SessionWorkflow's own defaults (``mlt.start``'s turn_timeout and heartbeat_timeout).
_TIMEOUTS: dict[str, Any] = {
    "start_to_close_timeout": timedelta(seconds=1800),
    "heartbeat_timeout": timedelta(seconds=10),
    "retry_policy": _RETRY,
}


@workflow.defn(name="bench.BareSession")
class BareSession:
    @workflow.run
    async def run(self, queue: str, prompt: str) -> str:
        base = f"bare:{workflow.info().workflow_id}"
        opened: Opened = await workflow.execute_activity(
            "managedloop.open",
            OpenCall(provider="local", agent="weather", session_id=None, transcript_key=base),
            result_type=Opened,
            task_queue=queue,
            **_TIMEOUTS,
        )
        session_id, key, inline = opened.session_id, opened.transcript_key, opened.transcript
        next_input: Any = UserMessage(prompt)
        for seq in range(1, 10):
            done: TurnDone = await workflow.execute_activity(
                "managedloop.turn",
                TurnCall(
                    provider="local",
                    agent="weather",
                    session_id=session_id,
                    transcript_in=key,
                    transcript_out=f"{base}:{seq}",
                    input=encode_input(next_input),
                    transcript=inline,
                ),
                result_type=TurnDone,
                task_queue=queue,
                **_TIMEOUTS,
            )
            session_id, key, inline = done.session_id, done.transcript_key, done.transcript
            uses = done.turn.get("custom_tool_uses") or []
            if not uses:
                return str(done.turn["terminal"])
            results = []
            for use in uses:
                out = await workflow.execute_activity(
                    "managedloop.tool",
                    ToolCall(agent="weather", use=use, session_id=session_id, provider="local"),
                    result_type=dict,
                    task_queue=queue,
                    **_TIMEOUTS,
                )
                results.append(ToolResult.from_dict(out["result"]))
            next_input = ToolResults(
                tool_uses=[ToolUse.from_dict(u) for u in uses], results=results
            )
        raise RuntimeError("the session did not end in 9 turns")
