"""One Claude Managed Agents session: the event stream, turns, reconnects and sends.

Invariants this connection keeps (the loop relies on them, see :mod:`managedloop.hosts`):

* **Stream first.** The SSE stream is opened before the first event is sent (the API does
  not replay), and stays open across turns; events that arrive between two turns are read
  at the start of the next one.
* **Exactly once.** Every event is yielded once: ids seen on the stream or in the history
  are remembered, and a re-delivery is skipped. This is the only de-duplication there is:
  the loop keeps every event it is given.
* **The turn's own result.** A turn ends with its :class:`TurnResult`, normalized from the
  events it yielded and what the connection knows across turns (tool uses named by a
  later ``requires_action``, results already sent); an ``agent.message`` with text is
  followed by a :class:`TextDelta` of that text.
* **A turn ends at our own boundary.** A boundary (idle / terminated / error) counts only
  after the echo of the events this turn sent has been seen, so a late idle of an earlier
  turn cannot end a new one. A ``requires_action`` idle naming only tool uses that already
  have a result is stale (the server re-lists ids whose results have not "landed" yet) and
  does not end the turn, provided each result was seen landed (its echo on the stream or
  in the history, which is paged to check). A result we sent but cannot find there was
  not recorded: it is re-sent (see *Results are computed once*) and the turn goes on.
  Unknown ids also make us page the history before deciding.
* **Results are computed once, and recorded once.** Every tool result this connection
  sends is stored by tool-use id until it is seen landed (the id stays in the answered set
  for the life of the connection, one session), so a result the host lost is re-sent from
  the store, never recomputed: a tool runs at most once per tool-use id, and the loop is
  never asked to answer a use that already has a result. Lost results are found by
  reconciling what we sent against the session's history (what the host recorded): after
  every reconnect, when a ``requires_action`` idle names a result we sent, and when no
  echo of a sent result has arrived within ``result_echo_timeout``
  (:data:`RESULT_ECHO_TIMEOUT`; the stream is then reopened, which pages the history).
  Only results missing from the history are re-sent, each in a POST of its own, so a
  result the host did record is never sent twice, and a 400/409 on a re-send (the host no
  longer awaits that use) counts as recorded. A result re-sent :data:`RESULT_RESENDS`
  times and still not recorded raises ``ProviderError(code="result_not_recorded")``. So a
  POST whose every result was lost costs at most ``(RESULT_RESENDS + 1) x
  result_echo_timeout`` plus the requests, instead of waiting out the stream idle timeout
  on every reconnect.
* **Reconnect inside the turn.** A dropped stream (an error, a read timeout, or a clean end
  of body mid-turn) is reopened with capped exponential backoff (jittered, at most
  ``base x 2^min(n, 7)``, ``n`` reset when a turn ends; see :mod:`managedloop._retry`);
  the event history is paged and every event not yet yielded is yielded, in history
  order, before the new stream is read. The kickoff prompt is never repeated; the only
  thing re-sent is a stored result the history lacks.
* **Idempotent sends.** Event sends go out with the SDK's retries disabled. After an
  ambiguous failure (a timeout, a dropped connection, a 5xx: the server may have accepted
  the events) the history is checked and only what is not there is sent again: a tool
  result matches on ``custom_tool_use_id``; any other event matches an event of the same
  type and content *after the last event this connection had seen when the send began*
  (user messages carry no client id, so position is the idempotency key). A 429 was not
  accepted and is re-sent as is after ``retry-after``; a 408 is history-checked like a 5xx.
  What is retried at all is :func:`managedloop._retry.retryable`.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, cast

import anyio

from managedloop import _retry, telemetry
from managedloop._log import fields
from managedloop.errors import (
    APIStatusError,
    AuthenticationError,
    HostStreamError,
    InvalidOptionsError,
    ManagedLoopError,
    ProviderError,
    TransportError,
    UnsupportedError,
)
from managedloop.hosts import (
    ConnectionBase,
    DefineOutcome,
    RawInput,
    TextDelta,
    ToolResults,
    TurnInput,
    TurnItem,
    UserMessage,
)
from managedloop.providers.claude import _wire
from managedloop.providers.claude._api import Api, Lease
from managedloop.providers.claude._sse import SSEDecoder, StreamErrorFrameError
from managedloop.results import RawEvent

if TYPE_CHECKING:
    import httpx2
    from anthropic.types.beta.sessions import BetaManagedAgentsEventParams

__all__ = ["ClaudeConnection", "StreamOptions"]

logger = logging.getLogger("managedloop.providers.claude")

BACKOFF_EXP_CAP = 7  # 2^7: the reference's cap, ≤ 64 s with the default 0.5 s base
SEND_ATTEMPTS = 5  # an event send that fails 5 times in a row is a real outage
RESULT_ECHO_TIMEOUT = 30.0
"""Seconds to wait for the echo of a sent tool result before checking the history. The
API processes a ``user.custom_tool_result`` on receipt (cma-wire.md §2) and echoes it at
once, so 30 s of silence means it was probably lost; checking costs one reconnect and a
history page, and is safe at any time (only what the history lacks is re-sent)."""
RESULT_RESENDS = 3
"""Re-sends of one tool result the history does not show before the session fails with
``result_not_recorded``: a host that drops the same result 4 times will not record it."""
RETRY_AFTER_CAP = 60.0  # seconds; never park a turn longer than this on one retry-after
HISTORY_PAGE = 100
MAX_PREVIEWS = 64  # previewed messages tracked at once (a host that never concludes them)
_PREVIEWS = frozenset({"event_start", "event_delta"})


class StreamOptions:
    """Connection tuning (immutable per provider). ``reconnect`` and ``send`` are the
    retry policies (:mod:`managedloop._retry`) of stream reconnects and event sends."""

    __slots__ = (
        "backoff",
        "event_deltas",
        "idle_timeout",
        "max_reconnects",
        "reconnect",
        "result_echo_timeout",
        "send",
        "sleep",
    )

    def __init__(
        self,
        *,
        backoff: float,
        max_reconnects: int,
        idle_timeout: float,
        sleep: Callable[[float], Awaitable[None]] | None,
        result_echo_timeout: float = RESULT_ECHO_TIMEOUT,
        event_deltas: bool = False,
    ) -> None:
        self.event_deltas = event_deltas
        self.backoff = backoff
        self.max_reconnects = max_reconnects
        self.idle_timeout = idle_timeout
        self.sleep = sleep or _retry.sleep
        cap = backoff * 2**BACKOFF_EXP_CAP
        self.reconnect = _retry.Policy(
            retries=max_reconnects, base=backoff, cap=cap, retry_after_cap=RETRY_AFTER_CAP
        )
        self.send = _retry.Policy(
            retries=SEND_ATTEMPTS - 1, base=backoff, cap=cap, retry_after_cap=RETRY_AFTER_CAP
        )
        self.result_echo_timeout = result_echo_timeout


class _DropError(Exception):
    """The live stream ended or failed; ``reason`` is for telemetry and errors."""

    def __init__(self, reason: str, error: ManagedLoopError | None = None) -> None:
        self.reason = reason
        self.error = error
        super().__init__(reason)


class _Stream:
    """One open SSE response, decoded by our own :class:`SSEDecoder`."""

    def __init__(self, stack: AsyncExitStack, response: httpx2.Response) -> None:
        self._stack = stack
        self._chunks = response.aiter_bytes()
        self._decoder = SSEDecoder()
        self._ready: collections.deque[dict[str, Any]] = collections.deque()

    async def next(self) -> dict[str, Any]:
        import anthropic
        import httpx2

        while not self._ready:
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                raise _DropError("eof") from None
            except httpx2.ReadTimeout:
                raise _DropError("stream_idle_timeout") from None
            except (httpx2.HTTPError, anthropic.APIError, OSError) as exc:
                raise _DropError(type(exc).__name__) from exc
            try:
                self._ready.extend(self._decoder.feed(chunk))
            except StreamErrorFrameError as exc:
                raise _DropError(
                    "error_frame",
                    HostStreamError(
                        "the event stream reported an error", code="stream_error", body=exc.body
                    ),
                ) from exc
        return self._ready.popleft()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await self._stack.aclose()


def _replay_cut(history: Sequence[RawEvent], replay_from: str | None) -> int:
    """How many leading history events are old news (``OpenRequest.replay_from``)."""
    if replay_from is None:
        return len(history)
    if replay_from == "":
        return 0
    for i, event in enumerate(history):
        if event.get("id") == replay_from:
            return i + 1
    raise InvalidOptionsError(
        f"replay_from {replay_from!r} is not an event of this session's history",
        option="replay_from",
    )


class ClaudeConnection(ConnectionBase):
    """A session on Claude Managed Agents (see the module docstring for the invariants)."""

    def __init__(
        self,
        api: Api,
        session_id: str,
        *,
        options: StreamOptions,
        metadata: Mapping[str, Any],
        resumed: bool = False,
        lease: Lease | None = None,
        replay_from: str | None = None,
        created_with_events: bool = False,
    ) -> None:
        super().__init__()
        self._replay_from = "" if created_with_events else replay_from
        self._created_with_events = created_with_events
        """The session was created with ``initial_events``: it started running before
        the stream opened, so the history is read at start (all of it is this request's)
        and a first prompt found there is not sent again."""
        self._replayed_messages: list[tuple[str, str]] = []
        """(text, event id) of user messages in the replayed history: already sent, so a
        turn whose input is one of them sends nothing (``OpenRequest.replay_from``)."""
        self._replayed_results: dict[str, str] = {}
        """Tool-use id → event id of the results in the replayed history (already sent)."""
        self._replay_ids: list[str] = []
        """Event ids of the replayed echoes of this turn's input: the turn's gate opens at
        them, as at the echo of a send."""
        self.api = api
        self._lease = lease
        self.session_id = session_id
        self.resumed = resumed
        self.options = options
        self.metadata = dict(metadata)
        self._stream: _Stream | None = None
        self._seen: set[Hashable] = set()
        """Keys (``_wire.event_key``) of every event yielded: each is yielded once."""
        self._backlog: collections.deque[RawEvent] = collections.deque()
        self._tool_uses: dict[str, RawEvent] = {}
        self._host_uses: dict[str, RawEvent] = {}
        """Built-in and MCP tool uses seen, by id (a ``requires_action`` may hold them)."""
        self._decided: set[str] = set()
        """Host tool uses we sent a ``user.tool_confirmation`` for (never sent twice)."""
        self._answered: set[str] = set()
        """Tool uses with a result: sent by us (the POST was accepted) or seen landed."""
        self._confirmed: set[str] = set()
        """Tool uses whose result was seen on the stream or in the history."""
        self._results: dict[str, dict[str, Any]] = {}
        """Tool results sent but not yet seen landed, by tool-use id (re-sent, never
        redone). A landed one is dropped: ``_answered`` keeps its id, so the use is never
        answered again, and memory stays bounded by the results in flight."""
        self._resends: collections.Counter[str] = collections.Counter()
        self._echo_deadline: float | None = None
        """When a sent result still unechoed makes us check the history (``None``: none)."""
        self._planned_reconnect = False
        self._last_id: str | None = None
        self._attempts = 0
        self._turn_ids: set[str] = set()
        self._gate_open = True
        self._closed = False
        self._last_drop: _DropError | None = None
        self._streamed: dict[str, str] = {}
        """Text streamed by previews (``event_delta``), by the id of the message they
        preview, until that message arrives."""
        self._usage_mark: _wire.UsageMark = _wire.NO_USAGE
        """The session's cumulative usage at the last ``session.usage`` seen: a turn's
        cost and active time are what it grew by (a reattached session's past is not
        counted again)."""
        self.closers: list[Callable[[], Awaitable[None]]] = []
        """Run (shielded) first thing in :meth:`aclose`: what lives as long as the session."""

    # -- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Open the stream (before anything is sent); on reattach, read the history."""
        self._stream = await self._open_stream()
        if self.resumed or self._created_with_events:
            history = await self.history()
            cut = _replay_cut(history, self._replay_from)
            for event in history[:cut]:
                self._remember(event)
            for event in history[cut:]:
                # Replayed on the next turn; what we find we sent is never sent again.
                self._note_sent(event)
                self._backlog.append(event)
            self.pending_tool_uses = [
                u for u in _wire.unanswered_tool_uses(history) if u.id not in self._answered
            ]

    async def aclose(self) -> None:
        self._closed = True
        closers, self.closers = self.closers, []
        for close in closers:  # e.g. the session's in-process self-hosted worker
            with anyio.CancelScope(shield=True):
                await close()
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()
            telemetry.emit(
                "stream.done", None, {"session_id": self.session_id}, caller=self.metadata
            )
        if self._lease is not None:
            with anyio.CancelScope(shield=True):
                await self._lease.release()

    # -- the loop's interface -----------------------------------------------------------
    async def interrupt(self) -> None:
        if self._closed:
            raise UnsupportedError("the connection is closed", code="session_closed")
        await self.send([_wire.interrupt()])

    async def turn(self, input: TurnInput) -> AsyncIterator[TurnItem]:
        yielded: list[RawEvent] = []  # this turn's events, for its TurnResult
        usage_before = self._usage_mark  # cost and active time grow from here
        events = self._input_events(input)
        self._turn_ids = set(self._replay_ids)
        self._gate_open = not events and not self._replay_ids
        if events:
            ids = await self.send(events)
            if not ids:
                self._gate_open = True  # no echo id to wait for (e.g. an empty send answer)
            self._turn_ids.update(ids)
            if self._turn_ids & self._seen:
                self._gate_open = True
        while True:
            event = await self._next_event()
            if event.get("type") in _PREVIEWS:
                # A preview of an agent.message being written (event_deltas=True): its
                # text streams now; it is no event of the history (the buffered message
                # that follows is), so it is neither kept nor de-duplicated.
                if (delta := self._preview_delta(event)) is not None:
                    yield delta
                continue
            eid = event.get("id")
            if _wire.event_key(event) in self._seen:
                continue
            self._remember(event)
            if isinstance(eid, str) and eid in self._turn_ids:
                self._gate_open = True
            if not _wire.ends_turn(event):
                yielded.append(event)
                yield event
                if (delta := self._text_delta(event)) is not None:
                    yield delta
                continue
            final = await self._judge(event)
            while self._backlog and final:  # history paged while judging: older events first
                older = self._backlog.popleft()
                if _wire.event_key(older) in self._seen:
                    continue
                self._remember(older)
                yielded.append(older)
                yield older
                if (delta := self._text_delta(older)) is not None:
                    yield delta
            yielded.append(event)
            yield event
            if final:
                self._attempts = 0  # a real terminal resets the reconnect backoff
                yield _wire.normalize(
                    yielded,
                    self._tool_uses,
                    self._answered | self._decided,
                    self._host_uses,
                    usage_before=usage_before,
                )
                return

    def _preview_delta(self, event: RawEvent) -> TextDelta | None:
        """The text of one ``event_delta`` (remembered per previewed message, so the
        buffered ``agent.message`` adds only what the previews missed)."""
        if event.get("type") != "event_delta":
            return None
        eid = event.get("event_id")
        delta = event.get("delta")
        block = delta.get("content") if isinstance(delta, Mapping) else None
        text = block.get("text") if isinstance(block, Mapping) else None
        if not isinstance(eid, str) or not isinstance(text, str) or not text:
            return None
        if eid not in self._streamed and len(self._streamed) >= MAX_PREVIEWS:
            self._streamed.pop(next(iter(self._streamed)))  # bounded: oldest first
        self._streamed[eid] = self._streamed.get(eid, "") + text
        return TextDelta(text)

    def _text_delta(self, event: RawEvent) -> TextDelta | None:
        """The text of an ``agent.message``, as the loop's one way to stream text: all of
        it, or (after previews of it streamed) what they did not cover. Previews are
        best-effort and the message is canonical; previews that do not match its start
        streamed something else, so nothing is added to them."""
        if event.get("type") != "agent.message":
            return None
        text = _wire.message_text(event)
        eid = event.get("id")
        streamed = self._streamed.pop(eid, None) if isinstance(eid, str) else None
        if streamed is not None:
            text = text[len(streamed) :] if text.startswith(streamed) else ""
        return TextDelta(text) if text else None

    # -- inputs and sends ----------------------------------------------------------------
    def _note_sent(self, event: RawEvent) -> None:
        kind = event.get("type")
        eid = event.get("id")
        if kind == _wire.CUSTOM_TOOL_USE and isinstance(eid, str):
            self._tool_uses[eid] = event
        elif kind == _wire.CUSTOM_TOOL_RESULT:
            tid = event.get("custom_tool_use_id")
            if isinstance(tid, str):
                self._answered.add(tid)
                self._confirmed.add(tid)
                if isinstance(eid, str):
                    self._replayed_results[tid] = eid
        elif kind == "user.message" and isinstance(eid, str):
            content = event.get("content")
            if isinstance(content, list) and content and isinstance(content[0], Mapping):
                text = content[0].get("text")
                if isinstance(text, str):
                    self._replayed_messages.append((text, eid))

    def _input_events(self, input: TurnInput) -> list[dict[str, Any]]:
        self._replay_ids = []
        if isinstance(input, UserMessage):
            for i, (text, eid) in enumerate(self._replayed_messages):
                if text == input.text:  # the dead attempt sent it: never twice
                    del self._replayed_messages[i]
                    self._replay_ids = [eid]
                    return []
            return [_wire.user_message(input.text)]
        if isinstance(input, ToolResults):
            self._replay_ids = [
                self._replayed_results.pop(r.tool_use_id)
                for r in input.results
                if r.tool_use_id in self._replayed_results
            ]
            # Never answer a tool use twice (a redrive after a drop may repeat results).
            events = [
                _wire.result_event(r)
                for r in input.results
                if r.tool_use_id not in self._answered and r.tool_use_id not in self._results
            ]
            for tid, decision in input.decisions.items():
                if tid not in self._decided:
                    events.append(_wire.confirmation_event(tid, decision))
            return events
        if isinstance(input, DefineOutcome):
            return [_wire.define_outcome(input.outcome)]
        if isinstance(input, RawInput):
            return [dict(e) for e in input.events]
        raise InvalidOptionsError(f"unsupported turn input {type(input).__name__}")

    async def send(self, events: list[dict[str, Any]]) -> list[str]:
        """POST ``events`` exactly once (see the module docstring); returns their ids."""
        if not events:
            return []  # the API rejects an empty send; an empty resume is never sent
        for event in events:
            tid = event.get("custom_tool_use_id")
            is_result = event.get("type") == _wire.CUSTOM_TOOL_RESULT
            if is_result and isinstance(tid, str) and tid not in self._confirmed:
                # Stored before the POST: an ambiguous failure must not lose a result.
                self._results.setdefault(tid, event)
        marker = self._last_id
        remaining = list(events)
        ids: list[str] = []
        attempts = _retry.Attempts(
            self.options.send, sleep=self.options.sleep, what="claude event send"
        )
        while True:
            try:
                response = await self._post(remaining)
            except ProviderError as exc:
                await attempts.failed(exc)  # re-raises unless retried
                if isinstance(exc, APIStatusError) and exc.status == 429:
                    continue  # a 429 was not accepted: resend as is
                landed, landed_ids = self._landed(remaining, await self.history(), marker)
                ids.extend(landed_ids)
                remaining = [e for i, e in enumerate(remaining) if i not in landed]
                if not remaining:
                    break
                continue
            echoed = getattr(response, "data", None) or []
            ids.extend(e.id for e in echoed if isinstance(getattr(e, "id", None), str))
            break
        for event in events:
            if event.get("type") == _wire.CUSTOM_TOOL_RESULT:
                self._answered.add(event["custom_tool_use_id"])
            elif event.get("type") == "user.tool_confirmation":
                self._decided.add(event["tool_use_id"])
        self._arm_echo_deadline()
        return ids

    # -- results: stored, reconciled, re-sent ----------------------------------------------
    def _outstanding(self) -> list[str]:
        """Results we sent whose landing we have not seen yet (in send order)."""
        return list(self._results)

    def _landed_result(self, tool_use_id: str) -> None:
        self._confirmed.add(tool_use_id)
        self._results.pop(tool_use_id, None)
        if not self._results:
            self._echo_deadline = None

    def _arm_echo_deadline(self) -> None:
        if not self._results:
            self._echo_deadline = None
        elif self._echo_deadline is None:
            self._echo_deadline = anyio.current_time() + self.options.result_echo_timeout

    async def _reconcile(self, history: Sequence[RawEvent]) -> None:
        """Re-send, from the store, each sent result that ``history`` does not hold."""
        recorded = {
            e.get("custom_tool_use_id")
            for e in history
            if e.get("type") == _wire.CUSTOM_TOOL_RESULT
        }
        for tid in [i for i in self._results if i in recorded]:
            self._landed_result(tid)
        self._echo_deadline = None
        for tid in self._outstanding():
            if self._resends[tid] >= RESULT_RESENDS:
                raise ProviderError(
                    f"the host acknowledged the result of tool use {tid!r} but never recorded "
                    f"it, after {RESULT_RESENDS} re-sends",
                    code="result_not_recorded",
                    tool_use_id=tid,
                    session_id=self.session_id,
                )
            self._resends[tid] += 1
            logger.warning(
                "session %s: the result of tool use %s is not in the history; re-sending it",
                self.session_id,
                tid,
                extra=fields(
                    "retry",
                    host="claude",
                    operation="tool result resend",
                    session_id=self.session_id,
                    tool_use_id=tid,
                    attempt=self._resends[tid],
                    max_retries=RESULT_RESENDS,
                ),
            )
            try:
                ids = await self.send([self._results[tid]])
            except APIStatusError as exc:
                if exc.status not in (400, 409) or isinstance(exc, AuthenticationError):
                    raise
                # The host no longer awaits this use: it has a result after all.
                self._landed_result(tid)
                continue
            self._turn_ids.update(ids)
            if self._turn_ids & self._seen:
                self._gate_open = True
        self._arm_echo_deadline()

    async def _post(self, events: list[dict[str, Any]]) -> Any:
        api, sid = self.api, self.session_id
        assert sid is not None
        body = _event_params(events)

        async def post() -> Any:
            return await api.send_client.beta.sessions.events.send(
                sid,
                events=body,
                extra_headers=api.headers,
                timeout=api.s.receive_timeout,
            )

        return await api.call("post", f"/v1/sessions/{sid}/events", post)

    def _landed(
        self, sent: list[dict[str, Any]], history: list[RawEvent], marker: str | None
    ) -> tuple[set[int], list[str]]:
        """Which of ``sent`` (by index) are in ``history``, and the ids they got there."""
        start = 0
        if marker is not None:
            for i, event in enumerate(history):
                if event.get("id") == marker:
                    start = i + 1
                    break
        results = {
            e.get("custom_tool_use_id"): e
            for e in history
            if e.get("type") == _wire.CUSTOM_TOOL_RESULT
        }
        later = history[start:]
        used: set[int] = set()
        landed: set[int] = set()
        ids: list[str] = []
        for index, event in enumerate(sent):
            match: RawEvent | None = None
            if event.get("type") == _wire.CUSTOM_TOOL_RESULT:
                match = results.get(event.get("custom_tool_use_id"))
            else:
                for j, candidate in enumerate(later):
                    if j not in used and _same_event(event, candidate):
                        used.add(j)
                        match = candidate
                        break
            if match is not None:
                landed.add(index)
                if isinstance(match.get("id"), str):
                    ids.append(match["id"])
        return landed, ids

    # -- reading ------------------------------------------------------------------------
    def _remember(self, event: RawEvent) -> None:
        eid = event.get("id")
        self._seen.add(_wire.event_key(event))
        if isinstance(eid, str) and eid:
            self._last_id = eid
        kind = event.get("type")
        if kind == _wire.CUSTOM_TOOL_USE and isinstance(eid, str):
            self._tool_uses[eid] = event
        elif kind in _wire.SERVER_TOOL_USES and isinstance(eid, str):
            self._host_uses[eid] = event
        elif kind == "user.tool_confirmation" and isinstance(event.get("tool_use_id"), str):
            self._decided.add(event["tool_use_id"])
        elif kind == "session.usage" and isinstance(event.get("usage"), Mapping):
            self._usage_mark = _wire.usage_mark(event["usage"], self._usage_mark)
        elif kind == _wire.CUSTOM_TOOL_RESULT:
            tid = event.get("custom_tool_use_id")
            if isinstance(tid, str):
                self._answered.add(tid)
                self._landed_result(tid)

    async def _judge(self, event: RawEvent) -> bool:
        """Whether a boundary candidate ends this turn (see the module docstring)."""
        kind = event.get("type")
        if kind in ("session.status_terminated", "session.deleted", "session.error"):
            return True
        if not self._gate_open:
            return False  # a late boundary of an earlier turn
        stop = event.get("stop_reason")
        if not isinstance(stop, Mapping) or stop.get("type") != "requires_action":
            return True
        ids = [i for i in stop.get("event_ids") or [] if isinstance(i, str)]
        if any(i not in self._tool_uses and i not in self._host_uses for i in ids):
            # Unknown ids: tool uses we missed (custom ones, or host tools held for a
            # confirmation): the history has them.
            await self._catch_up()
        if not ids:
            return True
        ids = [i for i in ids if i not in self._decided]  # a confirmation is final
        # A self-hosted sandbox's built-in tool use is its worker's to answer (a
        # user.tool_result), not the loop's: the session carries on once it has.
        ids = [
            i
            for i in ids
            if i not in self._host_uses or not _wire.is_sandbox_use(self._host_uses[i])
        ]
        if not ids:
            return False
        if not all(i in self._tool_uses and i in self._answered for i in ids):
            return True  # something is really awaited: the loop answers it
        unconfirmed = [i for i in ids if i not in self._confirmed]
        if not unconfirmed:
            return False  # stale: every named result's echo has been seen
        # We sent these results (and the API accepted the POST) but have not seen them
        # land. Dismissing the idle on our word alone could wait forever on a result the
        # server lost, so the history decides: there -> stale; missing -> not recorded, so
        # the stored result is re-sent (never recomputed) and the turn goes on.
        await self._reconcile(await self._catch_up())
        return False

    async def _catch_up(self) -> list[RawEvent]:
        """Page the history; queue every event not yet seen (yielded before the boundary)."""
        history = await self.history()
        for past in self._queue_unseen(history):
            pid = past.get("id")
            if past.get("type") == _wire.CUSTOM_TOOL_USE and isinstance(pid, str):
                self._tool_uses[pid] = past
            elif past.get("type") in _wire.SERVER_TOOL_USES and isinstance(pid, str):
                self._host_uses[pid] = past
        return history

    def _queue_unseen(self, history: Sequence[RawEvent]) -> list[RawEvent]:
        """Queue (after what is already queued) each history event not yet yielded."""
        queued = {_wire.event_key(e) for e in self._backlog}
        new = _wire.fresh(history, self._seen | queued)
        self._backlog.extend(new)
        return new

    async def _next_event(self) -> RawEvent:
        if self._backlog:
            return self._backlog.popleft()
        while True:
            if self._stream is None:
                await self._reconnect()
                if self._backlog:
                    return self._backlog.popleft()
                continue
            try:
                return await self._read()
            except _DropError as drop:
                stream, self._stream = self._stream, None
                await stream.aclose()
                telemetry.emit(
                    "stream.error",
                    None,
                    {"session_id": self.session_id, "reason": drop.reason},
                    caller=self.metadata,
                )
                self._last_drop = drop

    async def _read(self) -> RawEvent:
        """The next stream event; a drop (``result_echo_timeout``) when a sent result's
        echo is overdue, so the reconnect pages the history and reconciles."""
        assert self._stream is not None
        deadline = self._echo_deadline
        if deadline is None or not self._results:
            return await self._stream.next()
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            return await self._stream.next()
        # A cancelled read leaves the SSE body unusable: reopen it, without counting this
        # planned reconnect as a failure or backing off.
        self._planned_reconnect = True
        raise _DropError("result_echo_timeout")

    async def _reconnect(self) -> None:
        # A planned reopen (an overdue result echo) is not a failure: its first try is
        # neither counted against max_reconnects nor backed off.
        planned, self._planned_reconnect = self._planned_reconnect, False
        while True:
            if not planned:
                await self._before_retry()
            planned = False
            try:
                self._stream = await self._open_stream()
                history = await self.history()
            except ProviderError as exc:
                if not _retryable(exc):
                    raise  # the session is gone or refused: reconnecting cannot help
                if self._stream is not None:
                    await self._stream.aclose()
                    self._stream = None
                self._last_drop = _DropError(exc.code)
                continue
            self._queue_unseen(history)
            await self._reconcile(history)  # what the host holds against what we sent
            return

    async def _before_retry(self) -> None:
        """Raise once reconnects are exhausted, else back off before the next one."""
        if self._attempts >= self.options.max_reconnects:
            drop = self._last_drop
            if drop is not None and drop.error is not None:
                raise drop.error
            reason = drop.reason if drop is not None else "unknown"
            code = "stream_idle_timeout" if reason == "stream_idle_timeout" else "stream_dropped"
            logger.warning(
                "session %s: the event stream dropped (%s) and %d reconnects failed; giving up",
                self.session_id,
                reason,
                self._attempts,
                extra=fields(
                    "give_up",
                    host="claude",
                    operation="stream_reconnect",
                    session_id=self.session_id,
                    attempts=self._attempts,
                    reason=str(reason),
                ),
            )
            raise TransportError(
                f"the event stream dropped and {self._attempts} reconnects failed",
                code=code,
                reason=reason,
                session_id=self.session_id,
            )
        delay = self.options.reconnect.backoff(self._attempts)
        self._attempts += 1
        reason = self._last_drop.reason if self._last_drop is not None else "unknown"
        logger.warning(
            "session %s: the event stream dropped (%s); reconnect %d/%d in %.3gs",
            self.session_id,
            reason,
            self._attempts,
            self.options.max_reconnects,
            delay,
            extra=fields(
                "reconnect",
                host="claude",
                session_id=self.session_id,
                attempt=self._attempts,
                max_retries=self.options.max_reconnects,
                wait_s=delay,
                reason=str(reason),
            ),
        )
        if delay > 0:
            await self.options.sleep(delay)

    async def _open_stream(self) -> _Stream:
        import httpx2
        from anthropic import omit

        api = self.api
        sid = self.session_id
        assert sid is not None
        stack = AsyncExitStack()
        timeout = httpx2.Timeout(
            connect=api.s.receive_timeout,
            read=self.options.idle_timeout,
            write=api.s.receive_timeout,
            pool=api.s.receive_timeout,
        )
        try:
            manager = api.client.beta.sessions.events.with_streaming_response.stream(
                sid,
                event_deltas=["agent.message"] if self.options.event_deltas else omit,
                extra_headers={**api.headers, "accept": "text/event-stream"},
                timeout=timeout,
            )
            response = await api.call(
                "get",
                f"/v1/sessions/{self.session_id}/events/stream",
                lambda: stack.enter_async_context(manager),
            )
        except BaseException:
            await stack.aclose()
            raise
        telemetry.emit(
            "stream.connected", None, {"session_id": self.session_id}, caller=self.metadata
        )
        return _Stream(stack, response.http_response)

    async def history(self) -> list[RawEvent]:
        """The session's whole event history, oldest first, as raw dicts."""
        api = self.api
        sid = self.session_id
        assert sid is not None

        async def page(cursor: str | None) -> Any:
            kwargs: dict[str, Any] = {"limit": HISTORY_PAGE}
            if cursor is not None:
                kwargs["page"] = cursor
            return await api.client.beta.sessions.events.with_raw_response.list(
                sid, **api.opts, **kwargs
            )

        # Not strict: a history page without data counts as the end (as it always has).
        return await api.list_raw(f"/v1/sessions/{sid}/events", page, strict=False)


def _event_params(events: list[dict[str, Any]]) -> list[BetaManagedAgentsEventParams]:
    """The events as the SDK's parameter type says a send takes them.

    The builders in :mod:`~managedloop.providers.claude._wire` make exactly these shapes
    (and :class:`~managedloop.hosts.RawInput` events are the caller's own); the static type
    is asserted here, at the one boundary, and checked at run time: the emulator validates
    every body against ``EventSendParams`` (``testing/_claude/bodies.py``), and the suite
    runs with that on."""
    return cast("list[BetaManagedAgentsEventParams]", events)


def _retryable(exc: ProviderError) -> bool:
    """Whether a failed reconnect may be tried again: :func:`managedloop._retry.retryable`
    (never an auth failure, a status error without a status or an invalid request)."""
    return _retry.retryable(exc)


def _same_event(sent: Mapping[str, Any], echo: Mapping[str, Any]) -> bool:
    if sent.get("type") != echo.get("type"):
        return False
    for key, value in sent.items():
        if key in ("type", "id"):
            continue
        if echo.get(key) != value:
            return False
    return True
