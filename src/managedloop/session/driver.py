"""The turn driver: runs the sans-IO :class:`Machine` against a host :class:`Connection`.

This module holds the driver of one connection's requests (:class:`Driver`: turns, the
at-most-once tool ledger, the telemetry wrapping) and ``run``, which drives one request to
its terminal; ``run_sync`` is ``run`` behind ``anyio.run`` (no hand-written twin). Live
sessions (``start``) drive the same :class:`Driver` from :mod:`managedloop.session.live`.

Teardown: whatever ends a session (a result, an error, ``close()``, a timeout) the
in-flight turn is cancelled and the connection closed, under a shield so the close
completes. The partial result is attached to every error raised mid-request.

Rules the driver guarantees on every host (a fourth host written from outside included):

* **Bounded by default.** ``run(timeout=600)`` bounds the whole run (open, every turn and
  tool call); ``start(timeout=600)`` bounds opening the live session and each request,
  from the moment the session starts working on it to its terminal. On expiry the request
  is cancelled, the connection closed (a live session is then over) and
  :class:`SessionTimeoutError` is raised (by ``result()`` for a live session) with the
  partial result. ``timeout=None`` means no bound at all. A sync tool stuck past a
  timeout is abandoned in its thread, never awaited (:mod:`managedloop.handler`).
* **At most once per tool-use id.** The driver keeps every result it computed in this
  session, keyed by tool-use id, for the session's lifetime (one ``run``, or one live
  session across all its requests) and never shares it with another session. When a turn
  asks for an id that already has a result -- a host re-delivering a call after a
  reconnect, a server reusing an id, one id twice in one turn -- the stored result is sent
  again and the tool does not run again -- if it is the same call (name and input); a
  *different* call under a used id is answered with an error result naming the reuse and
  does not run. A call with no id always runs.
  ``custom_tool_uses`` lists the calls that ran: a re-sent result is not a second run.
* **Every raw event is kept.** Each raw event a turn yields is delivered and recorded
  (``SessionResult.events``), whatever its ``"id"``: the driver de-duplicates nothing (a
  host that may see an event twice drops the repeat itself; see :mod:`managedloop.hosts`).
  A turn's :class:`TurnResult` comes from the host as the turn's last item; a host that
  ends a turn without one, yields after it, or whose result does not hold the events it
  yielded fails the request with ``ProviderError(code="host_contract")``.
* **Inputs too deep to handle are answered, not run.** A decoded tool input nested deeper
  than :data:`~managedloop.handler.MAX_INPUT_DEPTH` (hosts that pass mappings may not have
  decoded it themselves) becomes an ``input_error``: an error result, the tool never runs.
* **BaseExceptions from tools propagate as themselves.** ``KeyboardInterrupt``,
  ``SystemExit`` (and other non-cancellation ``BaseException`` s) end ``run`` with that
  exception after the teardown; in a live session ``result()`` raises it, or leaving the
  ``async with`` does if nobody called ``result()``. Never a ``BaseExceptionGroup``.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack, nullcontext
from typing import TYPE_CHECKING, Any, Unpack

import anyio

from managedloop import telemetry
from managedloop._log import fields
from managedloop._loops import syncify
from managedloop.errors import (
    ManagedLoopError,
    ProviderError,
    SessionTimeoutError,
)
from managedloop.handler import FLAT_TYPES, MAX_INPUT_DEPTH, run_one_call, run_tool_calls, too_deep
from managedloop.hosts import (
    Connection,
    DefineOutcome,
    Provider,
    TextDelta,
    ToolInputDelta,
    ToolResults,
    TurnInput,
    TurnRestart,
    UserMessage,
    make_tool_results,
)
from managedloop.outcome import Outcome
from managedloop.results import (
    ApprovalRequest,
    Pending,
    RawEvent,
    SessionInfo,
    SessionResult,
    Terminal,
    ToolResult,
    ToolUse,
    TurnResult,
    Usage,
)
from managedloop.session import approvals as _approvals
from managedloop.session import output as _output
from managedloop.session.machine import CheckOutput, Finish, Machine, RunTools, Send
from managedloop.session.options import Prepared, SessionOptions, prepare

if TYPE_CHECKING:  # annotations only: anyio loads these with the first session
    from anyio.streams.memory import MemoryObjectSendStream

__all__ = [
    "DEFAULT_TIMEOUT",
    "NOTHING",
    "OUTPUT_PARTIAL",
    "TEXT_DELTA",
    "Driver",
    "close_driver",
    "deadline",
    "enter_lifespan",
    "kickoff",
    "open_driver",
    "run",
    "run_sync",
    "timed_out",
]

TEXT_DELTA = "managedloop.text_delta"
OUTPUT_PARTIAL = "managedloop.output_partial"
"""``handle_event`` gets ``{"type": OUTPUT_PARTIAL, "output": instance}`` as a typed
output streams (the answer's text under the text and native strategies, the output tool's
input under the tool strategy, on hosts that stream it): the output so far, validated
leniently."""
DEFAULT_PROMPT = "Begin."
DEFAULT_TIMEOUT = 600.0  # seconds; a run is bounded by default so a stuck host cannot hang a caller

logger = logging.getLogger("managedloop.session")

_TOO_DEEP = f"arguments are nested deeper than {MAX_INPUT_DEPTH} levels"
NOTHING: Any = object()  # no kickoff input: a live session waits for send()
_NONE: frozenset[str] = frozenset()


def _event_type(event: Any) -> str | None:
    if isinstance(event, Mapping):
        kind = event.get("type")
        if isinstance(kind, str):
            return kind
        return next(iter(event), None)  # Converse envelopes: the envelope key
    return None


class Driver:
    """Drives requests on one open connection."""

    _turn_meta: dict[str, Any] | None = None  # a traced turn's metadata (_turn_metadata)

    def __init__(self, prepared: Prepared, conn: Connection) -> None:
        self.p = prepared
        self.conn = conn
        self.machine = Machine(prepared.loop, conn)
        # At most once per tool-use id per session: every result computed on this
        # connection, by id. Lives as long as the driver (one run, one live session).
        self.done: dict[str, ToolResult] = {}
        # The call each stored result answers: a repeat of an id with another name or input
        # is a *different* call, which must not get this result (see _reused).
        # (The use itself, not a (name, input) tuple: it is alive anyway, in the request's
        # custom_tool_uses, and a tuple per call is one more object held per session.)
        self._calls: dict[str, ToolUse] = {}
        self._ran: set[str] = set()  # ids run in the current request
        # ids answered from ``done`` in the current request (a set from the first one on)
        self._resent: set[str] | frozenset[str] = _NONE
        # the turn's events so far; one list per driver, emptied in place at each turn's
        # start and end (a new list twice per turn showed in the collector's work)
        self.buffer: list[RawEvent] = []
        # events() subscribers; a list from the first subscription on (an in-flight run
        # holds one GC-tracked container less: see bench/README.md on the collector)
        self.subscribers: Sequence[MemoryObjectSendStream[RawEvent]] = ()
        # partial_outputs() subscribers, and the output's JSON of the turn so far: partial
        # typed outputs stream from the answer's text (text, native) or from the output
        # tool's input deltas (tool: _output_tool names it; _output_call is the call read)
        self.partial_subscribers: Sequence[MemoryObjectSendStream[Any]] = ()
        plan = prepared.output
        self._streams_output = plan is not None and plan.strategy != "tool"
        self._output_tool = plan.tool.name if plan is not None and plan.tool is not None else None
        self._output_call: str | None = None
        self._output_text = ""
        self._last_partial: Any = None
        # Interrupts by cancellation (hosts with ``interrupts_by_cancel``): the scope of
        # the request in flight; only interrupt() cancels it.
        self._scope: anyio.CancelScope | None = None
        handler = prepared.handler
        self._on_event: Callable[..., Any] | None = getattr(handler, "handle_event", None)
        self._info = self._make_info()
        # What telemetry names as the model: what the host says it sends, else the spec's.
        sent = getattr(conn, "model", None)
        self.model: str | None = sent if isinstance(sent, str) else prepared.model
        api = getattr(conn, "gen_ai_provider", None)  # the API it speaks (telemetry)
        self.gen_ai_provider: str | None = api if isinstance(api, str) else None
        # The session record (opt-in, managedloop.session.record): events through the hook
        rec = prepared.record
        self.rec = (
            rec.recorder(prepared.provider.name, prepared.agent_meta, self.model) if rec else None
        )
        if self.rec is not None:
            self._on_event = self.rec.wrap(self._on_event)

    def _make_info(self) -> SessionInfo:
        return SessionInfo(
            session_id=self.conn.session_id,
            provider=self.p.provider.name,
            metadata=self.p.info_metadata,
        )

    @property
    def info(self) -> SessionInfo:
        if self._info.session_id != self.conn.session_id:  # a reconnect may mint a new id
            self._info = self._make_info()
        return self._info

    def partial(self) -> SessionResult:
        return self._ran_only(
            self.machine.result(
                self.conn.session_id,
                transcript=self.conn.transcript(),
                pending_events=self.buffer,
            )
        )

    def _ran_only(self, result: SessionResult) -> SessionResult:
        """``result`` without the tool uses this request only re-sent a stored result for
        (they ran in an earlier request of this session): ``custom_tool_uses`` lists runs."""
        stale = self._resent - self._ran
        if not stale:
            return result
        kept = [u for u in result.custom_tool_uses if u.id not in stale]
        return dataclasses.replace(result, custom_tool_uses=kept)

    async def _deliver(self, event: RawEvent, *, raw: bool = True) -> None:
        if self._on_event is not None:
            value = self._on_event(event, self.info)
            if inspect.isawaitable(value):
                await value
        if raw:  # subscribers of events() get raw host events only, never text deltas
            for sub in self.subscribers:
                sub.send_nowait(event)

    async def _event(self, event: RawEvent) -> None:
        # Every raw event is kept: de-duplication is the host's (invariant 2 of
        # managedloop.hosts), so a host reusing an "id" across requests loses nothing.
        self.buffer.append(event)
        if self._on_event is not None or self.subscribers:
            await self._deliver(event)
        self._emit_event(event)

    def _emit_event(self, event: RawEvent) -> None:
        if telemetry.enabled("stream.event"):
            meta: dict[str, Any] = {"type": _event_type(event), "session_id": self.conn.session_id}
            if isinstance(event, Mapping):
                # Claude reports a model request's usage as ``model_usage``
                # (span.model_request_end); the other hosts' events say ``usage``.
                usage = event.get("usage", event.get("model_usage"))
                if usage is not None:
                    meta["usage"] = usage
            telemetry.emit("stream.event", None, meta, caller=self.p.caller)

    def _turn_metadata(self) -> dict[str, Any]:
        """A traced turn's span metadata (``session.turn``) for this session and its id,
        built once and reused (a span hears a merged copy, a span hook must not keep it):
        ``_drive`` sets the turn (and the input, with content capture) per turn."""
        meta = self._turn_meta = {
            "turn": 0,
            "model": self.model,
            "gen_ai_provider": self.gen_ai_provider,
            "provider": self.p.provider.name,
            "session_id": self.conn.session_id,
        }
        return meta

    def _ids(self) -> dict[str, Any]:
        return {"provider": self.p.provider.name, "session_id": self.conn.session_id}

    async def _turn(self, input: TurnInput) -> TurnResult:
        """Drive one ``turn()`` to its end; its :class:`TurnResult` (invariants 1-4 of
        :mod:`managedloop.hosts` are checked here)."""
        self.buffer.clear()
        if self._streams_output or self._output_tool is not None:
            self._output_text, self._last_partial, self._output_call = "", None, None
        stream = self.conn.turn(input)
        step = stream.__anext__  # what anext() calls, bound once per turn
        finished = False
        result: TurnResult | None = None
        try:
            while True:
                try:
                    item = await step()
                except StopAsyncIteration:
                    finished = True  # the generator is already closed
                    break
                except ManagedLoopError:
                    raise
                except Exception as exc:  # a host bug must surface as a named error
                    raise _host_failure(exc) from exc
                if result is not None:
                    raise _contract(f"turn() yielded {_kind(item)} after its TurnResult")
                if type(item) is dict:  # most items: a raw event (no isinstance chain)
                    if self._on_event is None and not self.subscribers:
                        self.buffer.append(item)  # nobody to deliver to: no await
                        if telemetry.enabled("stream.event"):
                            self._emit_event(item)
                    else:
                        await self._event(item)
                elif isinstance(item, TurnResult):
                    result = item
                elif isinstance(item, TextDelta):
                    if item.text and self._on_event is not None:
                        await self._deliver({"type": TEXT_DELTA, "text": item.text}, raw=False)
                    if (
                        self._streams_output
                        and item.text
                        and (self._on_event is not None or self.partial_subscribers)
                    ):  # _partial's own first check, without its coroutine when nobody listens
                        await self._partial(item.text)
                elif isinstance(item, ToolInputDelta):  # live only, like text; never kept
                    if (
                        item.name == self._output_tool
                        and item.partial_json
                        and (self._on_event is not None or self.partial_subscribers)
                    ):  # the output tool's input, and someone listens: else no coroutine
                        if item.id != self._output_call:  # another call of it: start again
                            self._output_call, self._output_text = item.id, ""
                            self._last_partial = None
                        await self._partial(item.partial_json)
                elif isinstance(item, TurnRestart):
                    self.buffer.clear()
                    self._output_text, self._last_partial, self._output_call = "", None, None
                else:
                    await self._event(item)
        finally:
            # Close the host's turn even when we leave early (an error, a cancellation), so
            # its in-flight request is torn down; shielded so the close itself completes.
            aclose = None if finished else getattr(stream, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
        if result is None:
            raise _contract("turn() ended without a TurnResult")
        if len(result.events) != len(self.buffer):
            raise _contract(
                f"the TurnResult holds {len(result.events)} events but turn() yielded "
                f"{len(self.buffer)} since its last RESTART"
            )
        self.buffer.clear()
        return result

    async def _partial(self, text: str) -> None:
        """The typed output as far as the streamed text (or the output tool's streamed
        input) gives it, to ``handle_event`` and the ``partial_outputs()`` subscribers,
        each time it changes (validated leniently)."""
        if self._on_event is None and not self.partial_subscribers:
            return
        self._output_text += text
        plan = self.p.output
        assert plan is not None
        value = _output.partial_output(plan, self._output_text)
        if value is None or value == self._last_partial:
            return
        self._last_partial = value
        if self._on_event is not None:
            await self._deliver({"type": OUTPUT_PARTIAL, "output": value}, raw=False)
        for sub in self.partial_subscribers:
            sub.send_nowait(value)

    async def _run_tools(self, uses: Sequence[ToolUse]) -> ToolResults:
        """Results for ``uses``, in order: a use whose id already has a result in this
        session (a host re-delivering a call, an id used twice) gets that result again and
        its tool does not run again; a use with no id always runs."""
        if telemetry.enabled("session.tool_uses"):
            telemetry.emit(
                "session.tool_uses",
                {"tool_use_count": len(uses)},
                {
                    "turn": self.machine.turns,
                    "tool_use_ids": [u.id for u in uses],
                    "session_id": self.conn.session_id,
                },
                caller=self.p.caller,
            )
        done = self.done
        if len(uses) == 1:  # most tool turns: one call
            all_fresh = uses[0].id not in done
        else:
            ids = [u.id for u in uses if u.id]
            all_fresh = len(set(ids)) == len(ids) and not any(i in done for i in ids)
        if all_fresh:  # the common case: nothing repeated (one await less)
            if len(uses) == 1:
                p, use = self.p, uses[0]
                result = await run_one_call(p.handler, use, self.info, p.tool_timeout, p.caller)
                uid = use.id
                if uid:  # _store, for the one use
                    self.done[uid] = result
                    self._calls[uid] = use
                    self._ran.add(uid)
                return make_tool_results([use], [result])
            else:
                ran = await run_tool_calls(
                    self.p.handler,
                    uses,
                    self.info,
                    max_concurrent=self.p.max_concurrent_tools,
                    timeout=self.p.tool_timeout,
                    caller=self.p.caller,
                )
            self._store(uses, ran)
            return make_tool_results(list(uses), ran)
        fresh: list[int] = []  # positions of the uses that run now
        claimed: set[str] = set()
        for i, use in enumerate(uses):
            uid = use.id
            if not uid:
                fresh.append(i)
            elif uid not in done and uid not in claimed:
                claimed.add(uid)
                fresh.append(i)
        computed = iter(await self._run_fresh([uses[i] for i in fresh]) if fresh else [])
        run_now = set(fresh)
        results: list[ToolResult] = []
        for i, use in enumerate(uses):
            if i in run_now:
                results.append(next(computed))
                continue
            assert use.id  # only uses with an id are ever answered from the store
            first = self._calls.get(use.id)
            if first is None or first.name != use.name or first.input != use.input:
                results.append(_reused(use))  # never another call's result, never a rerun
                continue
            results.append(done[use.id])  # _run_fresh stored the results it computed
            if use.id not in self._ran:
                self._resent = self._resent | {use.id}
        return make_tool_results(list(uses), results)

    async def _run_fresh(self, uses: Sequence[ToolUse]) -> list[ToolResult]:
        info = self.info
        results = await run_tool_calls(
            self.p.handler,
            uses,
            info,
            max_concurrent=self.p.max_concurrent_tools,
            timeout=self.p.tool_timeout,
            caller=self.p.caller,
        )
        self._store(uses, results)
        return results

    def _store(self, uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> None:
        """Keep each computed result under its use's id (at most once per id)."""
        # run_tool_calls returns exactly one result per use, in order (it asserts so)
        for use, result in zip(uses, results):  # noqa: B905 (zip's strict= costs a kwargs parse)
            if use.id:
                self.done[use.id] = result
                self._calls[use.id] = use
                self._ran.add(use.id)

    async def _answer(
        self,
        uses: Sequence[ToolUse],
        host_held: Sequence[ApprovalRequest] = (),
        carried: Pending | None = None,
    ) -> ToolResults | SessionResult:
        """The next input answering ``uses`` (and the host's held tool uses), or the
        ``approval_required`` result when a decision is still open
        (:mod:`managedloop.session.approvals`)."""
        p = self.p
        if not host_held and carried is None and not _approvals.may_hold(p.handler):
            return await self._run_tools(uses)  # nothing can be held: the plain path
        answer, answered = await _approvals.answer(
            uses,
            host_held,
            handler=p.handler,
            info=self.info,
            run=self._run_tools,
            approvals=p.approvals if carried is not None else {},
            confirm=p.confirm,
            carried=carried,
            host_state=getattr(self.conn, "pending_state", None),
        )
        if carried is not None:
            self.machine.add_tool_uses(answered)  # the calls answered in this process
        if isinstance(answer, ToolResults):
            return answer
        answered_ids = {u.id for u in answered if u.id}
        self.machine.unlist({u.id for u in uses if u.id and u.id not in answered_ids})
        result = self.machine.result(
            self.conn.session_id, Terminal.REQUIRES_ACTION, reason=_approvals.APPROVAL_REQUIRED
        )
        return dataclasses.replace(result, pending=answer)

    async def request(
        self, first: TurnInput | Pending | None, *, timeout: float | None = None
    ) -> SessionResult:
        """A live session's request, in its telemetry scope and ``session.request`` span:
        from ``first`` to a terminal (``None``: redrive pending tool uses; a
        :class:`Pending`: answer a parked request with ``approvals=`` / ``confirm=``), within
        ``timeout`` (:meth:`_within`). ``run`` drives :meth:`_request` itself: its scope and
        span cover the open too."""
        token = telemetry.enter_scope(self.p.caller)
        try:
            if not telemetry.span_enabled("session.request"):
                return await self._within(first, timeout)
            meta = {
                **self.p.agent_meta,
                "model": self.model,
                "gen_ai_provider": self.gen_ai_provider,
                **self._ids(),
            }
            with telemetry.span("session.request", meta) as extra:
                result = await self._within(first, timeout)
                extra.update(_request_stop(result))
            return result
        finally:
            telemetry.exit_scope(token)

    async def _within(
        self, first: TurnInput | Pending | None, timeout: float | None
    ) -> SessionResult:
        """A live session's request under its deadline: a timeout raises
        :class:`SessionTimeoutError` here, inside the ``session.request`` span, so the span
        ends with the timeout rather than with the cancel the deadline used."""
        with deadline(timeout) as scope:
            return await self._request(first)
        assert scope.cancelled_caught
        message = (
            f"the live session's request did not reach a terminal within {timeout}s;"
            " it was cancelled, the connection closed and the session ended"
        )
        raise timed_out(timeout, self.partial(), message)

    async def _request(
        self, first: TurnInput | Pending | None, *, interruptible: bool = True
    ) -> SessionResult:
        """One request: from ``first`` to a terminal (``None``: redrive pending tool uses;
        a :class:`Pending`: answer a parked request with ``approvals=`` / ``confirm=``).

        ``interruptible=False``: nothing can call :meth:`interrupt` (``run`` keeps its
        driver to itself), so the request runs without the cancel scope an interrupt
        cancels (entering and leaving one costs more than a turn)."""
        self.machine.begin_request()
        self._ran, self._resent = set(), _NONE
        if self.rec is not None:
            await self.rec.begin(self.info)
        try:
            if not interruptible:
                return await self._drive(first)
            with anyio.CancelScope() as scope:
                self._scope = scope
                try:
                    return await self._drive(first)
                finally:
                    self._scope = None
            # Only an interrupt cancels this scope (a timeout cancels an outer one).
            repair = getattr(self.conn, "interrupted", None)
            if repair is not None:
                repair()  # the host makes its state consistent (Local: answers open calls)
            stopped = dataclasses.replace(
                self.partial(), terminal=Terminal.TERMINATED, reason="interrupted"
            )
            return self._finish(stopped) if self.rec is None else await self._recorded(stopped)
        except ManagedLoopError as exc:
            if exc.partial_result is None:
                exc.partial_result = self.partial()
            if self.rec is not None:
                await self.rec.failed(self.info, exc)
            raise
        except anyio.get_cancelled_exc_class():
            if self.rec is not None:  # a timeout or the caller's cancel: not "running" on
                await self.rec.cancelled(self.info)
            raise

    def interrupt(self) -> bool:
        """Cancel the request in flight for an interrupt; ``False`` when none is."""
        if self._scope is None:
            return False
        self._scope.cancel()
        return True

    async def _drive(self, first: TurnInput | Pending | None) -> SessionResult:
        step: ToolResults | SessionResult | TurnInput
        if isinstance(first, Pending):
            self.conn.pending_tool_uses = []  # answered from the parked state, not redriven
            held = [a for a in first.approvals if a.source == "host"]
            step = await self._answer(first.tool_uses, held, first)
        elif first is None:
            pending = list(self.conn.pending_tool_uses)
            self.conn.pending_tool_uses = []
            tool = self.machine.options.output_tool
            outs = [u for u in pending if u.name == tool] if tool is not None else []
            if outs:  # a resumed session waits on its output call: check it, never run it
                others = [u for u in pending if u.name != tool]
                self.machine.add_tool_uses(others)
                check = CheckOutput(outs[0].input, others, outs, input_error=outs[0].input_error)
                step = await self._check_output(check)
            else:
                self.machine.add_tool_uses(pending)
                step = await self._answer(pending)
        else:
            step = first
        # Chosen once per request: an uninstrumented turn pays no telemetry check, and a
        # handler that asks for no approvals no approval check.
        traced = telemetry.span_enabled("session.turn")  # a flag: no bound method kept
        content = traced and telemetry.capture_content()  # each turn's input in its span
        may_hold = _approvals.may_hold(self.p.handler)
        machine, rec, conn = self.machine, self.rec, self.conn  # fixed for the session
        while True:
            if isinstance(step, SessionResult):
                return self._finish(step) if rec is None else await self._recorded(step)
            step = machine.before_turn(step)
            if rec is not None:
                await rec.sent(self.info, step)
            if traced:
                # The turn's span, opened and closed in this frame: a coroutine layer of its
                # own would cost a frame and a resumption per await of the host's I/O. It is
                # current while the host does that I/O, so a hook that makes it the current
                # trace span (managedloop.otel) parents the host's HTTP requests under it.
                meta = self._turn_meta
                if meta is None or meta["session_id"] != conn.session_id:
                    meta = self._turn_metadata()
                meta["turn"] = machine.turns
                if content:
                    meta = {**meta, "input": _input_content(step)}  # the input is not kept
                opened = telemetry.open_span("session.turn", meta)
                try:
                    turn = await self._turn(step)
                except BaseException as exc:
                    telemetry.close_span(opened, None, exc)
                    raise
                telemetry.close_span(opened, turn, None, _turn_stop)  # _turn_stop: listeners'
            else:
                turn = await self._turn(step)
            if turn.custom_tool_uses:  # _bounded's own first check, without the call
                turn = _bounded(turn)
            if rec is not None:
                await rec.turn(self.info, turn)
            action = machine.on_turn(turn, conn.session_id)
            # Neither the turn nor the action outlives this step: held across the tool calls
            # and the next model call, each turn's records (its result, events list, usage,
            # the action) would be promoted to the collector's old generation at 10,000
            # sessions and walked by every full collection (bench/README.md).
            del turn
            if isinstance(action, RunTools):
                uses, approvals = action.tool_uses, action.host_approvals
                del action
                if not approvals and not may_hold:  # _answer's plain path, inline
                    step = await self._run_tools(uses)
                else:
                    step = await self._answer(uses, approvals)
            elif isinstance(action, Finish):
                result = action.result
                return self._finish(result) if self.rec is None else await self._recorded(result)
            elif isinstance(action, CheckOutput):
                step = await self._check_output(action)
            else:
                step = action.input
                if isinstance(step, UserMessage) and step.reprompt:
                    self._log_reprompt()

    async def _recorded(self, result: SessionResult) -> SessionResult:
        result = self._finish(result)
        assert self.rec is not None
        await self.rec.finish(result)
        return result

    async def _check_output(self, check: CheckOutput) -> ToolResults | SessionResult | TurnInput:
        """The step after a typed output (:class:`CheckOutput`): the turn's other tool uses
        run first; then the output is validated, and the machine finishes with it or asks
        the model again (:meth:`Machine.on_output`)."""
        answered: ToolResults | None = None
        if check.tool_uses or check.host_approvals:
            ran = await self._answer(check.tool_uses, check.host_approvals)
            if isinstance(ran, SessionResult):
                return ran  # parked on a decision: the output is checked on the way back
            answered = ran
        plan = self.p.output
        assert plan is not None  # the machine checks outputs only with output=
        if plan.validators:
            value, errors = await plan.check(check.payload, check.input_error)
        else:  # pydantic alone: no coroutine
            value, errors = plan.validated(check.payload, check.input_error)
        if errors is not None and len(check.output_uses) > 1:
            for later in check.output_uses[1:]:  # several output calls: the first valid one
                value, again = await plan.check(later.input, later.input_error)
                if again is None:
                    errors = None
                    break
        if telemetry.enabled("session.output"):
            telemetry.emit(
                "session.output",
                {"error_count": len(errors or ())},
                {
                    "strategy": plan.strategy,
                    "valid": errors is None,
                    "turn": self.machine.turns,
                    "session_id": self.conn.session_id,
                },
                caller=self.p.caller,
            )
        action = self.machine.on_output(check, value, errors, answered, self.conn.session_id)
        if isinstance(action, Finish):
            return action.result
        assert isinstance(action, Send)
        if isinstance(action.input, UserMessage):
            self._log_reprompt()
        return action.input

    def _log_reprompt(self) -> None:
        logger.info(
            "session %s: turn %d did not end as required; the model is re-prompted",
            self.conn.session_id,
            self.machine.turns,
            extra=fields(
                "guard",
                guard="reprompt",
                host=self.p.provider.name,
                session_id=self.conn.session_id,
                turn=self.machine.turns,
            ),
        )

    def _finish(self, result: SessionResult) -> SessionResult:
        result = self._ran_only(result)
        if result.reason is not None:  # the library ended the request, not the host
            logger.info(
                "session %s stopped by the library: %s after %d turn(s)",
                result.session_id,
                result.reason,
                result.turns,
                extra=fields(
                    "stopped",
                    host=self.p.provider.name,
                    session_id=result.session_id,
                    reason=str(result.reason),
                    terminal=result.terminal.value,
                    turns=result.turns,
                ),
            )
        if result.transcript is None:  # the machine's results carry it already
            transcript = self.conn.transcript()
            if transcript is not None:
                result = dataclasses.replace(result, transcript=transcript)
        telemetry.emit(
            "session.terminal",
            None,
            {
                "terminal": result.terminal.value,
                "reason": result.reason,
                "session_id": result.session_id,
            },
            caller=self.p.caller,
        )
        return result


