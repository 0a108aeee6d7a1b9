"""Typed results (``output=``) in durable sessions on a real Temporal dev server: the
workers import the output type by its path and validate; a session survives a SIGKILLed
worker and still returns the instance."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from temporalio.client import Client

import managedloop as ml
from managedloop.contrib import temporal as mlt
from managedloop.stores import FileStore, MemoryStore
from managedloop.testing import ChatEmulator, call
from output.models import BAD, GOOD, Sky, Weather, in_europe

from .conftest import local_on, task_queue
from .test_kill import WAIT_BOUND, Host, Workers, _host, _until, workers  # noqa: F401 (a fixture)

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).resolve().parent.parent
SPEC = ml.AgentSpec(name="calc", system_prompt="Use tools.", model="m")


async def test_invalid_then_valid_output_in_a_workflow(client: Client) -> None:
    store = MemoryStore()
    queue = task_queue("output")
    with ChatEmulator([call("final_result", BAD), call("final_result", GOOD)]) as emu:
        async with mlt.worker(
            client,
            task_queue=queue,
            providers={"local": local_on(emu)},
            agents={"calc": SPEC},
            store=store,
        ):
            result = await mlt.run(
                client,
                provider="local",
                agent="calc",
                prompt="weather?",
                task_queue=queue,
                store=store,
                output=Weather,
            )
    assert isinstance(result.output, Weather)
    assert result.output.sky is Sky.SUNNY
    assert result.output_strategy == "tool"
    assert result.turns == 2
    assert result.custom_tool_uses == []
    assert "Input should be" in emu.requests[1].tool_results[0].text
    assert [t.name for t in emu.requests[0].tools] == ["final_result"]


async def test_never_valid_ends_output_invalid_in_a_workflow(client: Client) -> None:
    queue = task_queue("output")
    script = [call("final_result", {**BAD, "city": c}) for c in ("A", "B")]
    with ChatEmulator(script) as emu:
        async with mlt.worker(
            client, task_queue=queue, providers={"local": local_on(emu)}, agents={"calc": SPEC}
        ):
            result = await mlt.run(
                client,
                provider="local",
                agent="calc",
                prompt="weather?",
                task_queue=queue,
                output="output.models:Weather",
                output_retries=1,
            )
    assert (result.reason, result.output, result.turns) == ("output_invalid", None, 2)
    assert result.output_failure is not None
    assert result.output_failure.payload == {**BAD, "city": "B"}
    assert {tuple(e["loc"]) for e in result.output_failure.errors} == {("sky",), ("temperature",)}


async def test_the_workers_run_the_output_validators(client: Client) -> None:
    # in_europe crosses by name and runs on the worker after pydantic: its ModelRetry is
    # the model's to fix, and the fixed output is the result's.
    queue = task_queue("output")
    tokyo = {**GOOD, "city": "Tokyo"}
    with ChatEmulator([call("final_result", tokyo), call("final_result", GOOD)]) as emu:
        async with mlt.worker(
            client, task_queue=queue, providers={"local": local_on(emu)}, agents={"calc": SPEC}
        ):
            result = await mlt.run(
                client,
                provider="local",
                agent="calc",
                prompt="weather?",
                task_queue=queue,
                output=Weather,
                output_validator=[in_europe, "output.models:in_europe"],
            )
    assert isinstance(result.output, Weather)
    assert (result.output.city, result.turns) == ("Paris", 2)
    assert "Tokyo is not in Europe" in emu.requests[1].tool_results[0].text


async def test_bad_output_options_fail_before_temporal(client: Client) -> None:
    class Local_(Weather):  # defined in a function: no worker could import it
        pass

    def nested(value: Weather) -> None:  # nor this one
        del value

    for kwargs in (
        {"output": Local_},
        {"output": "no-colon"},
        {"output": Weather, "output_strategy": "xml"},
        {"output": Weather, "output_retries": -1},
        {"output": Weather, "output_validator": nested},
        {"output": Weather, "output_validator": lambda value: value},
        {"output": Weather, "output_validator": "no-colon"},
        {"output_validator": in_europe},  # a validator with nothing to check
    ):
        with pytest.raises(ml.InvalidOptionsError):
            await mlt.start(client, provider="p", agent="a", prompt="x", task_queue="q", **kwargs)


async def test_an_output_session_survives_a_sigkilled_worker(
    client: Client,
    workers: Callable[[Host, str], Workers],  # noqa: F811 (test_kill's fixture, imported)
    tmp_path: Path,
) -> None:
    """The scripted agent calls slow_add and the output tool in one turn (no script: every
    tool with schema-made arguments); the worker dies in slow_add; a second worker runs
    it again, then validates the output and the session returns the Weather."""
    queue = task_queue("kill-output")
    marks = tmp_path / "marks"
    async with _host("local", hold_first_turn=False) as host:
        pool = workers(host, queue)
        pool.env["PYTHONPATH"] = str(TESTS)  # the workers import output.models by name
        first = pool.start()
        run = asyncio.create_task(
            mlt.run(
                client,
                provider="host",
                agent="calc",
                prompt="add",
                task_queue=queue,
                heartbeat_timeout=2.0,
                store=FileStore(tmp_path / "store.json"),
                output=Weather,
            )
        )
        await _until((marks / f"tool-started-{first.pid}").exists, "the tool to start")
        pool.kill(first)
        (marks / "release").write_text("1")
        second = pool.start()
        result = await asyncio.wait_for(run, WAIT_BOUND)
        answers = host.answers(result.session_id)
    assert isinstance(result.output, Weather), result
    assert result.output_strategy == "tool"
    assert result.terminal == ml.Terminal.END_TURN
    [use] = result.custom_tool_uses
    assert use.name == "slow_add"
    assert not (marks / f"tool-done-{first.pid}").exists()
    assert (marks / f"tool-done-{second.pid}").exists()
    assert answers == []  # the output ended the session: no results were sent back
    assert len(host.emu.received) == 1  # one model call: the output came with slow_add
