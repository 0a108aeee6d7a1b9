"""Concurrent tags and untags lose nothing, on every store (issue 25's acceptance line).

``ml.tag`` and ``ml.untag`` change one store key per base (``ml:tags:<kind>:<base>``) through
``Store.update``. Four processes (for ``MemoryStore``, which no two processes can share:
four threads) start together and each does ``OPS`` tags of one shared base, untagging every
third round one of its own earlier tags (see ``_worker.tags``). Afterwards the base's tags
are counted exactly against what every process did: with the old get-then-put, 4 x 50
tags left 98-115 of 200 (issue 25's probe). A store whose update is not atomic fails the
same count (the last test).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from managedloop.provisioning import lifecycle
from managedloop.stores import FileStore, MemoryStore, RedisStore, SQLiteStore, Store, Updater

from ._worker import digest
from ._worker import tags as tag_rounds
from .conftest import PERSISTENT, RedisServer

WORKER = Path(__file__).with_name("_worker.py")
PROCS, OPS = 4, 60


def expected_tags(procs: int, ops: int) -> dict[str, str]:
    """What every process leaves: each tag ``p<p>-<i>`` unless a later round untagged it."""
    untagged = {(p, i - 2) for p in range(procs) for i in range(ops) if i % 3 == 2}
    return {
        f"p{p}-{i}": digest(p, i)
        for p in range(procs)
        for i in range(ops)
        if (p, i) not in untagged
    }


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _open(backend: str, target: str, namespace: str) -> Store:
    if backend == "file":
        return FileStore(target)
    if backend == "sqlite":
        return SQLiteStore(target)
    return RedisStore(target, namespace=namespace)


@pytest.mark.parametrize("backend", PERSISTENT)
def test_processes_tag_and_untag_one_base(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    namespace = ""
    if backend == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        target, namespace = server.url, server.namespace()
    else:
        target = str(tmp_path / ("store.json" if backend == "file" else "store.sqlite3"))
    children = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "tags", backend, target, namespace, str(p), str(OPS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for p in range(PROCS)
    ]
    try:
        for child in children:  # every child is up (imports done) before any starts
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            out, _ = child.communicate(timeout=120)
            assert (child.returncode, out) == (0, "done\n")
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    store = _open(backend, target, namespace)
    try:
        found = _tags(store)
        want = expected_tags(PROCS, OPS)
        assert len(want) == PROCS * (OPS - OPS // 3) == 160
        assert len(found) == len(want), f"{len(want) - len(found)} of {len(want)} tags lost"
        assert found == want
    finally:
        store.close()


def _tags(store: Store) -> dict[str, str]:
    return anyio.run(lambda: lifecycle.tags("base", kind="agent", store=store))


def _threads(store: Store) -> list[BaseException]:
    failures: list[BaseException] = []
    start = threading.Barrier(PROCS)

    def work(p: int) -> None:
        try:
            start.wait()
            tag_rounds(store, p, OPS)
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=work, args=(p,)) for p in range(PROCS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return failures


def test_threads_tag_and_untag_one_memory_store() -> None:
    store = MemoryStore()
    assert _threads(store) == []
    assert _tags(store) == expected_tags(PROCS, OPS)


class _GetThenPut(MemoryStore):
    """The read-modify-write ``tag`` did before ``Store.update``, with room for a race."""

    def update(self, key: str, fn: Updater) -> dict[str, Any] | None:
        new = fn(self.get(key))
        threading.Event().wait(0.001)
        if new is None:
            self.delete(key)
        else:
            self.put(key, new)
        return new


def test_the_count_catches_a_store_that_loses_updates() -> None:
    store = _GetThenPut()
    _threads(store)  # untags may fail (their tag was lost): the count below says it all
    assert len(_tags(store)) < len(expected_tags(PROCS, OPS))