def _request_stop(result: SessionResult) -> dict[str, Any]:
    usage = result.usage
    return {
        "terminal": result.terminal.value,
        "stop_reason": result.stop_reason,
        "reason": result.reason,
        "turns": result.turns,
        **_usage_fields(usage),
        "session_id": result.session_id,
        "output_strategy": result.output_strategy,
    }


def _turn_stop(result: TurnResult) -> dict[str, Any]:
    """A turn's stop metadata (``telemetry.TABLE``), for the listeners of its span (a span
    hook reads the TurnResult), in one dict. ``_value_``: the enum's value without its
    descriptor call."""
    usage = result.usage
    uses = result.custom_tool_uses
    if usage is None:
        stop: dict[str, Any] = {
            "terminal": result.terminal._value_,
            "stop_reason": result.stop_reason,
            "tool_use_count": len(uses),
            **_NO_USAGE,
        }
    else:
        stop = {
            "terminal": result.terminal._value_,
            "stop_reason": result.stop_reason,
            "tool_use_count": len(uses),
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "cost_usd": usage.cost_usd,
        }
    if telemetry.capture_content():
        stop["output"] = result.text
        if uses:  # what the model asked for, with the text
            stop["tool_calls"] = [{"id": u.id, "name": u.name, "arguments": u.input} for u in uses]
    return stop


