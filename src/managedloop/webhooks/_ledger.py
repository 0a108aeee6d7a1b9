"""The store records of deliveries and tool uses: the at-most-once bookkeeping (see the
package docstring)."""

from __future__ import annotations

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


class Ledger:
    """The store records of deliveries and tool uses (see the package docstring). Every
    read-decide-write is one ``Store.update``, so it is atomic for every receiver sharing
    the store: in this process, whichever event loop serves it, and in any other process
    on a persistent store. The functions given to ``update`` only decide (they may run
    more than once); what they decided is read after the update returns."""

    def __init__(self, store: Store, prefix: str, clock: Callable[[], float]) -> None:
        self.store = store
        self.prefix = prefix
        self.clock = clock
        self._leases: dict[str, float] = {}
        """Delivery key -> the ``since`` this receiver's :meth:`admit` wrote: what
        :meth:`finish` checks it still holds."""

    def delivery_key(self, webhook_id: str) -> str:
        return f"{self.prefix}delivery:{webhook_id}"

    def tool_key(self, session_id: str, tool_use_id: str) -> str:
        return f"{self.prefix}tool:{session_id}:{tool_use_id}"

    async def get(self, key: str) -> dict[str, Any] | None:
        return await anyio.to_thread.run_sync(self.store.get, key)

    async def put(self, key: str, value: Mapping[str, Any]) -> None:
        """Replace the record (a whole new state that depends on nothing stored)."""
        stamped = {**value, "at": self.clock()}
        await anyio.to_thread.run_sync(self.store.put, key, stamped)

    async def admit(self, key: str, session_id: str, lease: float) -> bool:
        """Mark a delivery ``running`` unless it is running (within ``lease``) or done."""
        now = self.clock()
        admitted = [False]

        def decide(record: dict[str, Any] | None) -> dict[str, Any] | None:
            state = record.get("state") if record is not None else None
            since = record.get("since") if record is not None else None
            if state == "running" and isinstance(since, int | float) and now - since > lease:
                # A worker that died mid-delivery leaves "running" behind: after the
                # lease it counts as failed, so the host's retry is not refused forever.
                state = "failed"
            admitted[0] = state not in ("running", "done")
            if not admitted[0]:
                return record
            return {"state": "running", "session_id": session_id, "since": now, "at": now}

        await anyio.to_thread.run_sync(self.store.update, key, decide)
        if admitted[0]:
            self._leases[key] = now
        return admitted[0]

    async def finish(self, key: str, value: Mapping[str, Any]) -> bool:
        """Record a delivery's end (``done`` / ``failed``) if this receiver still holds its
        ``running`` lease. After the lease ran out another receiver may have taken the
        delivery over (:meth:`admit`): its record is then left alone, and ``False`` says so."""
        since = self._leases.pop(key, None)
        stamped = {**value, "at": self.clock()}
        kept = [False]

        def decide(record: dict[str, Any] | None) -> dict[str, Any] | None:
            ours = (
                record is not None
                and record.get("state") == "running"
                and record.get("since") == since
            )
            kept[0] = ours
            return stamped if ours else record

        await anyio.to_thread.run_sync(self.store.update, key, decide)
        return kept[0]

    async def claim(self, key: str, webhook_id: str) -> bool:
        """Mark a tool use ``started`` if nothing is recorded for it yet."""
        now = self.clock()
        claimed = [False]

        def decide(record: dict[str, Any] | None) -> dict[str, Any] | None:
            claimed[0] = record is None
            return {"state": STARTED, "webhook_id": webhook_id, "at": now} if claimed[0] else record

        await anyio.to_thread.run_sync(self.store.update, key, decide)
        return claimed[0]

    async def release(self, key: str, webhook_id: str) -> None:
        """Drop a tool use's ``started`` mark made by ``webhook_id``, unless something else
        was recorded there since (a result, another delivery's mark)."""

        def decide(record: dict[str, Any] | None) -> dict[str, Any] | None:
            if record is None or record.get("state") != STARTED:
                return record
            return None if record.get("webhook_id") == webhook_id else record

        await anyio.to_thread.run_sync(self.store.update, key, decide)

    async def prune(self, retention: float) -> int:
        """Delete records older than ``retention`` seconds; returns how many."""
        cutoff = self.clock() - retention

        def expired(record: dict[str, Any] | None) -> bool:
            at = None if record is None else record.get("at")
            return isinstance(at, int | float) and at < cutoff

        def sweep() -> int:
            dropped = 0
            for key, record in self.store.scan(self.prefix).items():
                if expired(record):  # checked again under the update: it may be fresh now
                    gone = self.store.update(key, lambda r: None if expired(r) else r)
                    dropped += gone is None
            return dropped

        return await anyio.to_thread.run_sync(sweep)
