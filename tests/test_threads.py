"""A default sync tool's worker thread (``managedloop._threads``): what the hop keeps of
anyio's ``to_thread.run_sync`` while costing less.

* the tool may call ``anyio.from_thread.run`` / ``run_sync`` / ``check_cancelled``;
* contextvars reach the tool; sniffio sees no event loop in the thread (as in anyio's);
* at most ``LIMIT`` calls run at once per loop, later ones wait in order, and an abandoned
  call's slot is free at once (the abandoned-thread test is in ``test_core_timeouts``);
* the threads carry the name the CLI looks for, are reused across event loops, end when
  idle long enough, and the interpreter exits without waiting for idle ones.

No test measures elapsed time: every wait is on an event the test sets, with a generous
safety valve that only a regression reaches.
"""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.from_thread
import pytest
import sniffio

import managedloop as ml
from managedloop import _threads
from managedloop.cli.interrupt import tool_threads
from managedloop.handler import run_tool_calls
from managedloop.results import SessionInfo, ToolUse

pytestmark = pytest.mark.anyio

SAFETY_VALVE = 30.0  # seconds; only reached by a regression
VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_threads_var", default="unset")


async def _one(fn: Any, **kw: Any) -> ml.ToolResult:
    def body() -> str:
        return str(fn())

    toolset = ml.Toolset([ml.tool(name="t", **kw)(body)])
    [result] = await run_tool_calls(toolset, [ToolUse(id="u", name="t")], SessionInfo())
    return result


