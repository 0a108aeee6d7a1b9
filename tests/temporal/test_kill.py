"""A durable session survives a SIGKILLed worker on every host: it finishes on a second
worker, and each tool use is answered exactly once on the wire (the emulators' request
logs), once with the kill during a tool call and once during a host turn.

Workers are separate processes (``worker_app.py``) sharing a store directory; the
emulators run in the test process. Every wait is for an observable event (a marker file,
a request or an event at the emulator) under a generous bound, never a timed margin. The
heartbeat timeout is short, so a dead worker's activity is retried soon.

What "on the wire" means per host: Local — the chat requests (the lost request and its
retry carry the same conversation; each tool result appears once per request);
Claude — the events POSTed to the session (one prompt, one result per tool use, even when
the dead worker had sent them); AgentCore — the ``toolResult`` blocks of the invokes.
AgentCore keeps no readable history, so a turn lost mid-invoke is invoked again with the
same input: for a kickoff that is a second prompt (checked here, and documented), for a
result turn the service refuses the duplicate answer.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest
from temporalio.client import Client

import managedloop as ml
from host_models import model_for
from managedloop.contrib import temporal as mlt
from managedloop.providers import ClaudeManagedAgents, Local
from managedloop.stores import FileStore, MemoryStore
from managedloop.testing import (
    AgentCoreEmulator,
    AgentCoreFaults,
    ChatEmulator,
    ChatFaults,
    ClaudeEmulator,
    ClaudeFaults,
)

from .conftest import poll, task_queue

pytestmark = pytest.mark.anyio

APP = Path(__file__).with_name("worker_app.py")
WAIT_BOUND = 90.0
HEARTBEAT_TIMEOUT = 4.0
"""How soon a dead worker's activity is retried. A busy machine may also miss a live
worker's heartbeat and retry it early: harmless, as every check below holds for any
number of retries (only the test gets slower)."""


@ml.tool
def slow_add(a: int, b: int) -> str:
    """Add two integers, slowly: waits until the test releases it."""
    raise AssertionError("runs in the worker processes only")


SPEC = ml.AgentSpec(
    name="calc", system_prompt="Use tools.", tools=[slow_add], model=model_for("claude")
)


@dataclass
class Host:
    name: str
    emu: Any
    config: dict[str, Any]
    turn_started: Callable[[], bool]
    """True once the first host turn is in flight at the emulator."""
    after_kill: Callable[[], None]
    answers: Callable[[str | None], list[str]]
    """Every tool-use id answered on the wire in a session, in order (repeats included)."""
    prompts: Callable[[str | None], list[str]]


def _local_answers(emu: ChatEmulator) -> list[str]:
    last = emu.received[-1]["messages"]
    return [m["tool_call_id"] for m in last if m.get("role") == "tool"]


@asynccontextmanager
async def _host(name: str, *, hold_first_turn: bool) -> AsyncIterator[Host]:
    if name == "local":
        faults = ChatFaults(slow=1, delay=30.0) if hold_first_turn else ChatFaults()
        with ChatEmulator(faults=faults) as chat:
            yield Host(
                name,
                chat,
                {"base_url": chat.base_url, "api_key": chat.api_key},
                turn_started=lambda: len(chat.received) >= 1,
                after_kill=lambda: None,
                answers=lambda _sid: _local_answers(chat),
                prompts=lambda _sid: [
                    m["content"]
                    for b in chat.received
                    for m in b["messages"]
                    if m.get("role") == "user"
                ][-1:],
            )
    elif name == "claude":
        with ClaudeEmulator() as claude:
            handle = await _provision(claude)
            if hold_first_turn:
                # Slow the agent's run from the prompt's send on (not the session's
                # creation, which must stay prompt), so the worker dies mid-turn.
                def slow_from_the_prompt(method: str, path: str) -> None:
                    if method == "POST" and path.endswith("/events"):
                        claude.faults.event_delay = 0.5

                claude.faults = ClaudeFaults(before_request=slow_from_the_prompt)

            def undelay() -> None:
                claude.faults = ClaudeFaults()

            def sent(sid: str | None, kind: str) -> list[Any]:
                return [e for e in claude.sent_events(sid) if e["type"] == kind]

            yield Host(
                name,
                claude,
                {"base_url": claude.base_url, "api_key": claude.api_key, "handle": handle},
                # The prompt's echo and at least one event of the agent's run.
                turn_started=lambda: any(
                    len(x.events) >= 2 for x in list(claude.state.sessions.values())
                ),
                after_kill=undelay,
                answers=lambda sid: [
                    e["custom_tool_use_id"] for e in sent(sid, "user.custom_tool_result")
                ],
                prompts=lambda sid: [e["content"][0]["text"] for e in sent(sid, "user.message")],
            )
    else:
        faults = (
            AgentCoreFaults(stall_at=2, stall_seconds=math.inf, times=1)
            if hold_first_turn
            else AgentCoreFaults()
        )
        with AgentCoreEmulator(faults=faults) as core:

            def blocks(sid: str | None, kind: str) -> list[dict[str, Any]]:
                return [
                    c[kind]
                    for r in core.operations("InvokeHarness")
                    if r.session_id == sid
                    for m in r.body["messages"]
                    for c in m["content"]
                    if kind in c
                ]

            yield Host(
                name,
                core,
                {"harness_arn": core.harness_arn, **core.client_kwargs},
                turn_started=lambda: len(core.operations("InvokeHarness")) >= 1,
                after_kill=lambda: None,
                answers=lambda sid: [b["toolUseId"] for b in blocks(sid, "toolResult")],
                prompts=lambda sid: blocks(sid, "text"),
            )


async def _provision(emu: ClaudeEmulator) -> dict[str, Any]:
    async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
        handle = await ml.provision(ClaudeManagedAgents(client=c), SPEC)
    data = handle.to_dict()
    assert isinstance(data, dict)
    return data


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

    def kill(self, proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()


@pytest.fixture
def workers(tmp_path: Path, temporal_address: str) -> Iterator[Callable[[Host, str], Workers]]:
    made: list[Workers] = []
    (tmp_path / "marks").mkdir()

    def make(host: Host, queue: str) -> Workers:
        env = {
            **os.environ,
            "AWS_EC2_METADATA_DISABLED": "true",
            "ML_TEMPORAL": temporal_address,
            "ML_QUEUE": queue,
            "ML_HOST": host.name,
            "ML_HOST_CONFIG": json.dumps(host.config),
            "ML_STORE": str(tmp_path / "store.json"),
            "ML_MARKS": str(tmp_path / "marks"),
        }
        w = Workers(env)
        made.append(w)
        return w

    yield make
    for w in made:
        w.stop_all()


async def _until(check: Callable[[], bool], what: str) -> None:
    async def look() -> bool:
        return check()

    await poll(look, what)


def _start(
    client: Client, queue: str, tmp_path: Path, *, shared_store: bool = True
) -> asyncio.Task[ml.SessionResult]:
    return asyncio.create_task(
        mlt.run(
            client,
            provider="host",
            agent="calc",
            prompt="add",
            task_queue=queue,
            heartbeat_timeout=2.0,
            store=FileStore(tmp_path / "store.json") if shared_store else None,
        )
    )


HOSTS = ["local", "claude", "agentcore"]


@pytest.mark.parametrize("host_name", HOSTS)
async def test_worker_killed_during_a_tool_call(
    host_name: str,
    client: Client,
    workers: Callable[[Host, str], Workers],
    tmp_path: Path,
) -> None:
    queue = task_queue(f"kill-tool-{host_name}")
    marks = tmp_path / "marks"
    async with _host(host_name, hold_first_turn=False) as host:
        pool = workers(host, queue)
        first = pool.start()
        run = _start(client, queue, tmp_path)
        await _until((marks / f"tool-started-{first.pid}").exists, "the tool to start")
        pool.kill(first)
        (marks / "release").write_text("1")
        second = pool.start()
        result = await asyncio.wait_for(run, WAIT_BOUND)
        answers, prompts = host.answers(result.session_id), host.prompts(result.session_id)
    assert result.terminal == ml.Terminal.END_TURN, result
    [use] = result.custom_tool_uses
    assert use.name == "slow_add"
    # The tool never finished on the dead worker; it ran to completion on the second.
    assert not (marks / f"tool-done-{first.pid}").exists()
    assert (marks / f"tool-done-{second.pid}").exists()
    assert answers == [use.id]
    assert prompts == ["add"]


@pytest.mark.parametrize("host_name", HOSTS)
async def test_worker_killed_during_a_host_turn(
    host_name: str,
    client: Client,
    workers: Callable[[Host, str], Workers],
    tmp_path: Path,
) -> None:
    queue = task_queue(f"kill-turn-{host_name}")
    (tmp_path / "marks" / "release").write_text("1")  # the tool does not wait here
    async with _host(host_name, hold_first_turn=True) as host:
        pool = workers(host, queue)
        first = pool.start()
        run = _start(client, queue, tmp_path)
        await _until(host.turn_started, "the first host turn")
        pool.kill(first)
        host.after_kill()
        pool.start()
        result = await asyncio.wait_for(run, WAIT_BOUND)
        answers, prompts = host.answers(result.session_id), host.prompts(result.session_id)
    assert result.terminal == ml.Terminal.END_TURN, result
    [use] = result.custom_tool_uses
    assert answers == [use.id]
    if host_name == "agentcore":
        assert prompts == ["add", "add"]  # no history to read: the lost invoke is redone
    else:
        assert prompts == ["add"]
    if host_name == "local":
        lost, retried = host.emu.received[0], host.emu.received[1]
        assert lost["messages"] == retried["messages"]


async def test_default_workers_share_nothing_and_survive_a_kill(
    client: Client,
    workers: Callable[[Host, str], Workers],
    tmp_path: Path,
) -> None:
    """Two workers in the default configuration (no ``store=``: nothing shared between
    them but Temporal) on the host whose state lives on the worker side (Local's
    transcript): the first is SIGKILLed mid-tool, the second finishes the session from
    what Temporal holds, and the result carries the whole transcript."""
    queue = task_queue("kill-default")
    marks = tmp_path / "marks"
    async with _host("local", hold_first_turn=False) as host:
        pool = workers(host, queue)
        pool.env["ML_STORE"] = ""
        first = pool.start()
        second = pool.start()  # both poll the queue: either may take any task
        run = _start(client, queue, tmp_path, shared_store=False)
        started = [first, second]
        await _until(
            lambda: any((marks / f"tool-started-{p.pid}").exists() for p in started),
            "the tool to start",
        )
        [victim] = [p for p in started if (marks / f"tool-started-{p.pid}").exists()]
        [survivor] = [p for p in started if p is not victim]
        pool.kill(victim)
        (marks / "release").write_text("1")
        result = await asyncio.wait_for(run, WAIT_BOUND)
        answers = host.answers(result.session_id)
    assert result.terminal == ml.Terminal.END_TURN, result
    [use] = result.custom_tool_uses
    assert not (marks / f"tool-done-{victim.pid}").exists()
    assert (marks / f"tool-done-{survivor.pid}").exists()
    assert answers == [use.id]
    assert result.transcript is not None
    roles = [m["role"] for m in result.transcript]
    assert roles.count("tool") == 1, roles
    assert roles[0] in {"system", "user"}, roles
    assert not list(tmp_path.glob("store.json*")), "the default configuration wrote a store"


class _OtherMachinesStore(MemoryStore):
    """What a worker sees of a store it does not share with the worker that wrote: its
    own writes go elsewhere, so every transcript key is missing."""

    def put(self, key: str, value: Any) -> None:
        pass


async def test_a_failed_durable_session_names_its_cause(client: Client) -> None:
    """Workers that do not share their store cannot find a transcript: the caller sees
    that cause by name, not a bare "Workflow execution failed"."""
    queue = task_queue("cause")
    with ChatEmulator() as chat:

        def local() -> Local:
            return Local(model="m", base_url=chat.base_url, api_key=chat.api_key)

        async with mlt.worker(
            client,
            task_queue=queue,
            providers={"host": local},
            agents={"calc": SPEC},
            store=_OtherMachinesStore(),
        ):
            with pytest.raises(ml.ProviderError) as caught:
                await asyncio.wait_for(
                    mlt.run(client, provider="host", agent="calc", prompt="add", task_queue=queue),
                    WAIT_BOUND,
                )
    assert caught.value.code == "durable_session_failed"
    assert "is not in this worker's store" in str(caught.value)
    assert caught.value.context["cause_type"] == "TranscriptNotFound"
    assert not chat.received, "no chat request was sent without its transcript"