def _usage_fields(usage: Usage | None) -> dict[str, Any]:
    """The usage keys of a request's or turn's stop event (``telemetry.TABLE``)."""
    if usage is None:
        return dict(_NO_USAGE)
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cost_usd": usage.cost_usd,
    }


_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "cost_usd",
)
_NO_USAGE = dict.fromkeys(_USAGE_KEYS)


def _input_content(input: TurnInput) -> Any:
    """What a turn sends, as JSON-able data (only with telemetry.capture_content())."""
    if isinstance(input, UserMessage):
        return [{"role": "user", "content": input.text}]
    if isinstance(input, ToolResults):
        return [
            {"role": "tool", "tool_use_id": r.tool_use_id, "content": r.text} for r in input.results
        ]
    return None


def _bounded(turn: TurnResult) -> TurnResult:
    """``turn`` with every too-deeply nested tool input turned into an ``input_error``.

    Hosts that hand over decoded mappings (Claude) may not have run
    :func:`~managedloop.handler.decode_tool_input`; a 100k-deep input must be answered with
    an error result, not reach pydantic, a tool, or a recursive ``to_dict``.
    """
    uses = turn.custom_tool_uses
    for u in uses:  # a plain loop: this runs on every turn with tool uses
        if u.input_error is None:
            value = u.input
            if type(value) is dict:  # too_deep's flat-object case, without the call
                for v in value.values():
                    if type(v) not in FLAT_TYPES:
                        break
                else:
                    continue
            if too_deep(value):
                break
    else:
        return turn
    checked = [
        dataclasses.replace(u, input={}, input_error=_TOO_DEEP)
        if u.input_error is None and too_deep(u.input)
        else u
        for u in uses
    ]
    return dataclasses.replace(turn, custom_tool_uses=checked)