class Gate:
    """A sync tool body that says it started, then waits for the test to let it go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.thread: threading.Thread | None = None

    def __call__(self) -> str:
        self.thread = threading.current_thread()
        self.entered.set()
        assert self.go.wait(SAFETY_VALVE)
        return "through"

    async def wait_entered(self) -> None:
        for _ in range(100_000):  # the safety valve: the thread sets it at once
            if self.entered.is_set():
                return
            await anyio.sleep(0.001)
        raise AssertionError("the tool never started")


@pytest.fixture
def gates() -> Iterator[list[Gate]]:
    made: list[Gate] = []
    yield made
    for gate in made:
        gate.go.set()
        if gate.thread is not None:
            gate.thread.join(SAFETY_VALVE)


async def test_a_sync_tool_runs_in_a_named_worker_thread_with_the_callers_context() -> None:
    seen: dict[str, Any] = {}

    def probe() -> str:
        seen["thread"] = threading.current_thread()
        seen["var"] = VAR.get()
        try:
            seen["library"] = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            seen["library"] = None
        VAR.set("set in the thread")  # a copy: the caller's context is not changed
        return "ok"

    VAR.set("from the caller")
    result = await _one(probe)
    assert result.text == "ok"
    assert seen["thread"] is not threading.current_thread()
    assert seen["thread"].name == _threads.THREAD_NAME
    assert seen["var"] == "from the caller"
    assert seen["library"] is None  # the thread runs no event loop
    assert VAR.get() == "from the caller"


async def test_a_sync_tool_can_call_back_into_the_event_loop() -> None:
    loop_thread = threading.current_thread()

    async def on_the_loop(x: int) -> tuple[int, threading.Thread]:
        await anyio.sleep(0)
        return x + 1, threading.current_thread()

    def in_loop_thread() -> threading.Thread:
        return threading.current_thread()

    def calls_back() -> str:
        value, where = anyio.from_thread.run(on_the_loop, 41)
        also = anyio.from_thread.run_sync(in_loop_thread)
        anyio.from_thread.check_cancelled()  # not cancelled: returns
        assert where is loop_thread
        assert also is loop_thread
        return f"got {value}"

    assert (await _one(calls_back)).text == "got 42"


async def test_check_cancelled_raises_in_an_abandoned_tool(gates: list[Gate]) -> None:
    gate = Gate()
    gates.append(gate)
    told: list[bool] = []

    def polls() -> str:
        gate()
        try:
            anyio.from_thread.check_cancelled()
        except asyncio.CancelledError:  # anyio's cancellation exception on asyncio
            told.append(True)
            raise
        told.append(False)
        return "not told"

    result = await _one(polls, timeout=0.05)
    assert result.text == "tool 't' timed out after 0.05s"
    gate.go.set()
    assert gate.thread is not None
    gate.thread.join(SAFETY_VALVE)
    assert told == [True]


async def test_calls_beyond_the_limit_wait_in_order(
    gates: list[Gate], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_threads, "LIMIT", 1)
    first, second = Gate(), Gate()
    gates += [first, second]
    results: dict[str, str] = {}

    async def call(name: str, gate: Gate) -> None:
        results[name] = (await _one(gate)).text

    side = _threads._loop_side(asyncio.get_running_loop())
    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "first", first)
        await first.wait_entered()
        tg.start_soon(call, "second", second)
        for _ in range(100_000):  # the safety valve: the second call queues at once
            if side.waiters:
                break
            await anyio.sleep(0)
        assert len(side.waiters) == 1
        assert side.busy == 1
        assert not second.entered.is_set()  # it waits for the first one's slot
        first.go.set()
        await second.wait_entered()
        second.go.set()
    assert results == {"first": "through", "second": "through"}
    assert side.busy == 0
    assert not side.waiters


async def test_a_cancelled_waiter_gives_up_its_place(
    gates: list[Gate], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_threads, "LIMIT", 1)
    first, third = Gate(), Gate()
    gates += [first, third]
    side = _threads._loop_side(asyncio.get_running_loop())
    async with anyio.create_task_group() as tg:
        tg.start_soon(_one, first)
        await first.wait_entered()
        with anyio.move_on_after(0.05):  # waits for the slot, never gets it
            await _threads.run_sync(lambda: "never", {})
        tg.start_soon(_one, third)
        first.go.set()
        await third.wait_entered()
        third.go.set()
    assert side.busy == 0


def test_workers_are_reused_across_event_loops_and_end_when_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[threading.Thread] = []

    def where() -> str:
        threads.append(threading.current_thread())
        return "ok"

    agent_tool = ml.Toolset([ml.tool(name="t")(where)])

    async def call() -> None:
        await run_tool_calls(agent_tool, [ToolUse(id="u", name="t")], SessionInfo())

    anyio.run(call)
    anyio.run(call)  # a fresh loop, as every run_sync call has
    assert threads[0] is threads[1]
    monkeypatch.setattr(_threads, "IDLE", 0.01)
    anyio.run(call)  # its worker now waits 0.01 s for the next call, then ends
    threads[-1].join(SAFETY_VALVE)
    assert not threads[-1].is_alive()


async def test_the_cli_finds_an_abandoned_tool_thread(gates: list[Gate]) -> None:
    gate = Gate()
    gates.append(gate)
    result = await _one(gate, timeout=0.05)
    assert result.is_error
    assert gate.thread in tool_threads()
    gate.go.set()
    gate.thread.join(SAFETY_VALVE)  # type: ignore[union-attr]
    assert gate.thread not in tool_threads()


def test_the_interpreter_exits_without_waiting_for_idle_workers() -> None:
    # Idle workers are not daemons; if nothing ended them at exit, this child would wait
    # an hour for its idle worker and hit the safety valve.
    script = (
        "import managedloop as ml, managedloop._threads as t\n"
        "from managedloop.handler import run_tool_calls\n"
        "from managedloop.results import SessionInfo, ToolUse\n"
        "import anyio\n"
        "t.IDLE = 3600.0\n"
        "ts = ml.Toolset([ml.tool(name='t')(lambda: 'ok')])\n"
        "async def main():\n"
        "    [r] = await run_tool_calls(ts, [ToolUse(id='u', name='t')], SessionInfo())\n"
        "    print(r.text)\n"
        "anyio.run(main)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=SAFETY_VALVE,
        check=True,
    )
    assert out.stdout == "ok\n"
