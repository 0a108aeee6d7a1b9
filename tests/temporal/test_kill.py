"""A durable session survives a SIGKILLed worker: it finishes on a second worker, and each
tool use is answered exactly once on the wire (the chat emulator's request log).

Workers are separate processes (``worker_app.py``) sharing a store directory. Every wait
is for an observable event (a marker file, a request at the emulator) under a generous
bound, never a timed margin. The heartbeat timeout is short (2 s) so the dead worker's
activity is retried soon.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

import managedloop as ml
from managedloop.contrib import temporal as mlt
from managedloop.testing import ChatEmulator, ChatFaults

from .dirstore import DirStore

pytestmark = pytest.mark.anyio

APP = Path(__file__).with_name("worker_app.py")
WAIT_BOUND = 90.0


class Workers:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.procs: list[subprocess.Popen[str]] = []

    def start(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(APP)], env=self.env, stdout=subprocess.PIPE, text=True
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the worker polls (or dies)
        assert line.strip() == "ready", f"worker did not start: {line!r}"
        return proc

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()


@pytest.fixture
def workers(tmp_path: Path, temporal_address: str) -> Iterator[Callable[..., Workers]]:
    made: list[Workers] = []

    def make(base_url: str, api_key: str, queue: str) -> Workers:
        env = {
            **os.environ,
            "ML_TEMPORAL": temporal_address,
            "ML_QUEUE": queue,
            "ML_BASE_URL": base_url,
            "ML_API_KEY": api_key,
            "ML_STORE": str(tmp_path / "store"),
            "ML_MARKS": str(tmp_path / "marks"),
        }
        (tmp_path / "marks").mkdir(exist_ok=True)
        w = Workers(env)
        made.append(w)
        return w

    yield make
    for w in made:
        w.stop_all()


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_BOUND
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _tool_answers(body: dict[str, object]) -> list[str]:
    messages = body["messages"]
    assert isinstance(messages, list)
    return [m["tool_call_id"] for m in messages if m.get("role") == "tool"]


async def test_worker_killed_during_a_tool_call(
    temporal_address: str, workers: Callable[..., Workers], tmp_path: Path
) -> None:
    client = await Client.connect(temporal_address)
    queue = f"kill-tool-{uuid.uuid4().hex[:8]}"
    marks = tmp_path / "marks"
    with ChatEmulator() as emu:
        pool = workers(emu.base_url, emu.api_key, queue)
        first = pool.start()
        run = asyncio.create_task(
            mlt.run(
                client,
                provider="local",
                agent="calc",
                prompt="add",
                task_queue=queue,
                heartbeat_timeout=2.0,
                store=DirStore(tmp_path / "store"),
            )
        )
        await _until((marks / f"tool-started-{first.pid}").exists, "the tool to start")
        first.send_signal(signal.SIGKILL)
        first.wait()
        (marks / "release").write_text("1")
        second = pool.start()
        result = await asyncio.wait_for(run, WAIT_BOUND)
    assert result.terminal == ml.Terminal.END_TURN
    assert [u.name for u in result.custom_tool_uses] == ["slow_add"]
    # The tool never finished on the dead worker; it ran to completion once, on the second.
    assert not (marks / f"tool-done-{first.pid}").exists()
    assert (marks / f"tool-done-{second.pid}").exists()
    # On the wire: two model calls, and the tool use answered once.
    assert len(emu.received) == 2
    assert _tool_answers(emu.received[0]) == []
    [use] = result.custom_tool_uses
    assert _tool_answers(emu.received[1]) == [use.id]
    assert result.transcript is not None
    assert [m.get("tool_call_id") for m in result.transcript if m.get("role") == "tool"] == [use.id]


async def test_worker_killed_during_a_host_turn(
    temporal_address: str, workers: Callable[..., Workers], tmp_path: Path
) -> None:
    client = await Client.connect(temporal_address)
    queue = f"kill-turn-{uuid.uuid4().hex[:8]}"
    marks = tmp_path / "marks"
    (marks).mkdir(exist_ok=True)
    (marks / "release").write_text("1")  # the tool does not wait in this test
    # The first model call is held (the worker dies while waiting for it); the retry on
    # the second worker is answered at once.
    with ChatEmulator(faults=ChatFaults(slow=1, delay=30.0)) as emu:
        pool = workers(emu.base_url, emu.api_key, queue)
        first = pool.start()
        run = asyncio.create_task(
            mlt.run(
                client,
                provider="local",
                agent="calc",
                prompt="add",
                task_queue=queue,
                heartbeat_timeout=2.0,
                store=DirStore(tmp_path / "store"),
            )
        )
        await _until(lambda: len(emu.received) == 1, "the first model call")
        first.send_signal(signal.SIGKILL)
        first.wait()
        pool.start()
        result = await asyncio.wait_for(run, WAIT_BOUND)
    assert result.terminal == ml.Terminal.END_TURN
    assert result.turns == 2
    [use] = result.custom_tool_uses
    # The lost call and its retry sent the same conversation; then one answer per tool use.
    assert len(emu.received) == 3
    assert emu.received[0]["messages"] == emu.received[1]["messages"]
    assert _tool_answers(emu.received[2]) == [use.id]