def deadline(timeout: float | None) -> anyio.CancelScope:
    return anyio.move_on_after(timeout if timeout is not None else math.inf)


def timed_out(
    timeout: float | None, partial: SessionResult | None, message: str
) -> SessionTimeoutError:
    return SessionTimeoutError(message, partial_result=partial, timeout=timeout)


def _contract(message: str) -> ProviderError:
    """A host broke the contract of :mod:`managedloop.hosts`: named, never silent."""
    return ProviderError(f"the host broke its contract: {message}", code="host_contract")


def _kind(item: object) -> str:
    return "a raw event" if isinstance(item, Mapping) else type(item).__name__


def _host_failure(exc: Exception) -> ManagedLoopError:
    if isinstance(exc, ManagedLoopError):
        return exc
    return ProviderError(f"the host failed: {type(exc).__name__}: {exc}", code="provider_error")


# -- the handler's lifespan (MCP servers): a generic hook, kept apart ----------------------


async def enter_lifespan(prepared: Prepared, stack: AsyncExitStack) -> Prepared:
    """``prepared`` with the handler that serves this session: a handler with ``lifespan()``
    (a Toolset, whose MCP servers connect there) is entered on ``stack`` here, when the
    session opens, and left when ``stack`` unwinds -- on every path out of the session."""
    lifespan = getattr(prepared.handler, "lifespan", None)
    if lifespan is None:
        return prepared
    return _serving(prepared, await stack.enter_async_context(lifespan()))


