"""200 durable sessions while the Temporal server itself is stopped and started again on
the same database file: every session finishes once, and each tool use is answered once.

The server is a real ``temporal server start-dev`` keeping its state in a SQLite file; it
is stopped (SIGTERM, as an operator's restart does) once the sessions are under way, and
started again on the same port and file. The two workers and the client stay up through
it and reconnect by themselves. Every wait is for an observable event under a bound.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

import managedloop as ml
from managedloop.contrib import temporal as mlt
from managedloop.contrib.temporal.testing import dev_server, free_port
from managedloop.testing import ChatEmulator

from .conftest import local_on, poll, task_queue

pytestmark = pytest.mark.anyio

SESSIONS = 200
WAIT_BOUND = 600.0  # for all of them, on a loaded two-core machine: a bound, not a margin


@ml.tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


SPEC = ml.AgentSpec(name="calc", system_prompt="Use tools.", tools=[add], model="m")


@pytest.mark.timeout(900)  # 200 sessions and two server starts on a loaded 2-core machine
async def test_sessions_finish_once_across_a_server_restart(tmp_path: Path) -> None:
    port, db = free_port(), tmp_path / "temporal.sqlite"
    log = tmp_path / "server.log"
    queue = task_queue("restart")
    first = dev_server(port=port, db_filename=db, log_path=log)
    address = first.__enter__()
    second = None
    try:
        with ChatEmulator() as emu:
            client = await Client.connect(address)
            providers = {"local": local_on(emu)}
            one = mlt.worker(client, task_queue=queue, providers=providers, agents={"calc": SPEC})
            two = mlt.worker(
                await Client.connect(address),
                task_queue=queue,
                providers=providers,
                agents={"calc": SPEC},
            )
            async with one, two:
                wids = [
                    await mlt.start(
                        client, provider="local", agent="calc", prompt=f"add {i}", task_queue=queue
                    )
                    for i in range(SESSIONS)
                ]

                async def under_way() -> bool:
                    return len(emu.received) >= SESSIONS // 2

                await poll(under_way, "half the sessions' first turns")
                done_before = len(emu.received)
                first.__exit__(None, None, None)  # the server stops, mid-load
                second = dev_server(port=port, db_filename=db, log_path=log)
                second.__enter__()
                results = await asyncio.wait_for(
                    asyncio.gather(*(mlt.result(client, w) for w in wids)), WAIT_BOUND
                )
                statuses = [(await client.get_workflow_handle(w).describe()).status for w in wids]
    finally:
        if second is not None:
            second.__exit__(None, None, None)
        else:
            first.__exit__(None, None, None)
    assert done_before < 2 * SESSIONS, "the restart came after the load, not during it"
    assert all(s is WorkflowExecutionStatus.COMPLETED for s in statuses)
    for i, result in enumerate(results):
        assert result.terminal == ml.Terminal.END_TURN, (i, result)
        [use] = result.custom_tool_uses
        assert result.transcript is not None
        answered = Counter(m.get("tool_call_id") for m in result.transcript if m["role"] == "tool")
        assert answered == Counter({use.id: 1}), (i, result.transcript)
        assert result.transcript[1]["content"] == f"add {i}"
