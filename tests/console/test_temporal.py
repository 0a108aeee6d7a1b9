"""A durable session's pending decision on the console, in the browser: a real Temporal dev
server, a worker serving the session (its own event loop, in a thread), and the console
reading ``mlt.pending`` and deciding with ``mlt.decide``, exactly once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
import anyio.from_thread
import pytest
from temporalio.client import Client

import managedloop as ml
from managedloop import console
from managedloop.contrib import temporal as mlt
from managedloop.contrib.temporal.testing import dev_server
from managedloop.providers import Local
from managedloop.stores import MemoryStore
from managedloop.testing import ChatEmulator

from .conftest import TOKEN, Served, screenshot

pytestmark = pytest.mark.timeout(240)

RAN: list[str] = []
POLLS = 1800  # x 0.05 s: a bound against a hang, not a timing assumption


@ml.tool(requires_approval=True)
def delete_files(pattern: str) -> str:
    """Delete the files matching a pattern."""
    RAN.append(pattern)
    return f"deleted {pattern}"


RISKY = ml.AgentSpec(name="ops", system_prompt="Use tools.", tools=[delete_files], model="m")


@pytest.fixture(scope="module")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with dev_server(log_path=tmp_path_factory.mktemp("temporal") / "server.log") as address:
        yield address


async def _until_pending(client: Client, wid: str) -> list[ml.ApprovalRequest]:
    for _ in range(POLLS):
        held = await mlt.pending(client, wid)
        if held:
            return held
        await anyio.sleep(0.05)
    raise AssertionError("the durable session never held its call")


def test_a_durable_sessions_decision_is_visible_and_decidable(
    temporal_address: str, serve: Callable[[Any], Served], page: Any, tmp_path: Path
) -> None:
    RAN.clear()
    with ChatEmulator() as emu, anyio.from_thread.start_blocking_portal() as portal:
        client: Client = portal.call(Client.connect, temporal_address)
        worker = mlt.worker(
            client,
            task_queue="console-q",
            providers={
                "local": lambda: Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
            },
            agents={"ops": RISKY},
            store=MemoryStore(),
        )
        with portal.wrap_async_context_manager(worker):

            async def started() -> tuple[str, list[ml.ApprovalRequest]]:
                wid = await mlt.start(
                    client, provider="local", agent="ops", prompt="clean up", task_queue="console-q"
                )
                return wid, await _until_pending(client, wid)

            wid, (held,) = portal.call(started)
            app = console.app(
                MemoryStore(),
                token=TOKEN,
                temporal=lambda: Client.connect(temporal_address),
            )
            served = serve(app)
            page.goto(f"{served.url}/approvals?token={TOKEN}")
            card = page.locator(".card.durable")
            assert card.count() == 1
            assert "delete_files" in card.inner_text()
            assert wid in card.inner_text()
            screenshot(page, "approvals-temporal")
            card.get_by_role("button", name="Approve").click()
            page.wait_for_url("**/approvals")

            async def finished() -> ml.SessionResult:
                return await mlt.result(client, wid)

            result = portal.call(finished)
            # A second decision of the same call (a stale page) is refused and says why.
            csrf = app.state.console.csrf
            status, _, body = served.request(
                "POST",
                f"/temporal/{wid}/{held.id}",
                data=urlencode({"decision": "deny", "csrf": csrf}).encode(),
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
    assert result.terminal is ml.Terminal.END_TURN
    assert [held.tool_use.input["pattern"]] == RAN  # approved, run once
    assert status == 409
    assert "your decision was not applied" in body
