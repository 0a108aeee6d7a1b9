"""A process SIGKILLed mid-write leaves the previous state readable (issue 10's acceptance).

Deterministic, no timing: the child arms the backend's seam — ``FileStore`` after the new
file is written and fsync-ed, right before ``os.replace``; ``SQLiteStore`` inside the
write transaction, right before ``COMMIT``; ``RedisStore`` with the ``MULTI`` transaction
queued, right before ``EXEC`` is sent — to write one byte to its stdout and hang. The
parent reads that byte and SIGKILLs it. Then a fresh store in this process must read
exactly the state before the write; the lock the child held must be free again (FileStore
and SQLite are asked with a zero wait); and the next write must work (and, for FileStore,
remove the temporary file the dead writer left).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from managedloop.stores import FileStore, RedisStore, SQLiteStore, Store

from .conftest import PERSISTENT, RedisServer

WORKER = Path(__file__).with_name("_worker.py")
BEFORE = {"a": {"v": 1}, "b": {"w": [1, 2]}}


def _open(backend: str, target: str, namespace: str) -> Store:
    if backend == "file":
        return FileStore(target, lock_timeout=0)
    if backend == "sqlite":
        return SQLiteStore(target, busy_timeout=0)
    return RedisStore(target, namespace=namespace)


@pytest.mark.parametrize("op", ["put", "delete"])
@pytest.mark.parametrize("backend", PERSISTENT)
def test_sigkill_mid_write_keeps_the_previous_state(
    backend: str, op: str, tmp_path: Path, request: pytest.FixtureRequest
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

    src = str(Path(__file__).resolve().parents[2] / "src")
    child = subprocess.Popen(
        [sys.executable, str(WORKER), "crash", backend, target, namespace, op],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": src},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.read(1) == b"!"  # the new state is written, not committed
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()

    if backend == "file":  # the dead writer's fsync-ed temporary file is still there
        assert len(list(tmp_path.glob(".store.json.*.tmp"))) == 1
    after = _open(backend, target, namespace)  # zero lock wait: the child's lock is gone
    try:
        assert after.scan("") == BEFORE
        assert after.get("a") == {"v": 1}
        after.put("c", {"v": 3})
        assert after.scan("") == {**BEFORE, "c": {"v": 3}}
        if backend == "file":
            assert list(tmp_path.glob(".store.json.*.tmp")) == []
    finally:
        after.close()


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
