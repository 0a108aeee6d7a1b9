"""Durable Local sessions on a real Temporal dev server."""

from __future__ import annotations

import pytest
from temporalio.client import Client

import managedloop as ml
from managedloop.contrib import temporal as mlt
from managedloop.stores import MemoryStore
from managedloop.testing import ChatEmulator

from .conftest import local_on, task_queue

pytestmark = pytest.mark.anyio


@ml.tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


SPEC = ml.AgentSpec(name="calc", system_prompt="Use tools.", tools=[add], model="m")


async def test_a_local_session_runs_as_a_workflow(client: Client) -> None:
    store = MemoryStore()
    queue = task_queue()
    with ChatEmulator() as emu:
        local = local_on(emu)
        async with mlt.worker(
            client, task_queue=queue, providers={"local": local}, agents={"calc": SPEC}, store=store
        ):
            result = await mlt.run(
                client,
                provider="local",
                agent="calc",
                prompt="add please",
                task_queue=queue,
                store=store,
            )
    assert result.terminal == ml.Terminal.END_TURN
    assert [u.name for u in result.custom_tool_uses] == ["add"]
    assert result.turns == 2
    assert result.transcript is not None
    tool_msgs = [m for m in result.transcript if m.get("role") == "tool"]
    assert len(tool_msgs) == 1
    assert len(emu.received) == 2
