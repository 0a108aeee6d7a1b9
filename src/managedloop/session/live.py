"""Live sessions: ``async with managedloop.start(...) as session``.

A :class:`LiveSession` serves one request at a time on one open connection, through the
turn driver of :mod:`managedloop.session.driver` (which keeps the at-most-once ledger and
the telemetry wrapping for every request of the session): the kickoff, then each
``send``. Requests queue in an inbox and results come back through an outbox, in order;
``events()`` subscribers get raw events as they arrive. The driver's module docstring
states the guarantees (bounded by ``timeout``, at most once per tool-use id, every raw
event kept, ``BaseException`` s from tools raised as themselves).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Unpack

import anyio

from managedloop import _validate, telemetry
from managedloop.errors import ManagedLoopError, SessionTimeoutError, UnsupportedError
from managedloop.hosts import DefineOutcome, Provider, RawInput, TurnInput, UserMessage
from managedloop.outcome import Outcome
from managedloop.results import Pending, RawEvent, SessionResult
from managedloop.session.driver import (
    DEFAULT_TIMEOUT,
    NOTHING,
    Driver,
    close_driver,
    deadline,
    enter_lifespan,
    kickoff,
    open_driver,
    timed_out,
)
from managedloop.session.options import Prepared, SessionOptions, coerce_outcome, prepare

if TYPE_CHECKING:  # annotations only: anyio loads these with the first session
    from anyio.abc import TaskGroup
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["LiveSession", "start"]


class LiveSession:
    """A live, multi-turn session (use ``async with managedloop.start(...) as session``).

    ``send`` queues a follow-up user message, ``result`` waits for the next terminal,
    ``events`` yields raw events as they arrive (from the moment it is called).

    Every request (the kickoff, each ``send``, from the moment the session starts working
    on it to its terminal) and the opening of the session are bounded by ``timeout``. On
    expiry the in-flight request is cancelled, the connection is closed, and ``result()``
    raises :class:`SessionTimeoutError` carrying the partial result; the session is over
    (``send`` raises ``session_closed``). A ``KeyboardInterrupt``/``SystemExit`` from a tool
    also ends the session: ``result()`` raises it, else leaving the ``async with`` does.
    """

    def __init__(
        self,
        prepared: Prepared,
        first: str | None,
        outcome: Outcome | None,
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> None:
        self._prepared = prepared
        self._first = first
        self._outcome = outcome
        self._timeout = timeout
        self._stack = AsyncExitStack()
        self._driver: Driver | None = None
        inbox: tuple[MemoryObjectSendStream[TurnInput], MemoryObjectReceiveStream[TurnInput]]
        inbox = anyio.create_memory_object_stream[TurnInput](math.inf)
        self._inbox_send, self._inbox = inbox
        outbox = anyio.create_memory_object_stream[SessionResult | BaseException](math.inf)
        self._outbox_send, self._outbox = outbox
        self._closed = False
        self._over = False  # ended by a timeout or a fatal BaseException; no more requests
        self._conn_closed = False
        self._fatal: BaseException | None = None
        self._receivers: list[MemoryObjectReceiveStream[RawEvent]] = []
        self._partial_receivers: list[MemoryObjectReceiveStream[Any]] = []

    @property
    def session_id(self) -> str | None:
        return self._driver.conn.session_id if self._driver else None

    @property
    def resumed(self) -> bool:
        return self._driver.conn.resumed if self._driver else False

    async def __aenter__(self) -> LiveSession:
        await self._stack.__aenter__()
        try:
            # Before the task group, so the handler's lifespan outlives every tool call.
            self._prepared = await enter_lifespan(self._prepared, self._stack)
            tg: TaskGroup = await self._stack.enter_async_context(anyio.create_task_group())
            with deadline(self._timeout) as scope, telemetry.session_scope(self._prepared.caller):
                self._driver = await open_driver(self._prepared)
            if self._driver is None:  # the open itself timed out
                assert scope.cancelled_caught
                raise timed_out(
                    self._timeout,
                    None,
                    f"the live session did not open within {self._timeout}s; the open was "
                    "cancelled",
                )
            self._stack.push_async_callback(self._close_connection)
            self._stack.callback(tg.cancel_scope.cancel)
            first = kickoff(
                self._driver.conn, self._first, self._outcome, self._prepared.open_request.pending
            )
            tg.start_soon(self._serve, first)
        except BaseException:
            await self.close()  # unwinds what was entered and closes every stream
            raise
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.close()
        fatal, self._fatal = self._fatal, None
        if fatal is not None and exc is not fatal:
            raise fatal  # a tool's KeyboardInterrupt/SystemExit nobody has seen yet

    async def close(self) -> None:
        """Cancel any in-flight turn and close the connection."""
        if self._closed:
            return
        self._closed = True
        self._inbox_send.close()
        try:
            await self._stack.aclose()
        finally:
            streams: list[Any] = [self._inbox, self._outbox_send, self._outbox]
            streams += self._driver.subscribers if self._driver else ()
            streams += self._driver.partial_subscribers if self._driver else ()
            for stream in (*streams, *self._receivers, *self._partial_receivers):
                stream.close()

    async def _close_connection(self) -> None:
        if not self._conn_closed and self._driver is not None:
            self._conn_closed = True
            with telemetry.session_scope(self._prepared.caller):
                await close_driver(self._driver)

    async def _end(self, item: BaseException) -> None:
        """The session is over: hand ``item`` to ``result()``, stop taking requests, end
        ``events()`` iteration and close the connection."""
        assert self._driver is not None
        self._over = True
        self._outbox_send.send_nowait(item)
        self._outbox_send.close()  # a later result() says session_closed
        self._inbox_send.close()
        for sub in (*self._driver.subscribers, *self._driver.partial_subscribers):
            sub.close()
        await self._close_connection()

    async def _serve(self, first: TurnInput | object | None) -> None:
        assert self._driver is not None
        driver = self._driver
        try:
            if first is not NOTHING and not await self._one(driver, first):  # type: ignore[arg-type]
                return
            async for command in self._inbox:
                if not await self._one(driver, command):
                    return
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as exc:
            # A tool's KeyboardInterrupt/SystemExit: raised in the caller's task (result()
            # or leaving the ``async with``), not in this one, where asyncio would stop the
            # event loop with it and the caller would see a BaseExceptionGroup.
            self._fatal = exc
            await self._end(exc)

    async def _one(self, driver: Driver, command: TurnInput | Pending | None) -> bool:
        """Serve one request; ``False`` when it timed out and the session is over."""
        result: SessionResult | BaseException
        try:
            result = await driver.request(command, timeout=self._timeout)
        except SessionTimeoutError as exc:  # raised inside the request's span
            await self._end(exc)
            return False
        except Exception as exc:  # handed to result(); the session stays usable
            result = exc
        self._outbox_send.send_nowait(result)
        return True

    async def send(self, text: str) -> None:
        """Queue a follow-up user message (a new request: turns and usage start at 0)."""
        _validate.text("text", text)
        self._check_open()
        await self._inbox_send.send(UserMessage(text))

    async def send_outcome(self, outcome: Outcome | Mapping[str, Any]) -> None:
        """Queue an outcome to work towards (hosts with outcome support)."""
        self._check_open()
        coerced = coerce_outcome(outcome)
        if not self._prepared.provider.supports_outcomes:
            raise UnsupportedError(
                "this host does not support outcomes", code="outcome_unsupported"
            )
        assert coerced is not None
        await self._inbox_send.send(DefineOutcome(coerced))

    async def send_event(self, event: dict[str, Any]) -> None:
        """Send a pre-built raw host event verbatim (streaming hosts only)."""
        self._check_open()
        if not self._prepared.provider.supports_raw_events:
            raise UnsupportedError(f"the {self._prepared.provider.name} host takes no raw events")
        await self._inbox_send.send(RawInput([event]))

    async def interrupt(self) -> None:
        """Stop the agent's current work, on every host.

        Claude: the host is asked (``user.interrupt``); its turn ends at the host's idle.
        Local and AgentCore (the work is this process's own request): the in-flight model
        call (AgentCore: the invoke stream) and tool calls are cancelled and the request
        ends ``terminated`` with reason ``interrupted``; Local answers every open tool call
        in its transcript, so the session takes a follow-up ``send``. With nothing in
        flight there is nothing to stop (no error).
        """
        self._check_open()
        assert self._driver is not None
        conn = self._driver.conn
        if getattr(conn, "interrupts_by_cancel", False):
            self._driver.interrupt()
            return
        await conn.interrupt()

    async def result(self) -> SessionResult:
        """Wait for the next terminal; raises the error if that request failed.

        Raises :class:`SessionTimeoutError` when the request outlived ``timeout`` (the
        session is then over), and ``session_closed`` once the session is over or closed.
        """
        try:
            item = await self._outbox.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise ManagedLoopError("the session is not open", code="session_closed") from None
        if isinstance(item, BaseException):
            if item is self._fatal:
                self._fatal = None  # seen here: leaving the ``async with`` won't raise it again
            raise item
        return item

    def events(self) -> MemoryObjectReceiveStream[RawEvent]:
        """Raw events as they arrive from now on; iteration ends when the session closes."""
        self._check_open()
        assert self._driver is not None
        send, receive = anyio.create_memory_object_stream[RawEvent](math.inf)
        subscribers = list(self._driver.subscribers)  # a new list: never mutated mid-iteration
        subscribers.append(send)
        self._driver.subscribers = subscribers
        self._receivers.append(receive)
        return receive

    def partial_outputs(self) -> MemoryObjectReceiveStream[Any]:
        """With ``output=``: the typed output as it streams, each value an instance of the
        output type validated leniently from the JSON so far (pydantic's partial JSON: a
        string still being written is cut where it stands, and so may a number be; the
        final, fully validated output is ``result().output``). The JSON is the answer's
        text (text and native strategies, ``Local(stream=True)``) or the output tool's
        input (tool strategy: ``Local(stream=True)`` and AgentCore stream it; Claude hands
        a tool's input over whole, so no partials there). Iteration ends when the session
        closes."""
        self._check_open()
        assert self._driver is not None
        send, receive = anyio.create_memory_object_stream[Any](math.inf)
        # a new list: never mutated while the driver iterates it
        self._driver.partial_subscribers = [*self._driver.partial_subscribers, send]
        self._partial_receivers.append(receive)
        return receive

    def _check_open(self) -> None:
        if self._closed or self._over or self._driver is None:
            raise ManagedLoopError("the session is not open", code="session_closed")


def start(
    provider: Provider,
    *,
    agent: Any,
    prompt: str | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    **options: Unpack[SessionOptions],
) -> LiveSession:
    """Open a live session: ``async with managedloop.start(...) as session``.

    Takes ``run``'s options. ``timeout`` (seconds, default 600 like ``run``; ``None`` for
    no bound at all) bounds opening the session and each request, from the moment the
    session starts working on it to its terminal; on expiry the request is cancelled, the
    connection closed, and ``result()`` raises :class:`SessionTimeoutError` with the
    partial result. Options are validated here, before anything is opened. ``prompt`` or
    ``outcome`` kick the session off at once; a resumed session with pending tool uses
    finishes them first.
    """
    prepared, coerced = prepare(
        provider, agent=agent, options=options, timeout=timeout, prompt=prompt
    )
    return LiveSession(prepared, prompt, coerced, timeout)
