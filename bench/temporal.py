"""Durable sessions: N sessions over W worker processes on a real Temporal dev server,
against a bare ``temporalio`` workflow running the same activities on the same server and
workers, and against the same N sessions in one process without Temporal, in one run.

``python -m bench temporal`` (``BENCH_TEMPORAL_SESSIONS``, default 1,000;
``BENCH_TEMPORAL_WORKERS``, default 4). Each session: a prompt, one tool call, an answer
(2 model calls, 1 tool activity) against the chat emulator in its own process
(``bench._server``). The W worker processes (``bench._temporal_worker``) serve both the
managedloop session workflow and the baseline, ``bench._temporal_bare.BareSession``: the
same four activities (open, turn, tool, turn) with the same arguments and timeouts, and
no workflow logic of ours. The baseline runs before and after the managedloop run (its
figure is the mean of the two, so a drift in the machine's speed or the server's growing
history hits both sides alike); the headline is managedloop over that baseline (target
<= 1.3). Each timed phase fails after ``PHASE_TIMEOUT`` seconds rather than hang. The
Temporal server, the workers, the emulator and this client share the
machine's cores, so on 2 cores the figure is a floor on what a cluster gives, not a
cluster's figure.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client

import managedloop as ml
from bench._server import serve
from bench._temporal_bare import BareSession
from managedloop.contrib import temporal as mlt
from managedloop.contrib.temporal.testing import dev_server
from managedloop.providers import Local

SESSIONS = int(os.environ.get("BENCH_TEMPORAL_SESSIONS", "1000"))
WORKERS = int(os.environ.get("BENCH_TEMPORAL_WORKERS", "4"))
START_CONCURRENCY = 200  # workflow starts in flight at once (a client's sensible bound)
PHASE_TIMEOUT = 1200.0  # seconds per timed phase: a stuck run fails instead of hanging


@ml.tool  # the default: a sync tool runs in a worker thread
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


async def _durable(
    address: str, base_url: str, key: str, tmp: Path
) -> tuple[dict[str, float], int, int]:
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

        async def ours() -> bool:
            async with gate:
                wid = await mlt.start(
                    client, provider="local", agent="weather", prompt="Weather?", task_queue=queue
                )
            return (await mlt.result(client, wid)).terminal == ml.Terminal.END_TURN

        async def bare() -> bool:
            async with gate:
                handle = await client.start_workflow(
                    BareSession.run,
                    args=[f"{queue}-bare", "Weather?"],
                    id=f"bare-{uuid.uuid4().hex}",
                    task_queue=f"{queue}-bare",
                )
            return await handle.result() == ml.Terminal.END_TURN.value

        async def timed(one: Callable[[], Awaitable[bool]], n: int = SESSIONS) -> tuple[float, int]:
            start = time.perf_counter()
            ok = await asyncio.wait_for(
                asyncio.gather(*(one() for _ in range(n))), timeout=PHASE_TIMEOUT
            )
            return time.perf_counter() - start, ok.count(False)

        # untimed: every worker's first workflows of each kind (sandbox, imports, sticky
        # caches, connections to the emulator and the store)
        await timed(bare, 4 * WORKERS)
        await timed(ours, 4 * WORKERS)
        bare_before, failed_bare = await timed(bare)
        wall, failed = await timed(ours)
        bare_after, failed_after = await timed(bare)
        walls = {"managedloop": wall, "bare_before": bare_before, "bare_after": bare_after}
        return walls, failed, failed_bare + failed_after
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
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, dev_server() as address, serve(1) as (url, key):
        plain = asyncio.run(_in_process(url, key))
        walls, failed, failed_bare = asyncio.run(_durable(address, url, key, Path(tmp)))
    load = os.getloadavg()[0]
    bare = (walls["bare_before"] + walls["bare_after"]) / 2
    ours = walls["managedloop"]
    print(
        f"{SESSIONS} sessions (prompt, 1 tool call, answer) over {WORKERS} worker processes; "
        f"load average {load_start:.1f} at the start, {load:.1f} at the end"
    )
    print("| run | wall s | sessions/s | x bare temporalio |")
    print("|---|---:|---:|---:|")
    for label, wall in (
        ("bare temporalio workflow, same activities (before)", walls["bare_before"]),
        ("managedloop durable session", ours),
        ("bare temporalio workflow, same activities (after)", walls["bare_after"]),
        ("one process, no Temporal", plain),
    ):
        print(f"| {label} | {wall:.2f} | {SESSIONS / wall:.0f} | {wall / bare:.2f} |")
    print(
        f"managedloop / bare temporalio (mean of before and after, {bare:.2f} s): "
        f"{ours / bare:.2f} (target <= 1.30: {'met' if ours / bare <= 1.3 else 'NOT met'})"
    )
    print(f"failed sessions: managedloop {failed}, bare {failed_bare}")


if __name__ == "__main__":
    main()
