"""The console's session list over 10,000 recorded sessions (issue 28).

The record of 10,000 sessions (summaries as :class:`~managedloop.SessionRecord` writes
them: a few hosts and agents, every status) in a ``MemoryStore`` and in an
``SQLiteStore`` on disk. Each page is served by the console's ASGI application, called
in process (no socket: server time only, from the request to the last body byte),
authenticated like a browser: the first page, a page deep in the list, a search and a
status filter. Medians of repeated requests, against the floor measured in the same run:
``store.scan`` of the summaries alone, which a cold list page pays (the list is sorted by
last activity and filtered on the server). "cold" reads the store on every page
(``list_ttl=0``); "warm" is the default, where pages within ``list_ttl`` (2 s) reuse the
read. Wall and CPU time (process CPU, the worker thread's scan included): on a loaded
shared machine trust the CPU column. Target: < 300 ms per page.

``python -m bench console``.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from managedloop import console
from managedloop.session.record import SessionRecord
from managedloop.stores import MemoryStore, SQLiteStore, Store

SESSIONS = 10_000
REPEAT = 15
TARGET_MS = 300.0
TOKEN = "bench-token-0123456789abcdef"
HOSTS = ("local", "claude", "agentcore")
STATUSES = ("done", "done", "done", "parked", "failed", "running")


def fill(store: Store) -> None:
    for i in range(SESSIONS):
        sid = f"sesn_{i:06d}"
        store.put(
            SessionRecord.session_key(sid),
            {
                "session_id": sid,
                "host": HOSTS[i % 3],
                "agent": f"agent-{i % 40}",
                "agent_id": f"agent_{i % 40:04d}",
                "model": "claude-sonnet-4-6",
                "status": STATUSES[i % len(STATUSES)],
                "terminal": "end_turn",
                "reason": None,
                "stop_reason": "end_turn",
                "started_at": 1_700_000_000.0 + i,
                "updated_at": 1_700_000_000.0 + i * 1.5,
                "entries": 12,
                "requests": 1,
                "turns": 3,
                "usage": {"input_tokens": 1200 + i, "output_tokens": 300, "cost_usd": 0.0042},
                "pending": [],
                "error": None,
            },
        )


async def get(app: Any, path: str) -> int:
    """One request through the ASGI app, as a browser with the cookie sends it."""
    target, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": target,
        "raw_path": target.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"cookie", f"ml_console={TOKEN}".encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    status = 0
    size = 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, size
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            size += len(message.get("body", b""))

    await app(scope, receive, send)
    assert status == 200, (path, status)
    assert size > 10_000, (path, size)  # a real page, not an error
    return size


def median_ms(fn: Callable[[], Any]) -> tuple[float, float]:
    """Median wall and CPU milliseconds of ``fn()``."""
    wall, cpu = [], []
    for _ in range(REPEAT):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def suite(name: str, store: Store) -> None:
    fill(store)
    loop = asyncio.new_event_loop()
    try:
        floor, floor_cpu = median_ms(lambda: store.scan("ml:record:session:"))
        print(
            f"{name}: {SESSIONS} sessions; floor (scan of the summaries) "
            f"{floor:6.1f} ms wall, {floor_cpu:6.1f} ms CPU"
        )
        for mode, ttl in (("cold", 0.0), ("warm", 2.0)):
            app = console.app(store, token=TOKEN, list_ttl=ttl)
            for label, path in (
                ("first page", "/"),
                ("page 100", "/?page=100"),
                ("search", "/?q=agent-7"),
                ("status filter", "/?status=parked&page=3"),
            ):
                ms, cpu = median_ms(lambda p=path, a=app: loop.run_until_complete(get(a, p)))
                verdict = "ok" if cpu < TARGET_MS else "OVER"
                print(
                    f"  {mode} {label:<14} {ms:7.1f} ms wall {cpu:7.1f} ms CPU  "
                    f"{cpu / floor_cpu:5.2f}x floor CPU  (target < {TARGET_MS:.0f} ms: {verdict})"
                )
    finally:
        loop.close()
        store.close()


def main() -> None:
    suite("MemoryStore", MemoryStore())
    with tempfile.TemporaryDirectory() as tmp:
        suite("SQLiteStore", SQLiteStore(Path(tmp) / "record.sqlite3"))


if __name__ == "__main__":
    main()
