"""MCP tools in durable sessions: the worker holds its MCP servers open while it runs (one
server process per worker, not per call) and ends them when it stops."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

import managedloop as ml
from managedloop.contrib import temporal as mlt
from managedloop.stores import MemoryStore
from managedloop.testing import ChatEmulator

from .conftest import local_on, task_queue

pytestmark = pytest.mark.anyio

WEATHER = Path(__file__).resolve().parents[1] / "mcp" / "weather_server.py"


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_an_mcp_tool_in_a_durable_session(client: Client, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    tools = await ml.Toolset.from_mcp(
        sys.executable,
        args=[str(WEATHER)],
        env={"MCP_TEST_PIDFILE": str(pidfile)},
        tools=["get_forecast"],
    )
    listed = _pids(pidfile)  # the listing's own server, already gone
    agent = ml.AgentSpec(name="wx", system_prompt="Use tools.", tools=[tools], model="m")
    queue, store = task_queue(), MemoryStore()
    with ChatEmulator() as emu:
        local = local_on(emu)
        async with mlt.worker(
            client, task_queue=queue, providers={"local": local}, agents={"wx": agent}, store=store
        ):
            first = await mlt.run(
                client,
                provider="local",
                agent="wx",
                prompt="forecast?",
                task_queue=queue,
                store=store,
            )
            second = await mlt.run(
                client, provider="local", agent="wx", prompt="again?", task_queue=queue, store=store
            )
            serving = _pids(pidfile)[len(listed) :]
            assert len(serving) == 1  # one server for the worker, both sessions
            assert _alive(serving[0])
    for result in (first, second):
        assert result.terminal == ml.Terminal.END_TURN
        assert result.transcript is not None
        [answer] = [m["content"] for m in result.transcript if m["role"] == "tool"]
        assert answer.startswith("Forecast for")
    assert not _alive(serving[0])  # ended with the worker
