"""Durable sessions: N sessions over W worker processes on a real Temporal dev server,
against the same N sessions run in one process without Temporal, in the same run.

``python -m bench temporal`` (``BENCH_TEMPORAL_SESSIONS``, default 1,000;
``BENCH_TEMPORAL_WORKERS``, default 4). Each session: a prompt, one tool call, an answer
(2 model calls, 1 tool activity) against the chat emulator in its own process
(``bench._server``). Prints wall time, sessions per second and the overhead ratio. The
Temporal server, the 4 workers, the emulator and this client share the machine's cores,
so on 2 cores the figure is a floor on what a cluster gives, not a cluster's figure.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.client import Client

import managedloop as ml
from bench._server import serve
from managedloop.contrib import temporal as mlt
from managedloop.contrib.temporal.testing import dev_server
from managedloop.providers import Local

SESSIONS = int(os.environ.get("BENCH_TEMPORAL_SESSIONS", "1000"))
WORKERS = int(os.environ.get("BENCH_TEMPORAL_WORKERS", "4"))
START_CONCURRENCY = 200  # workflow starts in flight at once (a client's sensible bound)


@ml.tool(inline=True)
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


AGENT = ml.AgentSpec(name="weather", system_prompt="Use tools.", tools=[get_weather], model="m")


async def _in_process(base_url: str, key: str) -> float:
    provider = Local(model="m", base_url=base_url, api_key=key)
    async with provider:
        start = time.perf_counter()
        results = await asyncio.gather(
            *(ml.run(provider, agent=AGENT, prompt="Weather?") for _ in range(SESSIONS))
        )
        wall = time.perf_counter() - start
    assert all(r.terminal == ml.Terminal.END_TURN for r in results)
    return wall


async def _durable(address: str, base_url: str, key: str, tmp: Path) -> tuple[float, int]:
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    store = str(tmp / "store.sqlite3")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench._temporal_worker", address, queue, base_url, key, store],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(WORKERS)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready"
        client = await Client.connect(address)
        gate = asyncio.Semaphore(START_CONCURRENCY)

        async def one() -> ml.SessionResult:
            async with gate:
                wid = await mlt.start(
                    client, provider="local", agent="weather", prompt="Weather?", task_queue=queue
                )
            return await mlt.result(client, wid)

        start = time.perf_counter()
        results = await asyncio.gather(*(one() for _ in range(SESSIONS)))
        wall = time.perf_counter() - start
        failed = sum(r.terminal != ml.Terminal.END_TURN for r in results)
        return wall, failed
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, dev_server() as address, serve(1) as (url, key):
        plain = asyncio.run(_in_process(url, key))
        durable, failed = asyncio.run(_durable(address, url, key, Path(tmp)))
    load = os.getloadavg()[0]
    print(f"{SESSIONS} sessions (prompt, 1 tool call, answer); load {load:.1f} at the end")
    print("| run | wall s | sessions/s | x in-process |")
    print("|---|---:|---:|---:|")
    print(f"| one process, no Temporal | {plain:.2f} | {SESSIONS / plain:.0f} | 1.00 |")
    print(
        f"| Temporal, {WORKERS} worker processes | {durable:.2f} | {SESSIONS / durable:.0f} "
        f"| {durable / plain:.1f} |"
    )
    print(f"failed sessions: {failed}")


if __name__ == "__main__":
    main()