def _serving(prepared: Prepared, handler: Any) -> Prepared:
    """``prepared`` with ``handler`` (what a lifespan yielded) serving its tool calls."""
    if handler is prepared.handler:
        return prepared
    return dataclasses.replace(prepared, handler=handler)


# ------------------------------------------------------------------------------------------


async def open_driver(prepared: Prepared) -> Driver:
    """Open the connection (the caller has set the telemetry scope: the host's open-time
    calls carry the session's tags)."""
    conn = await prepared.provider.open(prepared.open_request)
    return Driver(prepared, conn)


async def close_driver(driver: Driver) -> None:
    # The whole close inside the shield: a close that enters cancel scopes of its own
    # (anyio-based clients) must run within one scope nesting, so it cannot be stepped
    # outside the shield first.
    with anyio.CancelScope(shield=True):
        await driver.conn.aclose()


def kickoff(
    conn: Connection, prompt: str | None, outcome: Outcome | None, pending: Pending | None = None
) -> Any:
    """The first request's input: the parked state of ``resume=`` when it has one (answered
    with ``approvals=``); ``None`` redrives the tool uses a resumed host is waiting on (the
    prompt is not injected); :data:`NOTHING` when neither prompt nor outcome."""
    if pending is not None:
        return pending
    if conn.resumed and conn.pending_tool_uses:
        return None
    if outcome is not None:
        return DefineOutcome(outcome)
    if prompt is not None:
        return UserMessage(prompt)
    return NOTHING


