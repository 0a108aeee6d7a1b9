"""The emulated Claude Managed Agents session: events, statuses and the scripted run.

All of it runs on the emulator's own event loop (one thread), so no locking is needed
beyond that loop. Wire shapes follow ``anthropic`` SDK types (a test validates every
emitted event against them):

* every event has ``id`` (``sevt_``), ``type`` and ``processed_at``;
* a run starts with ``session.status_running`` and ends with ``session.status_idle``
  (``end_turn``, ``requires_action{event_ids}``, ``retries_exhausted``) or
  ``session.status_terminated``;
* sent user events are echoed onto the stream and into the history, with server ids;
* the stream does not replay: a connection sees only events emitted after it opened;
* every model request ends with ``span.model_request_end`` (its tokens, cache reads and
  writes) and a ``session.usage`` snapshot of the whole session so far: tokens, a list cost
  at the emulated prices (:data:`PRICES`) and the active seconds; a session created with a
  ``budget`` idles ``budget_reached`` once that list cost reaches it;
* a ``refusal`` stop (``Reply(stop_reason="refusal")``) carries ``stop_details``;
* a built-in tool use is evaluated against the agent's permission policies
  (:mod:`managedloop.testing._claude.permissions`): ``always_ask`` / ``auto`` hold it for a
  ``user.tool_confirmation`` (``allow`` runs it, ``deny`` answers it with an error
  ``agent.tool_result`` carrying the deny message);
* on a ``self_hosted`` environment a built-in tool use is the worker's: the run idles on
  ``requires_action`` naming the ``agent.tool_use`` until a ``user.tool_result`` answers
  it (see :mod:`managedloop.testing._claude.work_queue`), and new input (a message, a
  confirmation) or a new built-in call of a session whose work item has stopped queues a
  new one.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import Any

from managedloop.results import ToolResult
from managedloop.testing._claude.faults import ClaudeFaults
from managedloop.testing._claude.permissions import evaluate
from managedloop.testing.script import (
    Fail,
    Grade,
    ModelRequest,
    Reply,
    ScriptedAgent,
    ScriptExhaustedError,
)
from managedloop.tools import ToolDefinition

__all__ = ["DROP", "EmuSession", "now_iso"]

DROP = object()
"""Queue marker: cut this stream now."""
CLOSE = object()
"""Queue marker: end this stream cleanly (session deleted)."""

# The error types the SDK's ``session.error`` union knows; anything else is reported as
# ``unknown_error`` so that every emitted event parses into the SDK's own types.
_SDK_ERROR_TYPES = frozenset(
    {
        "unknown_error",
        "model_overloaded_error",
        "model_rate_limited_error",
        "model_request_failed_error",
        "mcp_connection_failed_error",
        "mcp_authentication_failed_error",
        "billing_error",
        "credential_host_unreachable_error",
        "tool_use_limit_reached_error",
        "compaction_limit_reached_error",
    }
)


PRICES = {"input": 300, "output": 1500, "cache_read": 30, "cache_write": 375}
"""The emulated list prices, in US cents per million tokens (a Sonnet-like table: the
service prices per model; the emulator has one table)."""
REFUSAL_DETAILS = {
    "type": "refusal",
    "category": None,
    "explanation": "The emulated model declined to answer.",
}


def list_cost_cents(usage: Mapping[str, int]) -> int:
    """The list cost of cumulative ``usage`` at :data:`PRICES`, in whole cents."""
    micro = (
        usage["input_tokens"] * PRICES["input"]
        + usage["output_tokens"] * PRICES["output"]
        + usage["cache_read_input_tokens"] * PRICES["cache_read"]
        + usage["cache_creation_input_tokens"] * PRICES["cache_write"]
    )
    return micro // 1_000_000


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


class EmuSession:
    """One emulated session."""

    def __init__(
        self,
        *,
        session_id: str,
        agent: dict[str, Any],
        environment_id: str,
        metadata: dict[str, Any],
        title: str | None,
        script: ScriptedAgent,
        faults: ClaudeFaults,
        mint: Callable[[str], str],
        confirm_tools: frozenset[str] = frozenset(),
        cache_tokens: int = 0,
        budget: dict[str, Any] | None = None,
        self_hosted: bool = False,
        on_input: Callable[[EmuSession], None] | None = None,
    ) -> None:
        self.id = session_id
        self.agent = agent
        self.environment_id = environment_id
        self.metadata = metadata
        self.title = title
        self.script = script
        self.faults = faults
        self.mint = mint
        self.status = "idle"
        self.archived_at: str | None = None
        self.created_at = now_iso()
        self.events: list[dict[str, Any]] = []
        self.subscribers: list[asyncio.Queue[Any]] = []
        self.preview_subscribers: set[asyncio.Queue[Any]] = set()
        """Streams opened with ``event_deltas[]=agent.message``: they also get the
        ``event_start`` / ``event_delta`` previews of each message (never the history)."""
        self.turn = 0
        self.open_calls: dict[str, str] = {}
        """Custom tool uses still waiting for a result: id -> name (in call order)."""
        self.confirm_tools = confirm_tools
        """Server tools whose uses need a ``user.tool_confirmation`` (permission ``ask``)."""
        self.open_confirmations: dict[str, str] = {}
        """Server tool uses waiting for a confirmation: id -> name."""
        self.self_hosted = self_hosted
        """Built-in tools run on the user's worker (a ``self_hosted`` environment)."""
        self.on_input = on_input
        self.open_sandbox: dict[str, str] = {}
        """Built-in tool uses waiting for the worker's ``user.tool_result``: id -> name."""
        self.batch: list[str] = []
        """Every custom tool use id of the current blocking batch, in call order."""
        self.results: list[ToolResult] = []
        self.queued: list[str] = []
        self.outcome: dict[str, Any] | None = None
        self.run_task: asyncio.Task[None] | None = None
        self.resources: list[dict[str, Any]] = []
        self.vault_ids: list[str] = []
        self.usage = {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        }
        self.cache_tokens = cache_tokens
        """Prompt tokens the emulated model caches: the session's first model request
        writes them, every later one reads them (``ClaudeEmulator(cache_tokens=...)``)."""
        self.budget = budget
        self.active_seconds = 0.0
        self._running_since: float | None = None
        self.thread_id: str | None = None
        """When set, custom tool uses are cross-posted with this ``session_thread_id``."""

    # -- wire objects ---------------------------------------------------------------
    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "session",
            "status": self.status,
            "agent": self.agent,
            "environment_id": self.environment_id,
            "metadata": self.metadata,
            "title": self.title,
            "resources": self.resources,
            "vault_ids": list(self.vault_ids),
            "usage": self.usage_snapshot(),
            "stats": {"active_seconds": self.active(), "duration_seconds": 0.0},
            "outcome_evaluations": [],
            "created_at": self.created_at,
            "updated_at": now_iso(),
            "archived_at": self.archived_at,
        }

    def active(self) -> float:
        """Seconds the session has spent running so far."""
        since = self._running_since
        return self.active_seconds + (time.monotonic() - since if since is not None else 0.0)

    def cost_cents(self) -> int:
        return list_cost_cents(self.usage)

    def usage_snapshot(self) -> dict[str, Any]:
        """The session's cumulative usage as ``session.usage`` and the session carry it."""
        return {
            "input_tokens": self.usage["input_tokens"],
            "output_tokens": self.usage["output_tokens"],
            "cache_read_input_tokens": self.usage["cache_read_input_tokens"],
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.usage["cache_creation_input_tokens"],
                "ephemeral_1h_input_tokens": 0,
            },
            "list_cost": {"amount": str(self.cost_cents()), "currency": "USD"},
            "active_seconds": self.active(),
        }

    def _over_budget(self) -> bool:
        cost = (self.budget or {}).get("max_list_cost")
        amount = cost.get("amount") if isinstance(cost, Mapping) else None
        return isinstance(amount, str) and amount.isdigit() and self.cost_cents() >= int(amount)

    def tool_definitions(self) -> list[ToolDefinition]:
        out = []
        for t in self.agent.get("tools", []):
            if isinstance(t, dict) and t.get("type") == "custom":
                out.append(
                    ToolDefinition(
                        name=t["name"],
                        description=t.get("description", ""),
                        input_schema=t.get("input_schema") or {"type": "object"},
                    )
                )
        return out

    # -- emission -------------------------------------------------------------------
    def emit(self, event: dict[str, Any]) -> dict[str, Any]:
        """Record ``event`` in the history and deliver it to live streams (faults apply)."""
        event.setdefault("id", self.mint("sevt_"))
        event.setdefault("processed_at", now_iso())
        self.events.append(event)
        index = len(self.events)  # 1-based index of this event
        for point in self.faults.drop_stream_after:
            if index == point + 1 and point not in self.faults.used_drops:
                self.faults.used_drops.add(point)
                for queue in self.subscribers:
                    queue.put_nowait(DROP)
        for queue in self.subscribers:
            queue.put_nowait(event)
        limit = self.faults.terminate_after
        if limit is not None and index >= limit and self.status != "terminated":
            self.terminate()
        return event

    def terminate(self) -> None:
        self.status = "terminated"
        self._stopped()
        self.open_calls.clear()
        self.open_sandbox.clear()
        task, self.run_task = self.run_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self.emit({"type": "session.status_terminated"})
        if task is asyncio.current_task():
            raise asyncio.CancelledError

    def close_streams(self) -> None:
        for queue in self.subscribers:
            queue.put_nowait(CLOSE)

    async def _pause(self) -> None:
        if self.faults.event_delay:
            await asyncio.sleep(self.faults.event_delay)
        if self.status == "terminated":
            raise asyncio.CancelledError

    # -- inputs ---------------------------------------------------------------------
    def accept(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Apply one POST of user events; returns their echoes (with server ids)."""
        echoes = []
        start_user: str | None = None
        resumed = False
        interrupted = False
        outcome_started = False
        for raw in events:
            kind = raw["type"]
            echo = {k: v for k, v in raw.items() if k != "id"}
            if kind == "user.define_outcome":
                echo["outcome_id"] = self.mint("outc_")
                self.outcome = {
                    "outcome_id": echo["outcome_id"],
                    "description": raw.get("description", ""),
                    "max_iterations": raw.get("max_iterations") or 3,
                    "iteration": 0,
                }
                outcome_started = True
            if kind == "user.custom_tool_result" and self.faults.lose_results > 0:
                self.faults.lose_results -= 1
                echo["id"] = self.mint("sevt_")  # acknowledged, never recorded nor emitted
                echo["processed_at"] = None
                echoes.append(echo)
                continue
            if kind in ("user.tool_result", "user.custom_tool_result"):
                # A sandbox tool's result names its call tool_use_id, a custom tool's
                # custom_tool_use_id; each closes its own kind of open call.
                sandbox = kind == "user.tool_result"
                tid = raw["tool_use_id" if sandbox else "custom_tool_use_id"]
                (self.open_sandbox if sandbox else self.open_calls).pop(tid, None)
                content = raw.get("content") or []
                text = "".join(b.get("text", "") for b in content if isinstance(b, dict))
                self.results.append(
                    ToolResult(tool_use_id=tid, text=text, is_error=bool(raw.get("is_error")))
                )
                resumed = True
            if kind == "user.message":
                content = raw.get("content") or []
                text = "".join(b.get("text", "") for b in content if isinstance(b, dict))
                if self.status == "running":
                    self.queued.append(text)
                else:
                    start_user = text
            if kind == "user.interrupt":
                interrupted = True
            echoes.append(self.emit(echo))
            if kind == "user.tool_confirmation":
                tid = raw["tool_use_id"]
                name = self.open_confirmations.pop(tid, "tool")
                allowed = raw.get("result") == "allow"
                if allowed and self.self_hosted:
                    self.open_sandbox[tid] = name  # allowed: now the worker runs it
                    continue
                text = f"{name}: ok" if allowed else str(raw.get("deny_message") or "denied")
                self.emit(
                    {
                        "type": "agent.tool_result",
                        "tool_use_id": tid,
                        "content": [{"type": "text", "text": text}],
                        "is_error": not allowed,
                    }
                )
                resumed = True
            early = self.faults.stale_idle_early and kind == "user.custom_tool_result"
            if early and len(events) > 1 and raw is events[0]:
                last = events[-1].get("custom_tool_use_id")
                self.emit(
                    {
                        "type": "session.status_idle",
                        "stop_reason": {"type": "requires_action", "event_ids": [last]},
                    }
                )
        wakes = {"user.message", "user.tool_confirmation", "user.define_outcome"}
        if self.self_hosted and self.on_input is not None and wakes & {e["type"] for e in events}:
            self.on_input(self)  # a dormant session's new input queues work
        if interrupted:
            self._interrupt()
        elif outcome_started and self.status != "running":
            self._start(self.outcome["description"] if self.outcome else None, ())
        elif start_user is not None:
            self._start(start_user, ())
        elif resumed:
            self._after_results()
        return echoes

    def _interrupt(self) -> None:
        task, self.run_task = self.run_task, None
        if task is not None:
            task.cancel()
        if self.outcome is not None:
            self.outcome = None
        waiting = self.open_calls or self.open_confirmations or self.open_sandbox
        if self.status == "running" or waiting:
            self.open_calls.clear()
            self.open_confirmations.clear()
            self.open_sandbox.clear()
            self.batch = []
            self.results = []
            self.status = "idle"
            self._stopped()
            self.emit({"type": "session.status_idle", "stop_reason": {"type": "end_turn"}})

    def _after_results(self) -> None:
        if self.open_calls or self.open_confirmations or self.open_sandbox:
            waiting = (
                self.open_calls.keys() | self.open_confirmations.keys() | self.open_sandbox.keys()
            )
            blocking = [i for i in self.batch if i in waiting]
            if self.faults.split_requires_action:
                blocking = blocking[:1]
            self.emit(
                {
                    "type": "session.status_idle",
                    "stop_reason": {"type": "requires_action", "event_ids": blocking},
                }
            )
            return
        if not self.batch:
            return
        if self.faults.stale_idle and len(self.batch) > 1:
            self.emit(
                {
                    "type": "session.status_idle",
                    "stop_reason": {"type": "requires_action", "event_ids": [self.batch[-1]]},
                }
            )
        results, self.results, self.batch = self.results, [], []
        self._start(None, results)

    def _start(self, user_text: str | None, results: Any) -> None:
        self.status = "running"
        if self._running_since is None:
            self._running_since = time.monotonic()
        self.emit({"type": "session.status_running"})
        self.run_task = asyncio.get_running_loop().create_task(self._run(user_text, results))

    # -- the scripted run -----------------------------------------------------------
    async def _run(self, user_text: str | None, results: Any) -> None:
        try:
            await self._steps(user_text, list(results))
        except asyncio.CancelledError:
            return
        if self.queued and self.status == "idle":
            text = self.queued.pop(0)
            self._start(text, ())

    def _request(self, user_text: str | None, results: list[ToolResult]) -> ModelRequest:
        return ModelRequest(
            turn=self.turn,
            tools=self.tool_definitions(),
            user_text=user_text,
            tool_results=results,
            messages=list(self.events),
            system=self.agent.get("system"),
            model=(self.agent.get("model") or {}).get("id"),
        )

    def _next_is_grade(self) -> bool:
        script = self.script.script
        return (
            script is not None and self.turn < len(script) and isinstance(script[self.turn], Grade)
        )

    async def _steps(self, user_text: str | None, results: list[ToolResult]) -> None:
        while True:
            await self._pause()
            try:
                step = self.script.next_step(self._request(user_text, results))
            except ScriptExhaustedError as exc:
                step = Fail(message=str(exc), kind="unknown_error")
            self.turn += 1
            user_text, results = None, []
            if isinstance(step, Fail):
                kind = step.kind if step.kind in _SDK_ERROR_TYPES else "unknown_error"
                self.emit(
                    {
                        "type": "session.error",
                        "error": {
                            "type": kind,
                            "message": step.message,
                            "retry_status": {"type": "exhausted"},
                        },
                    }
                )
                await self._pause()
                self._idle({"type": "retries_exhausted"})
                return
            if isinstance(step, Grade):
                if await self._grade(step):
                    continue
                return
            if await self._reply(step):
                continue
            return

    async def _reply(self, step: Reply) -> bool:
        """Emit one model turn; ``True`` when the run continues without the client."""
        start = self.emit({"type": "span.model_request_start"})
        await self._pause()
        if step.text:
            message_id = self.mint("sevt_")
            await self._preview(message_id, step.text)
            self.emit(
                {
                    "id": message_id,
                    "type": "agent.message",
                    "content": [{"type": "text", "text": step.text}],
                }
            )
            await self._pause()
        custom: list[str] = []
        for call in step.tool_calls:
            verdict, evaluation = evaluate(self.agent.get("tools"), call.name)
            if call.server and call.name in self.confirm_tools:
                verdict, evaluation = "ask", {"type": "always_ask"}
            if call.server and verdict == "ask":
                ask = self.emit(
                    {
                        "type": "agent.tool_use",
                        "name": call.name,
                        "input": dict(call.input),
                        "evaluated_permission": "ask",
                        "evaluation": evaluation,
                    }
                )
                custom.append(ask["id"])  # blocks the run like a custom call
                self.open_confirmations[ask["id"]] = call.name
            elif call.server and self.self_hosted:
                use = self.emit(
                    {
                        "type": "agent.tool_use",
                        "name": call.name,
                        "input": dict(call.input),
                        "evaluated_permission": "allow",
                        "evaluation": evaluation,
                    }
                )
                custom.append(use["id"])  # the worker answers it: the run waits
                self.open_sandbox[use["id"]] = call.name
                if self.on_input is not None:
                    self.on_input(self)  # no live work item (one was stopped): queue one
            elif call.server:
                use = self.emit(
                    {
                        "type": "agent.tool_use",
                        "name": call.name,
                        "input": dict(call.input),
                        "evaluated_permission": "allow",
                        "evaluation": evaluation,
                    }
                )
                await self._pause()
                self.emit(
                    {
                        "type": "agent.tool_result",
                        "tool_use_id": use["id"],
                        "content": [{"type": "text", "text": f"{call.name}: ok"}],
                        "is_error": False,
                    }
                )
            else:
                event: dict[str, Any] = {
                    "type": "agent.custom_tool_use",
                    "name": call.name,
                    "input": dict(call.input),
                }
                if call.id is not None:
                    event["id"] = call.id
                if self.thread_id is not None:
                    event["session_thread_id"] = self.thread_id
                custom.append(self.emit(event)["id"])
                self.open_calls[custom[-1]] = call.name
            await self._pause()
        self._model_request_end(start["id"], step.usage)
        await self._pause()
        if self._over_budget() and not custom:
            self._idle({"type": "budget_reached"})
            return False
        if custom:
            self.batch = list(custom)
            blocking = custom[:1] if self.faults.split_requires_action else custom
            self.status = "idle"
            self.run_task = None
            self._stopped()
            self.emit(
                {
                    "type": "session.status_idle",
                    "stop_reason": {"type": "requires_action", "event_ids": blocking},
                }
            )
            return False
        if step.tool_calls:  # server tools only: the model carries on by itself
            return True
        if self.outcome is not None:
            if self._next_is_grade():
                return True
            return await self._grade(Grade(result="satisfied", explanation="auto-graded"))
        self._idle({"type": step.stop_reason or "end_turn"})
        return False

    async def _preview(self, message_id: str, text: str) -> None:
        """Stream ``text`` word by word to the streams that asked for previews."""
        if not self.preview_subscribers:
            return
        start = {"type": "event_start", "event": {"type": "agent.message", "id": message_id}}
        for queue in self.preview_subscribers:
            queue.put_nowait(start)
        words = text.split(" ")
        for i, word in enumerate(words):
            piece = word if i == len(words) - 1 else word + " "
            delta = {
                "type": "event_delta",
                "event_id": message_id,
                "delta": {
                    "type": "content_delta",
                    "index": 0,
                    "content": {"type": "text", "text": piece},
                },
            }
            for queue in self.preview_subscribers:
                queue.put_nowait(delta)
            await self._pause()

    def _model_request_end(self, start_id: str, usage: tuple[int, int] | None) -> None:
        """``span.model_request_end`` of one model request and the ``session.usage``
        snapshot after it (cache writes on the session's first request, reads after)."""
        inp, out = usage or (0, 0)
        first = self.usage["cache_creation_input_tokens"] == 0
        write = self.cache_tokens if first else 0
        read = 0 if first else self.cache_tokens
        for key, value in (
            ("input_tokens", inp),
            ("output_tokens", out),
            ("cache_read_input_tokens", read),
            ("cache_creation_input_tokens", write),
        ):
            self.usage[key] += value
        self.emit(
            {
                "type": "span.model_request_end",
                "model_request_start_id": start_id,
                "is_error": False,
                "model_usage": {
                    "input_tokens": inp,
                    "output_tokens": out,
                    "cache_creation_input_tokens": write,
                    "cache_read_input_tokens": read,
                },
            }
        )
        self.emit({"type": "session.usage", "usage": self.usage_snapshot(), "budget": self.budget})

    async def _grade(self, step: Grade) -> bool:
        """Emit one outcome evaluation; ``True`` when another revision cycle follows."""
        outcome = self.outcome or {
            "outcome_id": self.mint("outc_"),
            "max_iterations": 3,
            "iteration": 0,
        }
        iteration = outcome["iteration"]
        start = self.emit(
            {
                "type": "span.outcome_evaluation_start",
                "outcome_id": outcome["outcome_id"],
                "iteration": iteration,
            }
        )
        await self._pause()
        result = step.result
        if result == "needs_revision" and iteration + 1 >= outcome["max_iterations"]:
            result = "max_iterations_reached"
        self.emit(
            {
                "type": "span.outcome_evaluation_end",
                "outcome_evaluation_start_id": start["id"],
                "outcome_id": outcome["outcome_id"],
                "iteration": iteration,
                "result": result,
                "explanation": step.explanation,
                "usage": {
                    "input_tokens": 3,
                    "output_tokens": 2,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                },
            }
        )
        await self._pause()
        if result == "needs_revision":
            outcome["iteration"] = iteration + 1
            return True
        if step.text:
            self.emit({"type": "agent.message", "content": [{"type": "text", "text": step.text}]})
        self.outcome = None
        self._idle({"type": "end_turn"})
        return False

    def _stopped(self) -> None:
        """The run stops (an idle or termination): active time stops counting."""
        since, self._running_since = self._running_since, None
        if since is not None:
            self.active_seconds += time.monotonic() - since

    def _idle(self, stop_reason: dict[str, Any]) -> None:
        self.status = "idle"
        self.run_task = None
        self._stopped()
        idle: dict[str, Any] = {"type": "session.status_idle", "stop_reason": stop_reason}
        if stop_reason.get("type") == "refusal":
            idle["stop_details"] = dict(REFUSAL_DETAILS)
        self.emit(idle)
