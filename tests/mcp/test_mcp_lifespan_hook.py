"""The driver's generic hook behind MCP sessions: a handler with ``lifespan()`` is entered
when a session opens (before the host is opened), serves the session with what it yields,
and is left when the session ends -- after the host connection is closed -- on every path.
No MCP server here: the hook knows nothing of MCP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import managedloop as ml
from managedloop.hosts import OpenRequest
from managedloop.providers import Local
from managedloop.testing import ModelRequest, ScriptedChatModel, call, say

pytestmark = pytest.mark.anyio


class _Served:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def handle_tool_call(self, name: str, input: dict[str, Any], info: ml.SessionInfo) -> str:
        self.log.append(f"call {name}")
        return "served"


class _WithLifespan:
    """Serves nothing itself: only what its lifespan yields may answer."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], info: ml.SessionInfo) -> str:
        raise AssertionError("the handler itself must not serve: its lifespan's does")

    @asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[_Served]:
        self.log.append("enter")
        try:
            yield _Served(self.log)
        except BaseException as exc:
            self.log.append(f"exit with {type(exc).__name__}")
            raise
        self.log.append("exit")

    def lifespan(self) -> Any:
        return self._lifespan()


class _Logged(Local):
    """Local, logging when its connection opens and closes."""

    def __init__(self, log: list[str], script: list[Any]) -> None:
        super().__init__(model="m", chat=ScriptedChatModel(script))
        self._log = log

    async def open(self, request: OpenRequest) -> Any:
        self._log.append("host open")
        conn = await super().open(request)
        close = conn.aclose

        async def aclose() -> None:
            self._log.append("host close")
            await close()

        conn.aclose = aclose  # type: ignore[method-assign]
        return conn


AGENT = ml.AgentSpec(tools=[ml.ToolDefinition(name="t")])


async def test_run_serves_with_what_the_lifespan_yields_and_leaves_it_last() -> None:
    handler = _WithLifespan()
    provider = _Logged(handler.log, [call("t"), say("done")])
    result = await ml.run(provider, agent=AGENT, handler=handler, prompt="Go.")
    assert result.text == "done"
    assert handler.log == ["enter", "host open", "call t", "host close", "exit"]


async def test_run_leaves_the_lifespan_when_the_host_fails() -> None:
    def broken(request: ModelRequest) -> Any:
        raise AssertionError("broken")

    handler = _WithLifespan()
    with pytest.raises(ml.ProviderError):
        await ml.run(_Logged(handler.log, [broken]), agent=AGENT, handler=handler, prompt="Go.")
    assert handler.log == ["enter", "host open", "host close", "exit with ProviderError"]


async def test_a_live_session_keeps_the_lifespan_until_it_closes() -> None:
    handler = _WithLifespan()
    provider = _Logged(handler.log, [call("t"), say("one"), say("two")])
    async with ml.start(provider, agent=AGENT, handler=handler, prompt="Go.") as session:
        assert (await session.result()).text == "one"
        await session.send("again")
        assert (await session.result()).text == "two"
        assert handler.log == ["enter", "host open", "call t"]
    assert handler.log == ["enter", "host open", "call t", "host close", "exit"]
