"""Stores: where provisioned handles, tags and stored-by-reference state outlive a process.

``Store`` is the protocol (see ``managedloop.stores._base`` for the invariants every
backend keeps). The backends, and what each guarantees:

=================  ==========================  ===========================================
backend            who may share it            what a write that returned survives
=================  ==========================  ===========================================
``MemoryStore``    threads of one process      nothing: it dies with the process
``FileStore``      processes on one machine    a crash or power cut (fsync + atomic rename)
``SQLiteStore``    processes on one machine    a crash or power cut (WAL, synchronous=FULL)
``RedisStore``     processes on many machines  what the server's persistence keeps
=================  ==========================  ===========================================

A process killed mid-write leaves the previous state readable on every persistent
backend. ``open_store("…")`` makes one from a string, and with no argument the command
line's default, an ``SQLiteStore`` at ``default_store_path()``. ``RedisStore`` needs the
extra ``managedloop[redis]``, imported only when one is made.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from managedloop.stores._base import Store
from managedloop.stores._memory import MemoryStore

if TYPE_CHECKING:  # loaded on first use: `import managedloop` pays for none of them
    from managedloop.stores._file import FileStore
    from managedloop.stores._open import open_store
    from managedloop.stores._redis import RedisStore
    from managedloop.stores._sqlite import SQLiteStore, default_store_path

__all__ = [
    "FileStore",
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "Store",
    "default_store_path",
    "open_store",
]

_WHERE = {
    "FileStore": "managedloop.stores._file",
    "RedisStore": "managedloop.stores._redis",
    "SQLiteStore": "managedloop.stores._sqlite",
    "default_store_path": "managedloop.stores._sqlite",
    "open_store": "managedloop.stores._open",
}


def __getattr__(name: str) -> Any:
    # The persistent backends load their dependencies (filelock, sqlite3) on first use.
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'managedloop.stores' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
