"""A live session is bounded by default (issue 7: ``ml.start`` had no timeout at all).

``start(timeout=...)`` (default 600 s, like ``run``; ``None`` for no bound) bounds opening
the session and each request; on expiry the request is cancelled, the connection closed,
and ``result()`` raises ``SessionTimeoutError`` with the partial result. The hosts here
never answer, so the tests need no clock: they only wait for the bound to fire.
"""

from __future__ import annotations

import inspect
from typing import Any

import anyio
import pytest

import managedloop as ml
from fakes import FakeConnection, FakeHost, stop, text, tool
from managedloop.hosts import OpenRequest
from managedloop.session.driver import DEFAULT_TIMEOUT

pytestmark = pytest.mark.anyio

AGENT = ml.AgentSpec(name="a")


class Recorder:
    def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
        return "ok"


def test_start_is_bounded_by_default_like_run() -> None:
    assert inspect.signature(ml.start).parameters["timeout"].default == DEFAULT_TIMEOUT == 600
    assert inspect.signature(ml.run).parameters["timeout"].default == DEFAULT_TIMEOUT


async def test_a_request_that_never_ends_times_out_and_ends_the_session() -> None:
    # The first turn asks for a tool; the turn that takes its result never answers.
    host = FakeHost([[tool("t", id="u1"), stop("requires_action")]])
    async with ml.start(
        StallAfterFirstTurn(host), agent=AGENT, handler=Recorder(), prompt="go", timeout=0.1
    ) as session:
        with pytest.raises(ml.SessionTimeoutError) as info:
            await session.result()
        with pytest.raises(ml.ManagedLoopError) as closed:
            await session.send("more")
        assert closed.value.code == "session_closed"
        with pytest.raises(ml.ManagedLoopError) as again:
            await session.result()
        assert again.value.code == "session_closed"
    assert info.value.code == "timeout"
    partial = info.value.partial_result
    assert partial is not None
    assert partial.turns == 1
    assert [u.id for u in partial.custom_tool_uses] == ["u1"]
    assert host.closed == 1


class StallAfterFirstTurn:
    """Wraps a FakeHost: its connection's second turn never yields."""

    name = "fake"
    supports_outcomes = False
    supports_raw_events = False

    def __init__(self, host: FakeHost) -> None:
        self.host = host

    async def open(self, request: OpenRequest) -> FakeConnection:
        conn = await self.host.open(request)
        first_turn = conn.turn

        async def turn(input: Any) -> Any:
            if len(self.host.inputs) >= 1:
                self.host.inputs.append(input)
                await anyio.sleep_forever()
            async for event in first_turn(input):
                yield event

        conn.turn = turn  # type: ignore[method-assign]
        return conn


async def test_a_later_request_is_bounded_too() -> None:
    host = FakeHost([[text("hi"), stop()]])
    async with ml.start(host, agent=AGENT, handler=Recorder(), prompt="one", timeout=0.1) as s:
        first = await s.result()
        host.block = True  # the next turn never answers
        await s.send("two")
        with pytest.raises(ml.SessionTimeoutError) as info:
            await s.result()
    assert first.text == "hi"
    assert info.value.partial_result is not None
    assert host.closed == 1


async def test_events_iteration_ends_when_the_request_times_out() -> None:
    host = FakeHost(block=True)
    async with ml.start(host, agent=AGENT, handler=Recorder(), timeout=0.1) as session:
        events = session.events()
        await session.send("hello")
        received = [event async for event in events]
        with pytest.raises(ml.SessionTimeoutError):
            await session.result()
    assert received == []


async def test_opening_a_live_session_is_bounded() -> None:
    class NeverOpens(FakeHost):
        async def open(self, request: OpenRequest) -> FakeConnection:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

    with pytest.raises(ml.SessionTimeoutError) as info:
        async with ml.start(NeverOpens(), agent=AGENT, handler=Recorder(), timeout=0.05):
            pass
    assert info.value.partial_result is None
    assert "did not open" in str(info.value)


async def test_timeout_none_means_unbounded() -> None:
    host = FakeHost([[text("hi"), stop()]])
    async with ml.start(host, agent=AGENT, handler=Recorder(), prompt="x", timeout=None) as s:
        assert (await s.result()).text == "hi"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0, -1, "10", True])
async def test_a_bad_start_timeout_fails_before_anything_opens(bad: Any) -> None:
    host = FakeHost([[stop()]])
    with pytest.raises(ml.InvalidOptionsError) as info:
        ml.start(host, agent=AGENT, handler=Recorder(), timeout=bad)
    assert info.value.context["option"] == "timeout"
    assert host.connections == []
