"""A process SIGKILLed mid-write leaves a readable store, on both sides of the commit
(issue 10's acceptance, both sides by issue 25).

Deterministic, no timing: the child arms one of the backend's seams to write one byte to
its stdout and hang, and the parent SIGKILLs it when the byte arrives:

* **before** the commit — ``FileStore`` after the new file is written and fsync-ed, right
  before ``os.replace``; ``SQLiteStore`` inside the write transaction, right before
  ``COMMIT``; ``RedisStore`` with the ``MULTI`` transaction queued, right before ``EXEC`` is
  sent. A fresh store must read exactly the state before the write.
* **after** the commit — after the replace and the directory fsync, after ``COMMIT``,
  after ``EXEC`` answered — but before the call returned to its caller. A fresh store must
  read exactly the new state: a write the backend committed is never lost because its
  writer died before it could say so.

For every ``put``, ``update`` and ``delete``. The lock the child held must be free again
(FileStore and SQLite are asked with a zero wait); the next write must work (and, for
FileStore, remove the temporary file a writer killed before its replace left).

And ``test_sqlite_writer_killed_at_random_points``: a writer committing updates in a loop,
SIGKILLed at a random moment twenty times (after a random number of acknowledged writes),
keeps every write it acknowledged and at most the one in flight.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from managedloop.stores import FileStore, RedisStore, SQLiteStore, Store

from ._worker import CRASH_VALUE
from .conftest import PERSISTENT, RedisServer

WORKER = Path(__file__).with_name("_worker.py")
BEFORE = {"a": {"v": 1}, "b": {"w": [1, 2]}}
AFTER: dict[str, dict[str, dict[str, Any]]] = {
    "put": {"a": CRASH_VALUE, "b": {"w": [1, 2]}},
    "update": {"a": {"v": 2, "pad": CRASH_VALUE["pad"]}, "b": {"w": [1, 2]}},
    "delete": {"b": {"w": [1, 2]}},
}


def _open(backend: str, target: str, namespace: str) -> Store:
    if backend == "file":
        return FileStore(target, lock_timeout=0)
    if backend == "sqlite":
        return SQLiteStore(target, busy_timeout=0)
    return RedisStore(target, namespace=namespace)


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.mark.parametrize("side", ["before", "after"])
@pytest.mark.parametrize("op", ["put", "update", "delete"])
@pytest.mark.parametrize("backend", PERSISTENT)
def test_sigkill_on_either_side_of_the_commit(
    backend: str, op: str, side: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    namespace = ""
    if backend == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        target, namespace = server.url, server.namespace()
    else:
        target = str(tmp_path / ("store.json" if backend == "file" else "store.sqlite3"))
    first = _open(backend, target, namespace)
    for key, value in BEFORE.items():
        first.put(key, value)
    first.close()

    child = subprocess.Popen(
        [sys.executable, str(WORKER), "crash", backend, target, namespace, op, side],
        stdout=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert child.stdout is not None
        assert child.stdout.read(1) == b"!"  # at the seam: killed right there
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()

    temps = list(tmp_path.glob(".store.json.*.tmp"))
    if backend == "file":  # a writer killed before its replace leaves its temporary file
        assert len(temps) == (1 if side == "before" else 0)
    expected = BEFORE if side == "before" else AFTER[op]
    after = _open(backend, target, namespace)  # zero lock wait: the child's lock is gone
    try:
        assert after.scan("") == expected
        after.put("c", {"v": 3})
        assert after.scan("") == {**expected, "c": {"v": 3}}
        if backend == "file":
            assert list(tmp_path.glob(".store.json.*.tmp")) == []
        if backend == "sqlite":
            with sqlite3.connect(target) as db:
                assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        after.close()


def test_sqlite_writer_killed_at_random_points(tmp_path: Path) -> None:
    """Twenty SIGKILLs of a writer bumping a counter in a loop, each after a random number
    of acknowledged updates (the child prints each count after ``update`` returned): the
    count a killed writer leaves is what it acknowledged, or one more (the update in flight
    had committed; its acknowledgement had not been printed). Random points land anywhere
    in the write: before, inside and after the commit."""
    target = str(tmp_path / "store.sqlite3")
    rng = random.Random(25)  # seeded: the same kill points every run
    acknowledged = 0
    for _kill in range(20):
        child = subprocess.Popen(
            [sys.executable, str(WORKER), "count", "sqlite", target, "", "100000"],
            stdout=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
            for _ in range(rng.randrange(1, 40)):  # then killed mid-way through the next
                line = child.stdout.readline()
                assert line.strip().isdigit(), line
                acknowledged = int(line)
            child.send_signal(signal.SIGKILL)
            rest = child.stdout.read()  # acknowledged between the kill and its delivery
            for line in rest.split():
                acknowledged = int(line)
            assert child.wait(timeout=30) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
        store = SQLiteStore(target, busy_timeout=0)
        try:
            counter = (store.get("counter") or {"n": 0})["n"]
            assert acknowledged <= counter <= acknowledged + 1
            acknowledged = counter  # the next writer goes on from what is there
        finally:
            store.close()
        with sqlite3.connect(target) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_redis_discards_a_transaction_whose_client_died(redis_server: RedisServer) -> None:
    """What RedisStore's crash safety rests on, checked on the real server: redis-py sends
    ``MULTI``, the commands and ``EXEC`` in one write, and a client that dies after
    ``MULTI`` and the commands but before ``EXEC`` (its socket closes, as on SIGKILL)
    leaves nothing of them."""
    namespace = redis_server.namespace()
    store = RedisStore(redis_server.url, namespace=namespace)
    store.put("a", {"v": 1})
    value_key, index = f"{namespace}v:a", f"{namespace}index"
    commands = [
        ["AUTH", redis_server.password],
        ["MULTI"],
        ["SET", value_key, '{"v":2}'],
        ["ZADD", index, "0", "b"],
    ]
    wire = b"".join(
        f"*{len(c)}\r\n".encode() + b"".join(f"${len(a)}\r\n{a}\r\n".encode() for a in c)
        for c in commands
    )
    with socket.create_connection((redis_server.host, redis_server.port)) as sock:
        sock.sendall(wire)
        replies = b""
        while replies.count(b"\r\n") < 4:  # +OK, +OK, +QUEUED, +QUEUED
            replies += sock.recv(1000)
        assert replies == b"+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n"
    assert store.scan("") == {"a": {"v": 1}}
    store.put("c", {"v": 3})  # the server is fine, and so is the store
    assert store.scan("") == {"a": {"v": 1}, "c": {"v": 3}}
    store.close()