def _first_input(
    driver: Driver, prompt: str | None, outcome: Outcome | None
) -> TurnInput | Pending | None:
    first: TurnInput | Pending | None = kickoff(
        driver.conn, prompt, outcome, driver.p.open_request.pending
    )
    if first is not NOTHING:
        return first
    if driver.conn.resumed:
        raise ManagedLoopError(
            "resumed session has nothing pending and no prompt was given",
            code="nothing_to_send",
        )
    return UserMessage(DEFAULT_PROMPT)


async def run(
    provider: Provider,
    *,
    agent: Any,
    prompt: str | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    **options: Unpack[SessionOptions],
) -> SessionResult:
    """Run one request on ``provider`` to its terminal and return the :class:`SessionResult`.

    ``agent`` is an :class:`~managedloop.AgentSpec` (or, on managed hosts, a provisioned
    handle); ``prompt`` defaults to ``"Begin."``; ``options`` are the loop options of
    :class:`~managedloop.session.options.SessionOptions` (``max_turns=50``,
    ``turn_guard``, token budgets, terminal-tool enforcement, ``max_concurrent_tools=8``,
    ``tool_timeout``, ``handler``, ``resume``, ``outcome``, ``telemetry_metadata``).

    Library-made stops (``max_turns``, a turn guard or token budget, an unresolvable
    ``requires_action``, a missing terminal tool) are results with ``reason`` set. Failures
    raise a :class:`~managedloop.ManagedLoopError` carrying ``partial_result``; exceeding
    ``timeout`` (finite seconds, default 600; ``None`` for no bound) raises
    :class:`SessionTimeoutError` after the in-flight request and the connection are torn
    down. Every option is checked before anything is opened (``InvalidOptionsError``).
    """
    prepared, coerced = prepare(
        provider, agent=agent, options=options, timeout=timeout, prompt=prompt
    )
    token = telemetry.enter_scope(prepared.caller)  # open, request and close carry the tags
    try:
        opened: list[Driver] = []
        if not telemetry.span_enabled("session.request"):
            return await _run_within(prepared, prompt, coerced, timeout, opened)
        # The request's span covers the open too: a run's session create is part of it; and
        # the deadline, so a timeout ends it with the SessionTimeoutError, not a cancel.
        # It starts before the host says which model it sends: the stop names that one.
        meta = {**prepared.agent_meta, "model": prepared.model, "gen_ai_provider": None}
        meta |= {"provider": prepared.provider.name, "session_id": None}
        with telemetry.span("session.request", meta) as extra:
            result = await _run_within(prepared, prompt, coerced, timeout, opened)
            extra.update(_request_stop(result))
            extra["model"] = opened[0].model if opened else prepared.model
            extra["gen_ai_provider"] = opened[0].gen_ai_provider if opened else None
        return result
    finally:
        telemetry.exit_scope(token)


