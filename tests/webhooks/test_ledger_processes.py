"""The webhook ledger's read-decide-writes are atomic across processes (issue 25): four
processes sharing one persistent store each try to admit the same 40 deliveries and claim
the same 40 tool uses at once; each is won by exactly one process, counted exactly. With
the old get-then-put under a process-local lock, two processes could both win one.

And the ledger's conditional deletes: a ``started`` mark is released only if it is still
the releasing delivery's own, and a sweep never drops a record refreshed since its scan.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import procs
from managedloop.stores import MemoryStore, Updater
from managedloop.webhooks._ledger import Ledger

WORKER = Path(__file__).with_name("_ledger_worker.py")
PROCS, N = 4, 40


@pytest.mark.parametrize("backend", ["file", "sqlite"])
def test_each_delivery_and_tool_use_is_won_by_one_process(backend: str, tmp_path: Path) -> None:
    target = str(tmp_path / ("store.json" if backend == "file" else "store.sqlite3"))
    argvs = [[backend, target, str(p), str(N)] for p in range(PROCS)]
    won: Counter[str] = Counter()
    for code, out in procs.run_together(WORKER, argvs, timeout=120):
        assert code == 0
        won.update(json.loads(out))
    everything = {f"d{i}" for i in range(N)} | {f"t{i}" for i in range(N)}
    assert set(won) == everything
    assert [k for k, n in won.items() if n != 1] == []  # nothing won twice


@pytest.mark.anyio
async def test_release_drops_only_its_own_started_mark() -> None:
    store = MemoryStore()
    ledger = Ledger(store, "hooks:", lambda: 1000.0)
    mine, theirs, done = (ledger.tool_key("s", t) for t in ("a", "b", "c"))
    assert await ledger.claim(mine, "hook-1")
    store.put(theirs, {"state": "started", "webhook_id": "hook-2", "at": 1.0})
    store.put(done, {"result": {"tool_use_id": "c", "text": "ok"}, "webhook_id": "hook-1"})
    for key in (mine, theirs, done):
        await ledger.release(key, "hook-1")
    assert store.get(mine) is None
    assert store.get(theirs) is not None
    assert store.get(done) is not None


class _RefreshedDuringSweep(MemoryStore):
    """A record refreshed by another receiver between the sweep's scan and its delete."""

    def update(self, key: str, fn: Updater) -> dict[str, Any] | None:
        self.put(key, {"state": "running", "at": 999.0})
        return super().update(key, fn)


@pytest.mark.anyio
async def test_a_sweep_keeps_a_record_refreshed_since_its_scan() -> None:
    store = _RefreshedDuringSweep()
    ledger = Ledger(store, "hooks:", lambda: 1000.0)
    store.put("hooks:delivery:old", {"state": "done", "at": 1.0})
    assert await ledger.prune(retention=100.0) == 0
    assert store.get("hooks:delivery:old") == {"state": "running", "at": 999.0}
    plain = MemoryStore()
    plain.put("hooks:delivery:old", {"state": "done", "at": 1.0})
    plain.put("hooks:delivery:new", {"state": "done", "at": 950.0})
    assert await Ledger(plain, "hooks:", lambda: 1000.0).prune(retention=100.0) == 1
    assert list(plain.scan("")) == ["hooks:delivery:new"]
