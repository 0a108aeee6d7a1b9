"""The store records of deliveries and tool uses: the at-most-once bookkeeping (see the
package docstring)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from managedloop.stores import Store

__all__ = ["PRUNE_INTERVAL", "RETENTION", "STARTED", "STORE_PREFIX", "Ledger"]

STORE_PREFIX = "managedloop:webhooks:"
RETENTION = 7 * 24 * 3600.0
"""Seconds a delivery or tool-use record is kept: longer than a host's retry schedule
(Standard Webhooks senders retry for a day or so), so a late redelivery is still caught."""
PRUNE_INTERVAL = 3600.0  # seconds between two sweeps of the store for expired records
STARTED = "started"
GUARD = threading.Lock()
"""Makes each store read-decide-write atomic within the process (see Ledger)."""


class Ledger:
    """The store records of deliveries and tool uses (see the module docstring). Every
    read-decide-write runs in one worker-thread call under :data:`GUARD`, so it is atomic
    for every receiver in this process, whichever event loop serves it."""

    def __init__(self, store: Store, prefix: str, clock: Callable[[], float]) -> None:
        self.store = store
        self.prefix = prefix
        self.clock = clock

    def delivery_key(self, webhook_id: str) -> str:
        return f"{self.prefix}delivery:{webhook_id}"

    def tool_key(self, session_id: str, tool_use_id: str) -> str:
        return f"{self.prefix}tool:{session_id}:{tool_use_id}"

    async def get(self, key: str) -> dict[str, Any] | None:
        return await anyio.to_thread.run_sync(self.store.get, key)

    async def put(self, key: str, value: Mapping[str, Any]) -> None:
        stamped = {**value, "at": self.clock()}
        await anyio.to_thread.run_sync(self.store.put, key, stamped)

    async def delete(self, key: str) -> None:
        await anyio.to_thread.run_sync(self.store.delete, key)

    async def admit(self, key: str, session_id: str, lease: float) -> bool:
        """Mark a delivery ``running`` unless it is running (within ``lease``) or done."""

        def decide() -> bool:
            now = self.clock()
            with GUARD:
                record = self.store.get(key)
                state = record.get("state") if record is not None else None
                since = record.get("since") if record is not None else None
                if state == "running" and isinstance(since, int | float) and now - since > lease:
                    # A worker that died mid-delivery leaves "running" behind: after the
                    # lease it counts as failed, so the host's retry is not refused forever.
                    state = "failed"
                if state in ("running", "done"):
                    return False
                value = {"state": "running", "session_id": session_id, "since": now, "at": now}
                self.store.put(key, value)
                return True

        return await anyio.to_thread.run_sync(decide)

    async def claim(self, key: str, webhook_id: str) -> bool:
        """Mark a tool use ``started`` if nothing is recorded for it yet."""

        def decide() -> bool:
            with GUARD:
                if self.store.get(key) is not None:
                    return False
                value = {"state": STARTED, "webhook_id": webhook_id, "at": self.clock()}
                self.store.put(key, value)
                return True

        return await anyio.to_thread.run_sync(decide)

    async def prune(self, retention: float) -> int:
        """Delete records older than ``retention`` seconds; returns how many."""

        def sweep() -> int:
            cutoff = self.clock() - retention
            old = [
                k
                for k, v in self.store.scan(self.prefix).items()
                if isinstance(v.get("at"), int | float) and v["at"] < cutoff
            ]
            for k in old:
                self.store.delete(k)
            return len(old)

        return await anyio.to_thread.run_sync(sweep)
