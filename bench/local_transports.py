"""Local's transport seam (issue 23): what the seam costs each transport, per request, and
the memory per session at 10,000 concurrent sessions on the default transport.

(t1) The default transport: the 21-request conversation of ``bench.local`` (a), made by
     Local's chat function (``OpenAIChat`` over ``HttpTransport``: the seam, the request
     built once per call, the response folded) versus a bare loop on the same pool
     (``_wire.Pool.request`` with a head written by hand, ``json.dumps`` / ``json.loads``).
     Target: <= 1.05.
(t2) The aiohttp transport: the same conversation by the chat function over
     ``AiohttpTransport`` versus a bare aiohttp loop (one ``ClientSession``, same pool
     settings). Target: <= 1.10.
(t3) 10,000 concurrent sessions x 3 requests (``bench._concurrent``): ``managedloop`` (the
     default transport) next to ``wire`` (a bare loop on its pool) and ``raw`` (asyncio
     streams): wall and CPU time, KiB and gc-tracked objects per session, each as a ratio
     to ``raw`` from the same run.

Runs interleave (a run of each loop, then the next round); medians are reported, with the
load average: on a shared machine absolute figures move, ratios far less.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable

import aiohttp

from bench._server import serve
from bench.local import (
    SESSIONS_C_LARGE,
    TOOL_CALLS,
    bare_http_run,
    bare_wire_run,
    bench_c,
    chat_function_run,
)
from managedloop.config import Secret
from managedloop.providers.local import AiohttpTransport, HttpTransport
from managedloop.providers.local._http import ClientPool, OpenAIChat
from managedloop.providers.local._wire import Pool

RUNS = 40  # interleaved runs per loop: a stable median in ~10 s


async def _interleave(loops: dict[str, Callable[[], Awaitable[int]]]) -> dict[str, float]:
    for fn in loops.values():  # warm every path (connections, imports, caches)
        for _ in range(3):
            await fn()
    wall: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(RUNS):
        for name, fn in loops.items():
            start = time.perf_counter()
            n = await fn()
            wall[name].append((time.perf_counter() - start) / n)
            assert n == TOOL_CALLS + 1, (name, n)
    return {name: statistics.median(v) * 1e6 for name, v in wall.items()}


async def bench_seam() -> dict[str, float]:
    with serve(TOOL_CALLS) as (base_url, key):
        url = base_url + "/chat/completions"
        default = HttpTransport(trust_env=False)
        via_aiohttp = AiohttpTransport(trust_env=False)
        ours = OpenAIChat(base_url, Secret(key), ClientPool(default))
        ours_aiohttp = OpenAIChat(base_url, Secret(key), ClientPool(via_aiohttp))
        pool = Pool(read_timeout=600, connect_timeout=600)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            try:
                out = await _interleave(
                    {
                        "bare_wire": lambda: bare_wire_run(pool, url, key),
                        "default": lambda: chat_function_run(ours),
                        "bare_aiohttp": lambda: bare_http_run(session, url, key),
                        "aiohttp": lambda: chat_function_run(ours_aiohttp),
                    }
                )
            finally:
                await pool.aclose()
                await default.aclose()
                await via_aiohttp.aclose()
    out["default_ratio"] = out["default"] / out["bare_wire"]
    out["aiohttp_ratio"] = out["aiohttp"] / out["bare_aiohttp"]
    return out


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min: {five:.1f}) on {os.cpu_count()} cores"


def main() -> None:
    t = asyncio.run(bench_seam())
    print(
        f"(t1) default transport, per request ({TOOL_CALLS + 1} requests/run): bare loop on its "
        f"pool {t['bare_wire']:.0f} µs, Local's chat function over HttpTransport "
        f"{t['default']:.0f} µs, ratio {t['default_ratio']:.3f} (target <= 1.05)\n"
        f"(t2) aiohttp transport: bare aiohttp loop {t['bare_aiohttp']:.0f} µs, Local's chat "
        f"function over AiohttpTransport {t['aiohttp']:.0f} µs, ratio {t['aiohttp_ratio']:.3f} "
        f"(target <= 1.10)\n    ({_load()})"
    )
    if os.environ.get("BENCH_SKIP_LARGE"):
        print("(t3) skipped (BENCH_SKIP_LARGE)")
        return
    rows = bench_c(["raw", "wire", "managedloop"], 0.0, SESSIONS_C_LARGE)
    print(f"(t3) {SESSIONS_C_LARGE} concurrent sessions x 3 requests, model latency 0 s:")
    for row in rows:
        print(
            f"   {row['client']:<12} wall {row['wall_s']:6.2f} s  cpu {row['cpu_s']:6.2f} s  "
            f"{row['kib_per_session']:5.1f} KiB/session  {row['tracked_per_session']:5.1f} "
            f"tracked/session  failed {row['failed']}"
        )
    by = {row["client"]: row for row in rows}
    raw = by.get("raw")
    for name in ("wire", "managedloop"):
        if raw is not None and name in by:
            row = by[name]
            print(
                f"    {name} / raw (same run): wall {row['wall_s'] / raw['wall_s']:.2f}x, CPU "
                f"{row['cpu_s'] / raw['cpu_s']:.2f}x, KiB/session "
                f"{row['kib_per_session'] / raw['kib_per_session']:.2f}x"
            )
    print(f"    ({_load()})")


if __name__ == "__main__":
    main()
