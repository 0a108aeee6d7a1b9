"""Many processes on one persistent store lose nothing (issue 10's acceptance line).

Eight processes start together (a barrier on stdin) and run 200 mixed operations each on
the same ``FileStore``, ``SQLiteStore`` or ``RedisStore``: puts of keys of their own,
puts of keys every process writes, tag moves, and put/get/delete rounds (see
``_worker.mix``). Afterwards every key of its own that each process wrote is there with
its value (counted: 8 x 50), no deleted key is, and every shared key holds the *last*
value some process wrote to it — which is what last-writer-wins must leave. A lost update
(a read-modify-write race in FileStore, a dropped transaction in SQLite, a value without
its index entry in Redis) fails one of these counts.

Also here: threads of one process sharing one store, and a store opened before a fork.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from managedloop.stores import SQLiteStore

from . import _procs
from .conftest import PERSISTENT

PROCS, OPS = 8, 200


@pytest.mark.parametrize("backend", PERSISTENT)
def test_eight_processes_lose_nothing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target, namespace = _procs.target(backend, tmp_path, request)
    argvs = [["mix", backend, target, namespace, str(p), str(OPS)] for p in range(PROCS)]
    answers = _procs.run_together(argvs, timeout=50)
    assert [code for code, _ in answers] == [0] * PROCS
    lasts: list[dict[str, Any]] = [json.loads(out) for _, out in answers]

    store = _procs.open_store(backend, target, namespace)
    try:
        own = store.scan("own:")
        expected_own = {
            f"own:{p}:{i}": {"proc": p, "i": i} for p in range(PROCS) for i in range(0, OPS, 4)
        }
        assert len(own) == PROCS * OPS // 4 == 400
        assert own == expected_own  # and no own:<p>:tmp: every round ended with a delete
        shared = store.scan("shared:") | store.scan("tag:")
        assert sorted(shared) == sorted({k for last in lasts for k in last})
        assert len(shared) == 4 + 3
        for key, value in shared.items():
            assert value in [last[key] for last in lasts], key
        assert len(store.scan("")) == 400 + 4 + 3
    finally:
        store.close()


@pytest.mark.parametrize("backend", PERSISTENT)
def test_threads_share_one_store(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target, namespace = _procs.target(backend, tmp_path, request)
    store = _procs.open_store(backend, target, namespace)
    failures: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(50):
                store.put(f"t{t}:{i}", {"i": i})
                assert store.get(f"t{t}:{i}") == {"i": i}
                if i % 2:
                    assert store.delete(f"t{t}:{i}") is True
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert failures == []
        assert store.scan("") == {f"t{t}:{i}": {"i": i} for t in range(4) for i in range(0, 50, 2)}
    finally:
        store.close()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_sqlite_store_opened_before_a_fork(tmp_path: Path) -> None:
    """A child of a fork gets a connection of its own (SQLite forbids using the parent's)."""
    store = SQLiteStore(tmp_path / "s.sqlite3")
    store.put("before", {"v": 1})
    pid = os.fork()
    if pid == 0:  # the child: exit code says what it saw
        code = 1
        try:
            if store.get("before") == {"v": 1}:
                store.put("child", {"v": 2})
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.scan("") == {"before": {"v": 1}, "child": {"v": 2}}
    store.put("after", {"v": 3})  # the parent's connection still works
    assert store.get("after") == {"v": 3}
    store.close()
