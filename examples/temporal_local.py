"""A durable session on Temporal, offline: a real Temporal dev server, the Local host
against the chat emulator, one worker, and an approval a person gives later.

Run: ``python examples/temporal_local.py`` (needs ``managedloop[temporal]``). In production
the worker runs on your machines (``await worker.run()``), ``start`` / ``decide`` /
``result`` run wherever you like — a web request, a cron job — all by workflow id.
"""

from __future__ import annotations

import asyncio
import os
import sys

from temporalio.client import Client

import managedloop as ml
from managedloop.contrib import temporal as mlt
from managedloop.contrib.temporal.testing import dev_server
from managedloop.providers import Local
from managedloop.stores import MemoryStore
from managedloop.testing import ChatEmulator


@ml.tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


AGENT = ml.AgentSpec(name="support", system_prompt="Help.", tools=[refund], model="m")


async def main(address: str, emu: ChatEmulator) -> None:
    client = await Client.connect(address)
    store = MemoryStore()  # one worker here; several share a SQLiteStore or RedisStore

    def local() -> Local:  # built on the worker: credentials never enter Temporal
        return Local(model="m", base_url=emu.base_url, api_key=emu.api_key)

    async with mlt.worker(
        client,
        task_queue="agents",
        providers={"local": local},
        agents={"support": AGENT},
        store=store,
    ):
        wid = await mlt.start(
            client, provider="local", agent="support", prompt="Refund order 42", task_queue="agents"
        )
        # The session waits durably; poll what it waits for (Temporal, not a local event),
        # a bounded number of times.
        for _ in range(600):
            if held := await mlt.pending(client, wid):
                break
            await asyncio.sleep(0.05)
        else:
            raise SystemExit("the session did not ask for a decision within 30 s")
        print("waiting for:", [r.tool_use.name for r in held])
        await mlt.decide(client, wid, {held[0].tool_use.id or "": ml.Approve()})
        result = await mlt.result(client, wid, store=store)
    print("terminal:", result.terminal.value)
    print("tools:", [u.name for u in result.custom_tool_uses])
    answered = [m["content"] for m in (result.transcript or []) if m["role"] == "tool"]
    print("answered:", answered)


if __name__ == "__main__":
    with dev_server() as address, ChatEmulator() as emulator:
        asyncio.run(main(address, emulator))
    # The Temporal client's Rust threads can crash CPython's teardown of a short-lived
    # process (temporalio/sdk-python#300): everything is done and closed, so skip it.
    sys.stdout.flush()
    os._exit(0)
