"""A managedloop Temporal worker as its own process, for the kill tests.

Run as ``python worker_app.py``; configured by environment variables (the test sets
them): ``ML_TEMPORAL``, ``ML_QUEUE``, ``ML_HOST`` (``local``, ``claude``, ``agentcore``),
``ML_HOST_CONFIG`` (JSON: what the host's emulator needs — URL and key, the Claude agent
handle, the AgentCore client keywords), ``ML_STORE`` (a file: the workers' shared store;
empty: no store, the default configuration, transcripts inline in Temporal) and
``ML_MARKS`` (a directory the tools write their progress to). Prints ``ready`` once it
polls its queue; runs until killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from temporalio.client import Client

import managedloop as ml
from managedloop.contrib import temporal as mlt
from managedloop.hosts import Provider
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.stores import FileStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for host_models
from host_models import model_for

MARKS = Path(os.environ["ML_MARKS"])
TOOL_WAIT_BOUND = 120.0  # the test releases the tool long before; a bound, not a margin


@ml.tool
def slow_add(a: int, b: int) -> str:
    """Add two integers, slowly: waits until the test releases it."""
    (MARKS / f"tool-started-{os.getpid()}").write_text("1")
    deadline = time.monotonic() + TOOL_WAIT_BOUND
    while not (MARKS / "release").exists():
        if time.monotonic() > deadline:
            raise ml.ToolError("never released")
        time.sleep(0.02)
    (MARKS / f"tool-done-{os.getpid()}").write_text("1")
    return str(a + b)


# The model the worker's host serves (Bedrock refuses a Claude API id).
SPEC = ml.AgentSpec(
    name="calc",
    system_prompt="Use tools.",
    tools=[slow_add],
    model=model_for(os.environ.get("ML_HOST", "local")),
)


def make() -> Provider:
    host = os.environ["ML_HOST"]
    config = json.loads(os.environ["ML_HOST_CONFIG"])
    if host == "local":
        return Local(model="m", base_url=config["base_url"], api_key=config["api_key"])
    if host == "claude":
        return ClaudeManagedAgents(
            base_url=config["base_url"],
            api_key=config["api_key"],
            agent=config["handle"],
            environment=config["handle"],
            reconnect_backoff=0.0,
        )
    return BedrockAgentCore(retry_backoff=0.0, **config)


async def main() -> None:
    client = await Client.connect(os.environ["ML_TEMPORAL"])
    async with mlt.worker(
        client,
        task_queue=os.environ["ML_QUEUE"],
        providers={"host": make},
        agents={"calc": SPEC},
        store=FileStore(os.environ["ML_STORE"]) if os.environ["ML_STORE"] else None,
    ):
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
