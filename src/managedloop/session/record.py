"""The session record: what a person looking at sessions (``managedloop console``) reads.

Opt in with ``ml.run(..., record=store)`` (or ``ml.start``; or process-wide with
``ml.configure(record=store)``), where ``store`` is any :class:`~managedloop.stores.Store`
or a :class:`SessionRecord` over one (to choose the retention). ``record=`` is its own
option, apart from the ``store=`` of the provisioning verbs and of durable sessions (which
hold handles and transcripts): one store may serve both, under separate keys.

What is kept, under ``ml:record:`` (the layout is what :class:`SessionRecord`'s readers
read; the console reads nothing else):

* ``ml:record:session:<session id>`` -- the summary: host, agent, model, status
  (``running``, ``parked``, ``done``, ``failed``, ``stopped``: cancelled by its timeout or
  its caller), terminal, reason and stop reason of the
  last request, the error of a failed one, usage summed over the session's requests (cost
  where the host gives one), turns, requests, first and last activity, the number of
  timeline entries and the pending approvals (id, tool, reason);
* ``ml:record:events:<session id>:<chunk>`` -- the timeline, :data:`CHUNK` entries a key:
  the prompt, each raw host event as it arrives, each turn (text, tool calls with input,
  usage), the tool results sent, approvals asked and decided, the terminal, errors;
* ``ml:record:parked:<session id>`` -- a session parked on ``approval_required``: the
  result to resume from (``SessionResult.to_dict()`` without its events), the approvals
  it waits on, the decisions taken so far and who resumes it.

Retention: a session keeps its newest ``max_events`` timeline entries (default 1,000; the
oldest chunk goes as a new one starts, so between ``max_events - CHUNK`` and
``max_events`` are readable), and every string in an entry is cut at ``max_chars``
(default 4,000) characters, saying how much was cut. Summaries stay until
:meth:`SessionRecord.forget` (or :meth:`SessionRecord.prune`) removes them.

Every read-modify-write is one ``store.update`` (atomic on every backend, across
processes), so several processes record at once and nothing is lost: a timeline entry's
number is allocated by the update of the summary, then the entry is added to its chunk by
an update of that chunk. A decision is taken by one update of the parked entry
(:meth:`SessionRecord.decide`), which is how two people clicking Approve at once make one
decision: the second update sees the first's and changes nothing.

Recording never breaks a session: a store that fails is logged (``managedloop.record``)
and the session goes on.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import anyio

from managedloop.errors import InvalidOptionsError, ManagedLoopError
from managedloop.hosts import ToolResults, UserMessage
from managedloop.results import Approve, Deny, SessionInfo, SessionResult, TurnResult
from managedloop.stores import MemoryStore, Store

__all__ = ["CHUNK", "PREFIX", "Decided", "Recorder", "SessionRecord", "approvals_of", "as_record"]

logger = logging.getLogger("managedloop.record")

PREFIX = "ml:record:"
CHUNK = 100
"""Timeline entries per store key: one write per entry rewrites at most this many."""
CANCEL_WRITE_BOUND = 5.0  # seconds a cancelled request may spend recording that it stopped
_CANCELLED = "the request was cancelled (its timeout, or the caller) before a terminal"
MAX_DEPTH = 12  # deeper raw event data is shown as text: a timeline entry stays small
_SECRET_WORDS = ("api_key", "apikey", "secret", "token", "password", "authorization")

Clock = Callable[[], float]


@dataclass(frozen=True, kw_only=True, slots=True)
class Decided:
    """What :meth:`SessionRecord.decide` did: ``taken`` (this call's decision was recorded;
    ``False``: someone else's was already there, in ``by``/``decision``), and ``resume``
    (this call completed the set of decisions, so it is the one that resumes)."""

    taken: bool
    resume: bool
    decision: dict[str, Any] | None = None
    by: str | None = None
    parked: dict[str, Any] | None = None


def _redacted(key: str) -> bool:
    low = key.lower()
    return any(w in low for w in _SECRET_WORDS) and not low.endswith(("_tokens", "tokens"))


def clip(value: Any, max_chars: int, depth: int = 0) -> Any:
    """``value`` as plain JSON, strings cut at ``max_chars``, nesting cut at
    :data:`MAX_DEPTH`, and values under secret-looking keys replaced."""
    if isinstance(value, str):
        if len(value) <= max_chars:
            return value
        return value[:max_chars] + f"… [{len(value) - max_chars} more characters not kept]"
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth >= MAX_DEPTH:
        return clip(repr(value), max_chars)
    if isinstance(value, Mapping):
        return {
            str(k): "[redacted]" if _redacted(str(k)) else clip(v, max_chars, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [clip(v, max_chars, depth + 1) for v in value]
    return clip(repr(value), max_chars)


class SessionRecord:
    """A session record over ``store`` (see the module docstring).

    ``max_events``: timeline entries kept per session (>= :data:`CHUNK`); ``max_chars``:
    the longest string kept in an entry; ``clock``: seconds since the epoch (tests inject
    one).
    """

    def __init__(
        self,
        store: Store,
        *,
        max_events: int = 1000,
        max_chars: int = 4000,
        clock: Clock = time.time,
    ) -> None:
        if not all(callable(getattr(store, m, None)) for m in ("get", "update", "scan")):
            raise InvalidOptionsError(
                f"record= takes a Store (get, update, scan) or a SessionRecord, got {store!r}",
                option="record",
            )
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < CHUNK:
            raise InvalidOptionsError(
                f"max_events must be an int >= {CHUNK}, got {max_events!r}", option="max_events"
            )
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise InvalidOptionsError(
                f"max_chars must be an int >= 1, got {max_chars!r}", option="max_chars"
            )
        self.store = store
        self.max_events = max_events
        self.max_chars = max_chars
        self.clock = clock
        # A MemoryStore answers in microseconds: no worker-thread hop for it.
        self._inline = isinstance(store, MemoryStore)

    def __repr__(self) -> str:
        return f"SessionRecord({self.store!r}, max_events={self.max_events})"

    # -- keys ------------------------------------------------------------------------------

    @staticmethod
    def session_key(session_id: str) -> str:
        return f"{PREFIX}session:{session_id}"

    @staticmethod
    def chunk_key(session_id: str, chunk: int) -> str:
        return f"{PREFIX}events:{session_id}:{chunk:09d}"

    @staticmethod
    def parked_key(session_id: str) -> str:
        return f"{PREFIX}parked:{session_id}"

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._inline:
            return fn(*args)
        return await anyio.to_thread.run_sync(fn, *args)

    # -- writing ---------------------------------------------------------------------------

    def recorder(self, host: str, agent: Mapping[str, Any], model: str | None) -> Recorder:
        """The writer for one session (the driver makes one per connection)."""
        return Recorder(self, {"host": host, **agent, "model": model})

    def append(
        self,
        session_id: str,
        entry: Mapping[str, Any],
        summary: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> int:
        """Add one timeline entry (and apply ``summary`` to the summary in the same
        update); returns the entry's number. Blocking: call it in a worker thread."""
        now = self.clock()

        def bump(cur: dict[str, Any] | None) -> dict[str, Any]:
            base = dict(cur) if cur is not None else _new_summary(session_id, now)
            base["entries"] = int(base.get("entries", 0)) + 1
            base["updated_at"] = now
            return summary(base) if summary is not None else base

        new = self.store.update(self.session_key(session_id), bump)
        assert new is not None
        seq = int(new["entries"]) - 1
        item = {**clip(dict(entry), self.max_chars), "seq": seq, "at": now}
        chunk = seq // CHUNK

        def add(cur: dict[str, Any] | None) -> dict[str, Any]:
            items = list(cur["items"]) if cur is not None else []
            if not any(i.get("seq") == seq for i in items):
                items.append(item)
                items.sort(key=lambda i: int(i.get("seq", 0)))
            return {"items": items}

        self.store.update(self.chunk_key(session_id, chunk), add)
        kept_chunks = self.max_events // CHUNK
        if seq % CHUNK == 0 and chunk >= kept_chunks:
            self.store.delete(self.chunk_key(session_id, chunk - kept_chunks))
        return seq

    def summarize(self, session_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        now = self.clock()

        def change(cur: dict[str, Any] | None) -> dict[str, Any]:
            base = dict(cur) if cur is not None else _new_summary(session_id, now)
            base["updated_at"] = now
            return fn(base)

        self.store.update(self.session_key(session_id), change)

    # -- reading ---------------------------------------------------------------------------

    def sessions(self) -> list[dict[str, Any]]:
        """Every session's summary, most recent activity first."""
        found = self.store.scan(f"{PREFIX}session:")
        return sorted(found.values(), key=lambda s: -_number(s.get("updated_at")))

    def session(self, session_id: str) -> dict[str, Any] | None:
        return self.store.get(self.session_key(session_id))

    def events(self, session_id: str, since: int = 0) -> list[dict[str, Any]]:
        """The kept timeline entries numbered ``since`` and later, in order."""
        start = max(0, since) // CHUNK
        found = self.store.scan(f"{PREFIX}events:{session_id}:")
        out: list[dict[str, Any]] = []
        for key in sorted(found):
            if _number(key.rsplit(":", 1)[1]) < start:
                continue
            items = found[key].get("items")
            if isinstance(items, list):
                out.extend(
                    i for i in items if isinstance(i, dict) and _number(i.get("seq")) >= since
                )
        return out

    def parked(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The parked sessions (or the one of ``session_id``), oldest first."""
        if session_id is not None:
            one = self.store.get(self.parked_key(session_id))
            return [one] if one is not None else []
        found = self.store.scan(f"{PREFIX}parked:")
        return sorted(found.values(), key=lambda p: _number(p.get("at")))

    def decide(
        self,
        session_id: str,
        tool_use_id: str,
        decision: Approve | Deny,
        *,
        nonce: str,
        by: str,
    ) -> Decided:
        """Record one decision for a parked session, exactly once (blocking).

        ``nonce`` names the parked state the person saw: a decision for a state that has
        since been resumed or replaced is not taken. The call that completes the set of
        decisions gets ``resume=True`` and must resume the session (the console does it
        with ``ml.run(..., resume=parked["result"], approvals=...)``)."""
        token = secrets.token_hex(8)
        now = self.clock()
        mine = {**decision.to_dict(), "by": by, "at": now, "token": token}

        def take(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            if cur is None or cur.get("nonce") != nonce or cur.get("resume"):
                return cur
            decisions = dict(cur.get("decisions") or {})
            waiting = [a["id"] for a in cur.get("approvals", [])]
            if tool_use_id in decisions or tool_use_id not in waiting:
                return cur
            decisions[tool_use_id] = mine
            new = {**cur, "decisions": decisions}
            if set(waiting) <= set(decisions):
                new["resume"] = token
            return new

        new = self.store.update(self.parked_key(session_id), take)
        got = (new or {}).get("decisions", {}).get(tool_use_id)
        taken = isinstance(got, Mapping) and got.get("token") == token
        if taken:
            self.append(session_id, {"kind": "decision", "tool_use_id": tool_use_id, **mine})
        return Decided(
            taken=taken,
            resume=taken and (new or {}).get("resume") == token,
            decision=dict(got) if isinstance(got, Mapping) else None,
            by=got.get("by") if isinstance(got, Mapping) else None,
            parked=new,
        )

    def resume_failed(self, session_id: str, message: str) -> None:
        """Note on the parked entry that its resume failed (it stays: a tool may have run,
        so nobody should resume it blindly again)."""

        def note(cur: dict[str, Any] | None) -> dict[str, Any] | None:
            return None if cur is None else {**cur, "resume_error": message}

        self.store.update(self.parked_key(session_id), note)

    def forget(self, session_id: str) -> None:
        """Remove everything recorded of one session."""
        for key in self.store.scan(f"{PREFIX}events:{session_id}:"):
            self.store.delete(key)
        self.store.delete(self.parked_key(session_id))
        self.store.delete(self.session_key(session_id))

    def prune(self, older_than: float) -> int:
        """Forget the sessions whose last activity is more than ``older_than`` seconds ago
        and that wait on nobody; returns how many."""
        cutoff = self.clock() - older_than
        old = [
            s["session_id"]
            for s in self.sessions()
            if _number(s.get("updated_at")) < cutoff and s.get("status") != "parked"
        ]
        for sid in old:
            self.forget(sid)
        return len(old)


def _number(value: Any) -> float:
    """A stored number, or ``-1`` for anything else (a damaged entry sorts last, and never
    breaks a page)."""
    if isinstance(value, bool):
        return -1.0
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return -1.0


def _new_summary(session_id: str, now: float) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "status": "running",
        "started_at": now,
        "updated_at": now,
        "entries": 0,
        "requests": 0,
        "turns": 0,
        "usage": {"input_tokens": 0, "output_tokens": 0, "cost_usd": None},
        "pending": [],
    }


def as_record(value: Any) -> SessionRecord | None:
    """``record=`` as a :class:`SessionRecord` (a bare store gets the default retention)."""
    if value is None or isinstance(value, SessionRecord):
        return value
    return SessionRecord(value)


class Recorder:
    """One session's writer; every method is called by the driver and never raises."""

    def __init__(self, record: SessionRecord, meta: Mapping[str, Any]) -> None:
        self.record = record
        self.meta = {k: meta.get(k) for k in ("host", "agent", "agent_id", "model")}

    async def _safely(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            await self.record._call(fn, *args)
        except Exception:  # a broken store must not break the session it records
            logger.exception("the session record could not be written")

    def _sid(self, info: SessionInfo) -> str | None:
        return info.session_id

    async def _add(
        self,
        info: SessionInfo,
        entry: dict[str, Any],
        summary: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        sid = self._sid(info)
        if sid:
            await self._safely(self.record.append, sid, entry, summary)

    def wrap(self, on_event: Callable[..., Any] | None) -> Callable[..., Any]:
        """The driver's event hook: record each raw event, then call the handler's own."""

        async def recorded(event: Any, info: SessionInfo) -> None:
            if isinstance(event, Mapping) and event.get("type") != "managedloop.text_delta":
                await self._add(info, {"kind": "event", "type": _type(event), "data": event})
            if on_event is not None:
                value = on_event(event, info)
                if hasattr(value, "__await__"):
                    await value

        return recorded

    async def begin(self, info: SessionInfo) -> None:
        meta = self.meta

        def running(s: dict[str, Any]) -> dict[str, Any]:
            return {
                **s,
                **{k: v for k, v in meta.items() if v is not None or k not in s},
                "status": "running",
                "requests": int(s.get("requests", 0)) + 1,
                "error": None,
            }

        sid = self._sid(info)
        if sid:
            await self._safely(self.record.summarize, sid, running)

    async def sent(self, info: SessionInfo, step: Any) -> None:
        if isinstance(step, UserMessage):
            await self._add(info, {"kind": "prompt", "text": step.text})
        elif isinstance(step, ToolResults):
            results = [
                {"tool_use_id": r.tool_use_id, "text": r.text, "is_error": r.is_error}
                for r in step.results
            ]
            decisions = {k: v.to_dict() for k, v in step.decisions.items()}
            await self._add(
                info,
                {
                    "kind": "tool_results",
                    "results": results,
                    **({"decisions": decisions} if decisions else {}),
                },
            )

    async def turn(self, info: SessionInfo, turn: TurnResult) -> None:
        usage = turn.usage
        entry = {
            "kind": "turn",
            "text": turn.text,
            "terminal": turn.terminal.value,
            "stop_reason": turn.stop_reason,
            "tool_uses": [
                {"id": u.id, "name": u.name, "input": u.input, "input_error": u.input_error}
                for u in (*turn.custom_tool_uses, *turn.server_tool_uses)
            ],
            "usage": _usage(usage) if usage is not None else None,
        }

        def counted(s: dict[str, Any]) -> dict[str, Any]:
            return {**s, "turns": int(s.get("turns", 0)) + 1}

        await self._add(info, entry, counted)

    async def finish(self, result: SessionResult) -> None:
        sid = result.session_id
        if not sid:
            return
        pending = result.pending
        approvals = (
            [
                {
                    "id": a.id,
                    "name": a.tool_use.name,
                    "input": a.tool_use.input,
                    "reason": a.reason,
                    "source": a.source,
                }
                for a in pending.approvals
            ]
            if pending is not None
            else []
        )
        record = self.record
        if pending is not None:
            parked = {
                "session_id": sid,
                **self.meta,
                "nonce": secrets.token_hex(8),
                "at": record.clock(),
                "approvals": approvals,
                "decisions": {},
                "result": replace(result, events=[]).to_dict(),
            }
            await self._safely(record.store.update, record.parked_key(sid), lambda _: parked)
        else:
            await self._safely(record.store.update, record.parked_key(sid), lambda _: None)
        usage = _usage(result.usage)
        status = "parked" if pending is not None else "done"
        short = [{k: a[k] for k in ("id", "name", "reason")} for a in approvals]

        def ended(s: dict[str, Any]) -> dict[str, Any]:
            total = dict(s.get("usage") or {})
            for k in ("input_tokens", "output_tokens"):
                total[k] = int(total.get(k) or 0) + int(usage.get(k) or 0)
            if usage.get("cost_usd") is not None:
                total["cost_usd"] = float(total.get("cost_usd") or 0.0) + usage["cost_usd"]
            return {
                **s,
                "status": status,
                "terminal": result.terminal.value,
                "reason": result.reason,
                "stop_reason": result.stop_reason,
                "usage": total,
                "pending": short,
            }

        entry: dict[str, Any] = {
            "kind": "pending" if pending is not None else "terminal",
            "terminal": result.terminal.value,
            "reason": result.reason,
            "stop_reason": result.stop_reason,
            "text": result.text,
        }
        if pending is not None:
            entry["approvals"] = approvals
        await self._safely(record.append, sid, entry, ended)

    async def cancelled(self, info: SessionInfo) -> None:
        """The request was cancelled (a timeout, the caller): written under a shield,
        bounded so a slow store cannot hold the cancellation up."""

        def stopped(s: dict[str, Any]) -> dict[str, Any]:
            return {**s, "status": "stopped", "error": {"code": "cancelled", "message": _CANCELLED}}

        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_WRITE_BOUND):
            await self._add(
                info, {"kind": "error", "code": "cancelled", "message": _CANCELLED}, stopped
            )

    async def failed(self, info: SessionInfo, exc: ManagedLoopError) -> None:
        error = {"code": exc.code, "type": type(exc).__name__, "message": str(exc)}

        def broke(s: dict[str, Any]) -> dict[str, Any]:
            return {**s, "status": "failed", "error": error}

        await self._add(info, {"kind": "error", **error}, broke)


def _type(event: Mapping[str, Any]) -> str | None:
    kind = event.get("type")
    if isinstance(kind, str):
        return kind
    first = next(iter(event), None)
    return first if isinstance(first, str) else None


def _usage(usage: Any) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd,
    }


def approvals_of(parked: Mapping[str, Any]) -> dict[str, Approve | Deny]:
    """The decisions of a parked entry as ``approvals=`` takes them."""
    out: dict[str, Approve | Deny] = {}
    for tid, d in (parked.get("decisions") or {}).items():
        out[tid] = Approve() if d.get("decision") == "approve" else Deny(str(d.get("message", "")))
    return out
