"""A child process for the multi-process store tests (run as a script, not collected).

``python _worker.py mix BACKEND TARGET NAMESPACE PROC OPS``: prints ``ready``, waits for a
line on stdin (so every child starts together), runs ``OPS`` mixed operations, and prints
one JSON line: the last value it wrote to each shared key.

``python _worker.py tags BACKEND TARGET NAMESPACE PROC OPS``: prints ``ready``, waits for a
line on stdin, then ``OPS`` rounds of ``ml.tag_sync`` on one shared base (tag ``p<PROC>-<i>``)
and, every third round, ``ml.untag_sync`` of its own tag of two rounds before (which must
return the digest it pointed at); prints ``done``.

``python _worker.py open sqlite - - ``: prints ``ready``; then for each line on stdin (a
path) opens a *new* ``SQLiteStore`` there, writes one key, closes it, and prints ``ok`` or
``fail <code>: <message>`` (``test_sqlite_open``).

``python _worker.py count sqlite TARGET - OPS``: prints ``ready``, then ``OPS``
``update`` bumps of one counter, printing each new count after the update returned.

``python _worker.py crash BACKEND TARGET NAMESPACE OP SIDE``: arms the backend's seam on
``SIDE`` (``before`` or ``after``) of the commit to write one byte to stdout and then wait
forever, and runs ``OP`` (``put``, ``update`` or ``delete`` of key ``a``): the parent kills
it when the byte arrives — the new state written but not committed, or committed but not
yet returned to the caller.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from managedloop.stores import FileStore, RedisStore, SQLiteStore, Store


def open_store(backend: str, target: str, namespace: str) -> Store:
    if backend == "file":
        return FileStore(target)
    if backend == "sqlite":
        return SQLiteStore(target)
    if backend == "redis":
        return RedisStore(target, namespace=namespace)
    raise SystemExit(f"unknown backend {backend}")


def mix(store: Store, proc: int, ops: int) -> dict[str, Any]:
    """``ops`` operations in four kinds, in turn: a key of our own that stays; a key every
    process writes; a tag every process moves (``ml.tag``'s put); a key of our own that is
    put and deleted again (each delete must find it: our own earlier write is visible)."""
    last: dict[str, Any] = {}
    for i in range(ops):
        kind, round_ = i % 4, i // 4
        if kind == 0:
            store.put(f"own:{proc}:{i}", {"proc": proc, "i": i})
        elif kind == 1:
            key, value = f"shared:{round_ % 4}", {"proc": proc, "i": i}
            store.put(key, value)
            last[key] = value
        elif kind == 2:
            key, value = f"tag:base:t{round_ % 3}", {"digest": f"{proc}-{i}"}
            store.put(key, value)
            last[key] = value
        elif round_ % 2 == 0:
            store.put(f"own:{proc}:tmp", {"proc": proc, "i": i})
        else:
            assert store.get(f"own:{proc}:tmp") == {"proc": proc, "i": i - 4}
            assert store.delete(f"own:{proc}:tmp") is True
    return last


def tags(store: Store, proc: int, ops: int) -> None:
    """Tags and untags of one base, every process at once (see ``test_atomic_processes``)."""
    import managedloop as ml

    for i in range(ops):
        ml.tag_sync("base", f"p{proc}-{i}", digest(proc, i), kind="agent", store=store)
        if i % 3 == 2:
            was = ml.untag_sync("base", f"p{proc}-{i - 2}", kind="agent", store=store)
            if was != digest(proc, i - 2):
                raise SystemExit(f"untag p{proc}-{i - 2} returned {was!r}")


def count(store: Store, ops: int) -> None:
    """Bump ``counter`` with ``update``, ``ops`` times, printing each new count once the
    update returned (the parent kills us at a random one)."""
    for _ in range(ops):
        new = store.update("counter", lambda v: {"n": (v or {"n": 0})["n"] + 1})
        assert new is not None
        print(new["n"], flush=True)


def digest(proc: int, i: int) -> str:
    return f"{proc:02x}{i:06x}"


def opens() -> None:
    from managedloop.errors import StoreError

    print("ready", flush=True)
    for line in sys.stdin:
        try:
            store = SQLiteStore(line.strip())
            store.put(f"k{os.getpid()}", {"v": 1})
            store.close()
        except StoreError as exc:
            print(f"fail {exc.code}: {exc.message}", flush=True)
        else:
            print("ok", flush=True)


def crash(store: Store, op: str, side: str) -> None:
    def signal_and_hang() -> None:
        os.write(1, b"!")
        threading.Event().wait()  # the parent SIGKILLs us here

    seams = {
        "file": ("_before_replace", "_after_replace"),
        "sqlite": ("_before_commit", "_after_commit"),
        "redis": ("_before_execute", "_after_execute"),
    }
    kind = {FileStore: "file", SQLiteStore: "sqlite", RedisStore: "redis"}[type(store)]
    setattr(store, seams[kind][side == "after"], signal_and_hang)
    if op == "put":
        store.put("a", CRASH_VALUE)
    elif op == "update":
        store.update("a", lambda v: {**(v or {}), **CRASH_VALUE})
    else:
        store.delete("a")
    raise SystemExit("the seam did not run")


CRASH_VALUE = {"v": 2, "pad": "x" * 100_000}


def main() -> None:
    mode, backend, target, namespace = sys.argv[1:5]
    if mode == "open":
        opens()
        return
    store = open_store(backend, target, namespace)
    if mode == "mix":
        proc, ops = int(sys.argv[5]), int(sys.argv[6])
        print("ready", flush=True)
        sys.stdin.readline()
        print(json.dumps(mix(store, proc, ops)), flush=True)
    elif mode == "count":
        print("ready", flush=True)
        count(store, int(sys.argv[5]))
    elif mode == "tags":
        print("ready", flush=True)
        sys.stdin.readline()
        tags(store, int(sys.argv[5]), int(sys.argv[6]))
        print("done", flush=True)
    else:
        crash(store, sys.argv[5], sys.argv[6])
    store.close()


if __name__ == "__main__":
    main()
