"""A real Temporal dev server for the durable-session tests, started by the tests
(:func:`managedloop.contrib.temporal.testing.dev_server`: offline, 127.0.0.1, free port),
and the setup the tests share: task-queue names, the workers' provider factories, and one
bounded poll for what the tests wait on (a held call, a file a worker writes)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import anthropic
import anyio
import pytest
from temporalio.client import Client

import managedloop as ml
from managedloop.contrib import temporal as mlt
from managedloop.contrib.temporal.testing import dev_server
from managedloop.providers import ClaudeManagedAgents, Local
from managedloop.testing import ChatEmulator, ClaudeEmulator

T = TypeVar("T")

POLLS = 1800
"""How often :func:`poll` looks before it gives up: 1,800 x 0.05 s is 90 s between looks
at the most, a bound against a hang (the test fails) and not a timing assumption."""
INTERVAL = 0.05  # seconds between looks: Temporal's memo and the workers' files are cheap


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dev_server(log_path=tmp_path_factory.mktemp("temporal") / "server.log") as address:
        yield address


@pytest.fixture
async def client(temporal_address: str) -> Client:
    """A client of the dev server, of this test's own."""
    return await Client.connect(temporal_address)


def task_queue(prefix: str = "q") -> str:
    """A task queue of the test's own, so no other test's worker takes its tasks."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def local_on(emu: ChatEmulator) -> Callable[[], Local]:
    """A worker's provider factory: the Local host on ``emu``."""

    def make() -> Local:
        return Local(model="m", base_url=emu.base_url, api_key=emu.api_key)

    return make


async def claude_on(emu: ClaudeEmulator, spec: ml.AgentSpec) -> Callable[[], ClaudeManagedAgents]:
    """Provision ``spec`` on ``emu``; a worker's provider factory bound to that handle."""
    async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
        handle = await ml.provision(ClaudeManagedAgents(client=c), spec)

    def make() -> ClaudeManagedAgents:
        return ClaudeManagedAgents(
            base_url=emu.base_url,
            api_key=emu.api_key,
            agent=handle,
            environment=handle,
            reconnect_backoff=0.0,
        )

    return make


async def poll(
    look: Callable[[], Awaitable[T]],
    what: str,
    *,
    polls: int = POLLS,
    sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
) -> T:
    """``await look()`` until it returns something true, and return that; at most
    ``polls`` looks, ``sleep(INTERVAL)`` between them, then ``AssertionError``."""
    for _ in range(polls):
        if found := await look():
            return found
        await sleep(INTERVAL)
    raise AssertionError(f"gave up waiting for {what} after {polls} polls")


async def until_pending(client: Client, workflow_id: str) -> list[ml.ApprovalRequest]:
    """The calls ``workflow_id`` holds for a decision, once it holds one (:func:`poll`)."""
    return await poll(lambda: mlt.pending(client, workflow_id), "a held call")