async def _run_within(
    prepared: Prepared,
    prompt: str | None,
    outcome: Outcome | None,
    timeout: float | None,
    opened: list[Driver],
) -> SessionResult:
    with deadline(timeout) as scope:
        # The handler's lifespan (see enter_lifespan), entered directly: one context, no
        # exit stack. A nullcontext (a Toolset without MCP servers: the common case) is not
        # entered or kept: it has nothing to leave, and it and its bound __aexit__ held for
        # the whole run would be two objects per session for the garbage collector to walk.
        lifespan = getattr(prepared.handler, "lifespan", None)
        context = lifespan() if lifespan is not None else None
        lifespan = None  # not held for the whole run
        if type(context) is nullcontext:
            prepared = _serving(prepared, context.enter_result)
            context = None  # not held either
        if context is None:
            return await _run_one(prepared, prompt, outcome, opened)
        async with context as handler:  # left on every path
            return await _run_one(_serving(prepared, handler), prompt, outcome, opened)
    assert scope.cancelled_caught
    raise timed_out(
        timeout,
        opened[0].partial() if opened else None,
        f"session did not reach a terminal within {timeout}s; its request was cancelled",
    )


async def _run_one(
    prepared: Prepared, prompt: str | None, outcome: Outcome | None, opened: list[Driver]
) -> SessionResult:
    driver = await open_driver(prepared)
    opened.append(driver)
    try:
        # run() set the telemetry scope and emits session.request (its span covers the
        # open); nothing can interrupt a run's driver
        return await driver._request(_first_input(driver, prompt, outcome), interruptible=False)
    finally:
        await close_driver(driver)


run_sync = syncify(run)


def _reused(use: ToolUse) -> ToolResult:
    """The answer to a call whose id this session already used for a *different* call (other
    name or input): it is not run (a tool runs at most once per id) and it does not get the
    other call's result, which would hand the model wrong data."""
    return ToolResult(
        tool_use_id=use.id or "",
        text=(
            f"tool-use id {use.id!r} was already used in this session for a different call; "
            f"this call to {use.name!r} was not run"
        ),
        is_error=True,
    )
