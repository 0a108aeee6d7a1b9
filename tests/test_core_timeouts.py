"""Timeouts end a tool call on time, whatever the tool does (issue 7: sync tools ignored
``tool_timeout``, ``@ml.tool(timeout=...)`` and ``run(timeout=...)``, and a sync tool that
never returned hung ``ml.run``; ``@ml.tool(timeout=1)`` said "timed out after Nones").

No test here measures elapsed time. A stuck sync tool blocks on a ``threading.Event`` the
test only sets at teardown (its ``wait`` has a generous safety valve so a regression fails
instead of leaking a thread forever); the test asserts that the run finished while the
tool's thread is still blocked inside the function.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import managedloop as ml
from fakes import FakeHost, stop, text, tool
from managedloop import _threads
from managedloop.handler import run_tool_calls
from managedloop.results import SessionInfo, ToolUse

pytestmark = pytest.mark.anyio

AGENT = ml.AgentSpec(name="a")
SAFETY_VALVE = 30.0  # seconds; only reached if a regression awaits the stuck thread


class Stuck:
    """A sync function that blocks until teardown; records its thread and whether it ended."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.thread: threading.Thread | None = None
        self.returned = False

    def __call__(self) -> str:
        self.thread = threading.current_thread()
        self.entered.set()
        self.release.wait(SAFETY_VALVE)
        self.returned = True
        return "late"

    def still_blocked(self) -> bool:
        return (
            self.entered.is_set()
            and self.thread is not None
            and self.thread.is_alive()
            and not self.returned
        )


@pytest.fixture
def stuck() -> Iterator[Stuck]:
    s = Stuck()
    yield s
    s.release.set()  # let the abandoned thread finish
    if s.thread is not None:
        s.thread.join(SAFETY_VALVE)


def _tool(fn: Any, **kw: Any) -> ml.Tool[..., Any]:
    def hang() -> str:
        """Never returns on its own."""
        return str(fn())

    return ml.tool(name="hang", **kw)(hang)


def _one_call_host() -> FakeHost:
    return FakeHost([[tool("hang", id="h1"), stop("requires_action")], [text("done"), stop()]])


async def test_session_tool_timeout_answers_a_stuck_sync_tool(stuck: Stuck) -> None:
    host = _one_call_host()
    agent = ml.AgentSpec(name="a", tools=[_tool(stuck)])
    result = await ml.run(host, agent=agent, tool_timeout=0.05)
    assert result.text == "done"
    [sent] = host.inputs[1].results  # type: ignore[union-attr]
    assert sent.is_error
    assert sent.text == "tool 'hang' timed out after 0.05s"
    assert stuck.still_blocked()  # abandoned, never awaited


async def test_a_tools_own_timeout_names_its_bound(stuck: Stuck) -> None:
    toolset = ml.Toolset([_tool(stuck, timeout=0.05)])
    [result] = await run_tool_calls(toolset, [ToolUse(id="u", name="hang")], SessionInfo())
    assert result.is_error
    assert result.text == "tool 'hang' timed out after 0.05s"  # was "after Nones"
    assert stuck.still_blocked()


async def test_the_first_bound_to_fire_is_the_one_named() -> None:
    @ml.tool(timeout=0.05)
    async def slow() -> str:
        await anyio.sleep_forever()
        return "never"

    toolset = ml.Toolset([slow])
    use = ToolUse(id="u", name="slow")
    [own] = await run_tool_calls(toolset, [use], SessionInfo(), timeout=3600)
    assert own.text == "tool 'slow' timed out after 0.05s"

    @ml.tool(timeout=3600)
    async def slower() -> str:
        await anyio.sleep_forever()
        return "never"

    [session] = await run_tool_calls(
        ml.Toolset([slower]), [ToolUse(id="u", name="slower")], SessionInfo(), timeout=0.05
    )
    assert session.text == "tool 'slower' timed out after 0.05s"


async def test_a_timeout_error_raised_by_the_tool_is_not_a_timeout_bound() -> None:
    @ml.tool
    def dial() -> str:
        raise TimeoutError("socket timed out")

    [result] = await run_tool_calls(
        ml.Toolset([dial]), [ToolUse(id="u", name="dial")], SessionInfo(), timeout=3600
    )
    assert result.text == "tool 'dial' raised TimeoutError: socket timed out"


async def test_run_timeout_ends_a_run_stuck_in_a_sync_tool(stuck: Stuck) -> None:
    host = _one_call_host()
    agent = ml.AgentSpec(name="a", tools=[_tool(stuck)])
    with pytest.raises(ml.SessionTimeoutError) as info:
        await ml.run(host, agent=agent, timeout=0.1)
    assert stuck.still_blocked()
    assert host.closed == 1
    partial = info.value.partial_result
    assert partial is not None
    assert [u.id for u in partial.custom_tool_uses] == ["h1"]


def test_run_sync_returns_while_a_sync_tool_never_does(stuck: Stuck) -> None:
    agent = ml.AgentSpec(name="a", tools=[_tool(stuck)])
    result = ml.run_sync(_one_call_host(), agent=agent, tool_timeout=0.05)
    assert result.text == "done"
    assert stuck.still_blocked()  # the event loop closed without waiting for the thread


async def test_an_abandoned_thread_gives_its_slot_back(
    stuck: Stuck, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One tool thread at a time: if the stuck thread kept its slot, the second call would
    # wait for it and time out as well.
    monkeypatch.setattr(_threads, "LIMIT", 1)

    @ml.tool
    def quick() -> str:
        return "quick ok"

    toolset = ml.Toolset([_tool(stuck), quick])
    info = SessionInfo()
    [first] = await run_tool_calls(toolset, [ToolUse(id="a", name="hang")], info, timeout=0.05)
    assert first.is_error
    [second] = await run_tool_calls(toolset, [ToolUse(id="b", name="quick")], info, timeout=30)
    assert second.text == "quick ok"
    assert stuck.still_blocked()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1, 0, True, "1"])
def test_a_tool_timeout_must_be_finite_seconds(bad: Any) -> None:
    def named() -> str:
        return "x"

    with pytest.raises(ml.ToolDefinitionError) as info:
        ml.tool(timeout=bad)(named)
    assert "timeout" in str(info.value)
