"""A managedloop Temporal worker in its own process, for ``bench.temporal``.

``python -m bench._temporal_worker ADDRESS QUEUE BASE_URL KEY STORE`` serves sessions of
the weather agent (Local against the bench chat server) until its stdin closes; prints
``ready`` once it polls. ``STORE`` is a SQLite file every worker shares.
"""

from __future__ import annotations

import asyncio
import os
import sys

from temporalio.client import Client

import managedloop as ml
from managedloop.contrib import temporal as mlt
from managedloop.providers import Local
from managedloop.stores import SQLiteStore


@ml.tool(inline=True)
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


AGENT = ml.AgentSpec(name="weather", system_prompt="Use tools.", tools=[get_weather], model="m")


async def main(address: str, queue: str, base_url: str, key: str, store: str) -> None:
    client = await Client.connect(address)

    def local() -> Local:
        return Local(model="m", base_url=base_url, api_key=key)

    async with mlt.worker(
        client,
        task_queue=queue,
        providers={"local": local},
        agents={"weather": AGENT},
        store=SQLiteStore(store),
        max_concurrent_activities=200,
    ):
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
    os._exit(0)  # skip a teardown the Temporal client can crash (temporalio/sdk-python#300)
