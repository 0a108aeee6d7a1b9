"""A managedloop Temporal worker in its own process, for ``bench.temporal``.

``python -m bench._temporal_worker ADDRESS QUEUE BASE_URL KEY STORE`` serves sessions of
the weather agent (Local against the bench chat server) and the baseline's bare workflow
(``bench._temporal_bare``, on queue ``QUEUE-bare``) until its stdin closes; prints
``ready`` once it polls. ``STORE`` is a SQLite file every worker shares.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

import managedloop as ml
from bench._temporal_bare import BareSession
from managedloop.contrib import temporal as mlt
from managedloop.contrib.temporal._activities import SessionActivities
from managedloop.providers import Local
from managedloop.stores import SQLiteStore
from managedloop.tools import Toolset


@ml.tool  # the default: a sync tool runs in a worker thread
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


AGENT = ml.AgentSpec(name="weather", system_prompt="Use tools.", tools=[get_weather], model="m")


async def main(address: str, queue: str, base_url: str, key: str, store: str) -> None:
    client = await Client.connect(address)

    def local() -> Local:
        return Local(model="m", base_url=base_url, api_key=key)

    store_ = SQLiteStore(store)
    bare = SessionActivities(
        providers={"local": local},
        agents={"weather": AGENT},
        store=store_,
        tools=Toolset([get_weather]),
    )
    async with (
        mlt.worker(
            client,
            task_queue=queue,
            providers={"local": local},
            agents={"weather": AGENT},
            store=store_,
            max_concurrent_activities=200,
        ),
        bare.serving(),
        # The baseline (bench._temporal_bare) on its own queue with the same activities,
        # built the way mlt.worker builds them, and the same worker options: workflow and
        # activities on one queue, as for the managedloop sessions (so both get the SDK's
        # eager activity dispatch alike).
        Worker(
            client,
            task_queue=f"{queue}-bare",
            workflows=[BareSession],
            activities=bare.all(),
            max_concurrent_activities=200,
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules(
                    "managedloop", "bench"
                )
            ),
        ),
    ):
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
    os._exit(0)  # skip a teardown the Temporal client can crash (temporalio/sdk-python#300)
