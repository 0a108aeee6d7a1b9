"""The connection's close runs whole inside a shield: a close that suspends finishes, in a
timed-out run and in a cancelled outer scope too, and one that enters cancel scopes of
its own (an anyio-based client's) keeps them nested (an earlier attempt stepped the close
outside the shield first, which broke exactly that: the Anthropic SDK's close)."""

from __future__ import annotations

import asyncio
import math

import anyio
import pytest

import managedloop as ml
from fakes import FakeConnection, FakeHost, stop, text

pytestmark = pytest.mark.anyio


class SlowClose(FakeConnection):
    """A close that suspends several times (a checkpoint, a real sleep, a future) and
    records what it saw of the cancel scope around it."""

    steps: list[str]

    async def aclose(self) -> None:
        self.steps = []
        # What a backend that cancels at checkpoints (trio) would see before suspending:
        # a cancelled scope reaching the close's first step would end it here.
        if anyio.current_effective_deadline() == -math.inf:
            raise RuntimeError("the close ran in a cancelled scope")
        await anyio.lowlevel.checkpoint()
        self.steps.append("checkpoint")
        await asyncio.sleep(0.001)
        self.steps.append("slept")
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(future.set_result, "done")
        self.steps.append(await future)
        self.steps.append(f"deadline={anyio.current_effective_deadline()}")
        await super().aclose()


class SlowHost(FakeHost):
    async def open(self, request: ml.hosts.OpenRequest) -> FakeConnection:
        conn = SlowClose(self, request)
        self.connections.append(conn)
        return conn


class FailingClose(FakeConnection):
    async def aclose(self) -> None:
        raise RuntimeError("close failed")


class FailingHost(FakeHost):
    async def open(self, request: ml.hosts.OpenRequest) -> FakeConnection:
        return FailingClose(self, request)


AGENT = ml.AgentSpec()


async def test_a_close_that_suspends_is_finished_where_it_stopped() -> None:
    host = SlowHost([[text("hi"), stop()]])
    result = await ml.run(host, agent=AGENT, prompt="x")
    assert result.text == "hi"
    conn = host.connections[0]
    assert isinstance(conn, SlowClose)
    assert conn.steps == ["checkpoint", "slept", "done", f"deadline={math.inf}"]
    assert host.closed == 1


async def test_a_timed_out_run_closes_whole_inside_the_shield() -> None:
    host = SlowHost(block=True)
    with pytest.raises(ml.SessionTimeoutError):
        await ml.run(host, agent=AGENT, prompt="x", timeout=0.01)
    conn = host.connections[0]
    assert isinstance(conn, SlowClose)
    assert conn.steps == ["checkpoint", "slept", "done", f"deadline={math.inf}"]  # shielded
    assert host.closed == 1


async def test_a_close_in_a_cancelled_outer_scope_still_completes() -> None:
    host = SlowHost(block=True)
    with anyio.move_on_after(0.01):
        await ml.run(host, agent=AGENT, prompt="x", timeout=None)
    assert host.closed == 1


class ScopedClose(FakeConnection):
    async def aclose(self) -> None:
        with anyio.CancelScope():  # entered before the first suspension, left after it
            await anyio.sleep(0)
        await super().aclose()


class ScopedHost(FakeHost):
    async def open(self, request: ml.hosts.OpenRequest) -> FakeConnection:
        return ScopedClose(self, request)


async def test_a_close_with_its_own_cancel_scope_across_a_suspension() -> None:
    host = ScopedHost([[text("hi"), stop()]])
    assert (await ml.run(host, agent=AGENT, prompt="x")).text == "hi"
    assert host.closed == 1


async def test_a_close_that_fails_at_once_raises_its_error() -> None:
    with pytest.raises(RuntimeError, match="close failed"):
        await ml.run(FailingHost([[text("hi"), stop()]]), agent=AGENT, prompt="x")
