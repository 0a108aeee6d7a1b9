"""One runtime session on one harness: a turn is one ``InvokeHarness``, retried when cut short.

Protocol invariants this connection relies on (``agentcore-wire.md``, reference §3.3-3.7):

* a turn is one ``InvokeHarness`` whose event stream ends with ``messageStop`` (then
  ``metadata``); a stream that ends without ``messageStop`` was cut short and is retried
  (bounded), ending in ``TransportError(code="early_termination")``;
* exception frames mean the harness itself failed the turn: they become
  ``HostStreamError(code="harness_stream_error")`` and are never retried;
* botocore never retries the invoke (it only prepares it; the send is ours): replaying a
  stateful turn can duplicate work, so only this loop retries, and it tells the session
  loop to drop the failed attempt's events (``RESTART``);
* the harness keeps the conversation server-side per runtime session id; resuming after
  inline tools re-sends the assistant ``toolUse`` message plus the user ``toolResult``
  message. The harness does not keep that partial turn, so a session parked on an
  approval keeps the assistant message's text and reasoning blocks in
  ``Pending.host_state`` (:meth:`AgentCoreConnection.pending_state`): another process
  answers the pending ``toolUse`` s on its next invoke with the same runtime session id;
* an interrupt is the loop cancelling the in-flight turn (``interrupts_by_cancel``): the
  invoke stream is closed (invariant 6 of :mod:`managedloop.hosts`) and the request ends
  ``terminated`` with reason ``interrupted``.

The connection reads its retry and timeout settings from :class:`InvokeSettings` (the
provider) at every turn; it never imports the provider.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from managedloop import _retry
from managedloop._log import fields
from managedloop.errors import InvalidOptionsError, ManagedLoopError, TransportError
from managedloop.hosts import (
    RESTART,
    ConnectionBase,
    DefineOutcome,
    RawInput,
    ToolResults,
    TurnInput,
    TurnItem,
    UserMessage,
)
from managedloop.providers.agentcore import _converse
from managedloop.providers.agentcore._clients import Clients, request_meta
from managedloop.providers.agentcore._errors import retryable
from managedloop.providers.agentcore._stream import stream_call
from managedloop.results import RawEvent

__all__ = ["AgentCoreConnection", "InvokeSettings"]

logger = logging.getLogger("managedloop.agentcore")

MAX_RETRY_BACKOFF = 4.0  # seconds; a retry is for a blip, not for an outage


class InvokeSettings(Protocol):
    """What a connection reads from its provider at each turn."""

    clients: Clients
    idle_timeout: float
    invoke_retries: int
    retry_backoff: float


class AgentCoreConnection(ConnectionBase):
    """One runtime session on one harness.

    ``params``: the ``invoke_harness`` keyword arguments every turn of this session shares
    (harness, session id, qualifier, tools, budgets...); a turn adds its ``messages``.
    ``pending_state``: what :meth:`pending_state` returned in the process that parked the
    session (resuming it answers the pending tool uses).
    """

    interrupts_by_cancel = True

    def __init__(
        self,
        settings: InvokeSettings,
        *,
        params: Mapping[str, Any],
        resumed: bool,
        pending_state: Mapping[str, Any] | None = None,
        tool_input_deltas: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__()
        self.settings = settings
        self._tool_inputs = tool_input_deltas  # whose input pieces to yield (OpenRequest's)
        self.harness_arn: str = params["harnessArn"]
        self.session_id = params["runtimeSessionId"]
        self.resumed = resumed
        self._last_events: list[RawEvent] = []
        self._parsed: _converse.ParsedTurn | None = None
        self._inflight: set[Callable[[], None]] = set()
        self._http_held = False  # this loop's HTTP session, acquired on the first turn
        self._base = dict(params)
        content = pending_state.get("assistant_content") if pending_state else None
        if isinstance(content, list):
            blocks = [dict(b) for b in content if isinstance(b, Mapping)]
            self._parsed = _converse.ParsedTurn(assistant_content=blocks)

    def pending_state(self) -> dict[str, Any] | None:
        """The last turn's assistant text and reasoning blocks (echoed with the toolUse
        blocks when the pending uses are answered, possibly from another process)."""
        if self._parsed is None:
            return None
        return {"assistant_content": [dict(b) for b in self._parsed.assistant_content]}

    def __repr__(self) -> str:
        return f"AgentCoreConnection(session_id={self.session_id!r})"

    @property
    def model(self) -> str | None:
        """The model id each ``invoke_harness`` sends (its model union's ``modelId``), or
        ``None``: the harness's own model."""
        union = self._base.get("model")
        config = next(iter(union.values()), None) if isinstance(union, Mapping) else None
        model_id = config.get("modelId") if isinstance(config, Mapping) else None
        return model_id if isinstance(model_id, str) else None

    def request_params(self, input: TurnInput) -> dict[str, Any]:
        """The ``invoke_harness`` keyword arguments for one turn input."""
        if isinstance(input, UserMessage):
            messages = _converse.user_message(input.text)
        elif isinstance(input, ToolResults):
            parsed = (
                self._parsed if self._parsed is not None else _converse.parse(self._last_events)
            )
            content = parsed.assistant_content
            messages = _converse.resume_messages(input.tool_uses, input.results, content)
        elif isinstance(input, DefineOutcome | RawInput):
            raise InvalidOptionsError(
                "the agentcore host takes no outcomes or raw events", code="unsupported"
            )
        else:  # pragma: no cover - exhaustive over TurnInput
            raise InvalidOptionsError(f"unknown turn input {input!r}")
        return {**self._base, "messages": messages}

    async def turn(self, input: TurnInput) -> AsyncIterator[TurnItem]:
        """One InvokeHarness call (retried with :data:`RESTART`); its envelopes, a
        :class:`TextDelta` after each text delta envelope and a :class:`ToolInputDelta`
        after each input fragment of a tool the loop reads (``OpenRequest.
        tool_input_deltas``), then its :class:`TurnResult`,
        from one parse that also builds the next resume (nothing is parsed twice)."""
        params = self.request_params(input)
        p = self.settings
        if not self._http_held:
            p.clients.http.acquire()
            self._http_held = True
        attempts = 1 + p.invoke_retries
        meta = request_meta("invoke_harness")
        last: ManagedLoopError | None = None
        events: list[RawEvent] = []  # this attempt's, as yielded
        policy = _retry.Policy(
            retries=p.invoke_retries, base=p.retry_backoff, cap=MAX_RETRY_BACKOFF
        )
        for attempt in range(attempts):
            if attempt:
                assert last is not None  # set by the failed attempt before this one
                delay = policy.wait(last, attempt - 1)  # Retry-After, else jittered backoff
                logger.warning(
                    "agentcore invoke retry session_id=%s attempt=%d/%d reason=%s",
                    self.session_id,
                    attempt + 1,
                    attempts,
                    last.code,
                    extra=fields(
                        "retry",
                        host="agentcore",
                        operation="invoke_harness",
                        session_id=self.session_id,
                        attempt=attempt,
                        max_retries=attempts - 1,
                        wait_s=delay,
                        code=last.code,
                        status=last.context.get("status"),
                    ),
                )
                await _retry.sleep(delay)
                if events:  # the failed attempt already yielded some: the loop drops them
                    yield RESTART
            events = []
            stopped = False
            stream = stream_call(
                p.clients,
                "invoke_harness",
                params,
                idle_timeout=p.idle_timeout,
                span_meta=meta,
                inflight=self._inflight,
                trace=True,
            )
            check = _converse.StreamCheck()  # a frame delivered twice is named, not merged
            deltas = _converse.StreamDeltas(self._tool_inputs)
            try:
                async with contextlib.aclosing(stream) as live:
                    async for event in live:
                        check.feed(event)
                        events.append(event)
                        if "messageStop" in event:
                            stopped = True
                        yield event
                        if (delta := deltas.feed(event)) is not None:
                            yield delta
            except ManagedLoopError as exc:
                if not retryable(exc):
                    raise
                last = exc
                continue
            if stopped:
                self._last_events = events
                self._parsed = parsed = _converse.parse(events)
                yield _converse.turn_result(parsed, events)
                return
            last = TransportError(
                f"the InvokeHarness stream ended without messageStop after {attempt + 1} "
                f"attempt(s) (truncated)",
                code="early_termination",
                attempts=attempt + 1,
            )
        assert last is not None
        if last.code != "early_termination":
            last.context.setdefault("attempts", attempts)
        logger.warning(
            "agentcore invoke gave up session_id=%s attempts=%d reason=%s",
            self.session_id,
            attempts,
            last.code,
            extra=fields(
                "give_up",
                host="agentcore",
                operation="invoke_harness",
                session_id=self.session_id,
                attempts=attempts,
                code=last.code,
                status=last.context.get("status"),
            ),
        )
        raise last

    async def aclose(self) -> None:
        """Abort an invoke still streaming (a consumer torn down between two events) and
        release the loop's HTTP session (idempotent)."""
        for abort in list(self._inflight):
            abort()
        if self._http_held:
            self._http_held = False
            await self.settings.clients.http.release()
