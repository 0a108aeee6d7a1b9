"""A delivery's end is recorded only by the receiver that still holds its lease: once the
lease ran out and another receiver took the delivery over, the first one's late "failed"
(or "done") leaves the second's record alone."""

from __future__ import annotations

import pytest

from managedloop.stores import MemoryStore
from managedloop.webhooks._ledger import Ledger

pytestmark = pytest.mark.anyio

LEASE = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_late_finish_after_a_takeover_leaves_the_new_record() -> None:
    store, clock = MemoryStore(), Clock()
    first, second = Ledger(store, "wh:", clock), Ledger(store, "wh:", clock)
    key = first.delivery_key("msg_1")
    assert await first.admit(key, "sesn_1", LEASE)
    assert not await second.admit(key, "sesn_1", LEASE)  # running, within the lease
    clock.now += LEASE + 1  # the first receiver looks dead: its lease ran out
    assert await second.admit(key, "sesn_1", LEASE)
    assert await second.finish(key, {"state": "done", "session_id": "sesn_1"})
    # The first receiver was only slow: its failure comes in late and must not win.
    assert not await first.finish(key, {"state": "failed", "session_id": "sesn_1"})
    record = store.get(key)
    assert record is not None
    assert record["state"] == "done"


async def test_the_lease_holder_records_its_end() -> None:
    store, clock = MemoryStore(), Clock()
    ledger = Ledger(store, "wh:", clock)
    key = ledger.delivery_key("msg_2")
    assert await ledger.admit(key, "sesn_2", LEASE)
    clock.now += 5
    assert await ledger.finish(key, {"state": "failed", "session_id": "sesn_2", "error": "x"})
    record = store.get(key)
    assert record is not None
    assert (record["state"], record["at"]) == ("failed", clock.now)
    assert await ledger.admit(key, "sesn_2", LEASE)  # failed: the host's retry is admitted
