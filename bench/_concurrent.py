"""One measurement of (c) in a fresh process: N concurrent sessions x 3 requests.

``python -m bench._concurrent CLIENT BASE_URL KEY N`` prints one JSON line:
``{"client", "sessions", "wall_s", "cpu_s", "kib_per_session", "failed", "errors",
"gc_full", "gc_full_s", "gc_young_s", "tracked_per_session"}``. Memory is the growth of
peak RSS over the baseline taken after imports, a warm-up session and a collection,
divided by N; ``cpu_s`` is this process's CPU time over the run (less moved by other load
than the wall time); the ``gc_*`` figures are the collector's full (generation 2)
collections and the seconds spent in them and in the young ones (``gc.callbacks``);
``tracked_per_session`` is the most gc-tracked objects a full collection left alive, over
the baseline, per session (what every full collection walks; load does not move it;
0 when no full collection ran).

Clients: ``managedloop`` (Local, default pool, a default sync tool: it runs in a worker
thread), ``managedloop-inline`` (the same with an ``inline=True`` tool: no thread hop),
``wire`` (a bare loop on Local's transport, ``providers/local/_wire.py``), ``aiohttp`` /
``httpx`` (a bare loop with the library's default pool), each optionally ``:N`` for a pool
of N connections (0: unbounded; not httpx), and ``raw`` (the floor: the same requests over
asyncio streams, one keep-alive connection per session, no HTTP library).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from typing import Any

TOOL_TURNS = 2  # two tool calls then an answer: 3 requests per session


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def get_weather(city: str) -> str:
    return f"Sunny in {city}"


async def bare_session(post: Any, model: str) -> None:
    """A hand-written loop: the same requests Local makes, nothing else."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather?"}]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    while True:
        body = json.dumps({"model": model, "messages": messages, "tools": tools}).encode()
        data = json.loads(await post(body))
        message = data["choices"][0]["message"]
        messages.append(message)
        calls = message.get("tool_calls")
        if not calls:
            return
        for c in calls:
            args = json.loads(c["function"]["arguments"])
            messages.append(
                {"role": "tool", "tool_call_id": c["id"], "content": get_weather(**args)}
            )


async def raw_session(url: str, headers: dict[str, str]) -> None:
    """The floor: the same requests over one keep-alive connection with asyncio streams and
    a minimal HTTP/1.1 exchange (no HTTP library, no pool)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    head = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    ).encode()

    async def post(body: bytes) -> bytes:
        writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        status = await reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(status.decode(errors="replace").strip())
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return await reader.readexactly(length)

    try:
        await bare_session(post, "m")
    finally:
        writer.close()
        await writer.wait_closed()


async def run(client: str, base_url: str, key: str, n: int) -> dict[str, Any]:
    url = base_url + "/chat/completions"
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    failed = 0

    name, _, size = client.partition(":")
    if name in ("managedloop", "managedloop-inline"):
        import managedloop as ml
        from managedloop.providers import Local

        # the default: a sync tool runs in a worker thread; -inline runs it on the loop
        tool = ml.tool(inline=name.endswith("-inline"))(get_weather)
        agent = ml.AgentSpec(tools=[tool])
        pool = {"max_connections": int(size)} if size else {}
        async with Local(model="m", base_url=base_url, api_key=key, **pool) as provider:

            async def one() -> None:
                await ml.run(provider, agent=agent, prompt="Weather?")

            return await _measure(client, n, one)

    if name == "raw":
        return await _measure(client, n, lambda: raw_session(url, headers))

    if name == "wire":
        from urllib.parse import urlsplit

        from managedloop.providers.local._wire import Pool

        parts = urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        key = ("http", parts.hostname, parts.port)
        head = (
            f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        ).encode()
        pool = Pool(read_timeout=600, connect_timeout=600, limit=int(size) if size else 0)

        async def wpost(body: bytes) -> bytes:
            resp = await pool.request(key, head + b"Content-Length: %d\r\n\r\n" % len(body), body)
            try:
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}")
                return await resp.read()
            finally:
                resp.release()

        try:
            return await _measure(client, n, lambda: bare_session(wpost, "m"))
        finally:
            await pool.aclose()

    if name == "aiohttp":
        import aiohttp

        limit = int(size) if size else 100  # aiohttp's default pool size
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit)) as s:

            async def post(body: bytes) -> bytes:
                async with s.post(url, data=body, headers=headers) as r:
                    r.raise_for_status()
                    return await r.read()

            return await _measure(client, n, lambda: bare_session(post, "m"))

    import httpx

    limits = (
        httpx.Limits(max_connections=int(size), max_keepalive_connections=int(size))
        if size
        else httpx.Limits()  # httpx's default: 100 connections
    )
    async with httpx.AsyncClient(limits=limits, timeout=120) as hc:

        async def hpost(body: bytes) -> bytes:
            r = await hc.post(url, content=body, headers=headers)
            r.raise_for_status()
            return r.content

        return await _measure(client, n, lambda: bare_session(hpost, "m"))
    return {"failed": failed}


class _GCStats:
    """Collections and the time spent in them (``gc.callbacks``), by generation."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.tracked = 0  # the most gc-tracked objects a full collection left alive
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        import gc

        if phase == "start":
            self._start = time.perf_counter()
        else:
            generation = info["generation"]
            self.count[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._start
            if generation == 2:  # counted after the clock stopped: not in gc_full_s
                self.tracked = max(self.tracked, len(gc.get_objects()))


async def _measure(client: str, n: int, one: Any) -> dict[str, Any]:
    import gc

    await one()  # warm-up: imports, first connection
    gc.collect()
    tracked_base = len(gc.get_objects())
    stats = _GCStats()
    gc.callbacks.append(stats)
    base = _rss_kib()
    peak = base
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss_kib())
            await asyncio.sleep(0.01)

    sampler = asyncio.create_task(sample())
    start, cpu_start = time.perf_counter(), time.process_time()
    results = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    gc.callbacks.remove(stats)
    peak = max(peak, _rss_kib())
    done.set()
    await sampler
    errors = [r for r in results if isinstance(r, BaseException)]
    failed = len(errors)
    kinds: dict[str, int] = {}
    for e in errors:
        kind = f"{type(e).__name__}({getattr(e, 'code', '')})"
        kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "client": client,
        "sessions": n,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "kib_per_session": round((peak - base) / n, 1),
        "failed": failed,
        "errors": kinds,
        "gc_full": stats.count[2],
        "gc_full_s": round(stats.seconds[2], 2),
        "gc_young_s": round(stats.seconds[0] + stats.seconds[1], 2),
        # gc-tracked objects per session at the fullest full collection (what each walks)
        "tracked_per_session": round(max(0, stats.tracked - tracked_base) / n, 1),
    }


def _main() -> None:
    client, base_url, key, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    print(json.dumps(asyncio.run(run(client, base_url, key, n))), flush=True)


if __name__ == "__main__":
    _main()
