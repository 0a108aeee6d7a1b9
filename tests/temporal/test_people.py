"""People and live sessions on a real Temporal dev server: approvals decided by another
process while no worker runs, follow-up messages, the events query, continue-as-new, and
options refused before anything reaches Temporal."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import TemporalError

import managedloop as ml
from managedloop.contrib import temporal as mlt
from managedloop.stores import MemoryStore
from managedloop.testing import ChatEmulator

from .conftest import local_on, task_queue, until_pending

pytestmark = pytest.mark.anyio

DECIDER = Path(__file__).with_name("decider.py")
WAIT_BOUND = 90.0
RAN: list[str] = []


@ml.tool(requires_approval=True)
def delete_files(pattern: str) -> str:
    """Delete the files matching a pattern."""
    RAN.append(pattern)
    return f"deleted {pattern}"


@ml.tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


RISKY = ml.AgentSpec(name="ops", system_prompt="Use tools.", tools=[delete_files], model="m")
CALC = ml.AgentSpec(name="calc", system_prompt="Use tools.", tools=[add], model="m")


def _worker(client: Client, queue: str, emu: ChatEmulator, store: MemoryStore) -> Any:
    return mlt.worker(
        client,
        task_queue=queue,
        providers={"local": local_on(emu)},
        agents={"ops": RISKY, "calc": CALC},
        store=store,
    )


def _decide_elsewhere(address: str, wid: str, *verdict: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, str(DECIDER), address, wid, *verdict],
        capture_output=True,
        text=True,
        check=False,
        timeout=WAIT_BOUND,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.parametrize("verdict", ["approve", "deny"])
async def test_an_approval_decided_by_another_process_with_no_worker_running(
    client: Client, temporal_address: str, verdict: str
) -> None:
    RAN.clear()
    queue, store = task_queue(), MemoryStore()
    with ChatEmulator() as emu:
        async with _worker(client, queue, emu, store):
            wid = await mlt.start(
                client, provider="local", agent="ops", prompt="clean up", task_queue=queue
            )
            [held] = await until_pending(client, wid)
        # The worker is gone: the session waits in Temporal, not in a process.
        assert held.tool_use.name == "delete_files"
        assert held.source == "tool"
        assert RAN == []
        decided = await asyncio.to_thread(
            _decide_elsewhere, temporal_address, wid, verdict, "not today"
        )
        assert decided == [held.tool_use.id]
        async with _worker(client, queue, emu, store):
            result = await mlt.result(client, wid, store=store)
    assert result.terminal == ml.Terminal.END_TURN
    answers = [m for m in emu.received[-1]["messages"] if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in answers] == [held.tool_use.id]  # answered once
    if verdict == "approve":
        assert [held.tool_use.input["pattern"]] == RAN
        assert answers[0]["content"].startswith("deleted")
    else:
        assert RAN == []  # a denied call never runs
        assert "denied" in answers[0]["content"]
        assert "not today" in answers[0]["content"]
    assert await mlt.pending(client, wid) == []


async def test_a_live_session_serves_follow_ups_and_streams_events(
    client: Client,
) -> None:
    queue, store = task_queue(), MemoryStore()
    with ChatEmulator() as emu:
        async with _worker(client, queue, emu, store):
            wid = await mlt.start(
                client, provider="local", agent="calc", prompt="add", task_queue=queue, live=True
            )
            first = await mlt.result(client, wid, store=store)
            assert first.terminal == ml.Terminal.END_TURN
            events = await mlt.events(client, wid)
            assert events == first.events
            again = await mlt.send(client, wid, "and once more", store=store)
            assert again.terminal == ml.Terminal.END_TURN
            assert again.transcript is not None
            users = [m["content"] for m in again.transcript if m["role"] == "user"]
            assert users == ["add", "and once more"]  # one conversation, both requests
            await mlt.close(client, wid)
            final = await client.get_workflow_handle(wid).result()
    assert final["turns"] == again.turns


async def test_a_live_session_continues_as_new_and_keeps_its_conversation(
    client: Client,
) -> None:
    queue, store = task_queue(), MemoryStore()
    with ChatEmulator() as emu:
        async with _worker(client, queue, emu, store):
            wid = await mlt.start(
                client,
                provider="local",
                agent="calc",
                prompt="one",
                task_queue=queue,
                live=True,
                requests_per_run=1,
            )
            await mlt.result(client, wid)
            second = await mlt.send(client, wid, "two", store=store)
            third = await mlt.send(client, wid, "three", store=store)
            handle = client.get_workflow_handle(wid)
            with pytest.raises(WorkflowUpdateFailedError) as info:
                await mlt.result(client, wid, request=1)
            assert "continued as new" in str(info.value.cause)
            await mlt.close(client, wid)
            await handle.result()
            runs = [e async for e in client.list_workflows(f"WorkflowId = '{wid}'")]
    assert second.session_id == third.session_id
    assert third.transcript is not None
    users = [m["content"] for m in third.transcript if m["role"] == "user"]
    assert users == ["one", "two", "three"]
    assert len(runs) >= 3  # one run per request, chained by continue-as-new


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"provider": ""}, "provider"),
        ({"prompt": 12}, "prompt"),
        ({"max_turns": 0}, "max_turns"),
        ({"tool_timeout": float("nan")}, "tool_timeout"),
        ({"heartbeat_timeout": None}, "heartbeat_timeout"),
        ({"requests_per_run": 0}, "requests_per_run"),
    ],
)
async def test_bad_options_fail_before_anything_reaches_temporal(
    options: dict[str, Any], option: str
) -> None:
    given: dict[str, Any] = {"provider": "p", "agent": "a", "prompt": "x", "task_queue": "q"}
    given.update(options)
    with pytest.raises(ml.InvalidOptionsError) as info:
        await mlt.start(object(), **given)  # type: ignore[arg-type]  # never used
    assert info.value.context["option"] == option


async def test_a_decision_must_be_approve_or_deny() -> None:
    with pytest.raises(ml.InvalidOptionsError):
        await mlt.decide(object(), "wid", {"t1": True})  # type: ignore[arg-type,dict-item]


RAN_ON: list[str] = []


@ml.tool(name="render")
def render_here(scene: str) -> str:
    """Render a scene."""
    RAN_ON.append("agents")
    return "rendered on the agents queue"


@ml.tool(name="render")
def render_on_gpu(scene: str) -> str:
    """Render a scene."""
    RAN_ON.append("gpu")
    return "rendered on the gpu queue"


async def test_a_tool_pinned_to_a_queue_runs_on_that_queue(client: Client) -> None:
    RAN_ON.clear()
    queue, gpu, store = task_queue(), task_queue(), MemoryStore()
    art = ml.AgentSpec(name="art", system_prompt="Draw.", tools=[render_here], model="m")
    with ChatEmulator() as emu:
        async with (
            mlt.worker(
                client,
                task_queue=queue,
                providers={"local": local_on(emu)},
                agents={"art": art},
                store=store,
                tool_queues={"render": gpu},
            ),
            mlt.worker(client, task_queue=gpu, tools=[render_on_gpu]),
        ):
            result = await mlt.run(
                client, provider="local", agent="art", prompt="a cat", task_queue=queue, store=store
            )
    assert result.terminal == ml.Terminal.END_TURN
    assert RAN_ON == ["gpu"]
    assert result.transcript is not None
    tool = [m["content"] for m in result.transcript if m["role"] == "tool"]
    assert tool == ["rendered on the gpu queue"]


async def test_the_workflow_outside_temporal_fails_loudly() -> None:
    from managedloop.contrib.temporal import SessionWorkflow
    from managedloop.contrib.temporal._wire import SessionStart

    start = SessionStart(provider="p", agent="a", prompt="x", task_queue="q")
    with pytest.raises(TemporalError, match="Not in workflow"):
        await SessionWorkflow(start).run(start)


async def test_a_result_is_read_after_the_session_has_ended(
    client: Client, temporal_address: str
) -> None:
    queue, store = task_queue(), MemoryStore()
    with ChatEmulator() as emu:
        async with _worker(client, queue, emu, store):
            wid = await mlt.start(
                client, provider="local", agent="calc", prompt="add", task_queue=queue
            )
            await client.get_workflow_handle(wid).result()  # over: no update can land now
        later = await Client.connect(temporal_address)  # another process, no worker running
        result = await mlt.result(later, wid, store=store)
        with pytest.raises(ml.InvalidOptionsError):
            await mlt.result(later, wid, request=2)
    assert result.terminal == ml.Terminal.END_TURN
    assert [u.name for u in result.custom_tool_uses] == ["add"]
    assert result.transcript is not None
