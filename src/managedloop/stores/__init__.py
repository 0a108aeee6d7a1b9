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

from typing import TYPE_CHECKING

from managedloop.stores._base import MAX_KEY_LENGTH, Store, Updater
from managedloop.stores._memory import MemoryStore

if TYPE_CHECKING:  # loaded on first use: `import managedloop` pays for none of them
    from managedloop.stores._file import FileStore
    from managedloop.stores._open import open_store
    from managedloop.stores._redis import RedisStore
    from managedloop.stores._sqlite import SQLiteStore, default_store_path

__all__ = [
    "MAX_KEY_LENGTH",
    "FileStore",
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "Store",
    "Updater",
    "default_store_path",
    "open_store",
]

if not TYPE_CHECKING:  # type checkers see the names above, not a catch-all __getattr__
    from managedloop import _lazy

    # The persistent backends load their dependencies (filelock, sqlite3) on first use.
    _LAZY = {
        "managedloop.stores._file": ("FileStore",),
        "managedloop.stores._open": ("open_store",),
        "managedloop.stores._redis": ("RedisStore",),
        "managedloop.stores._sqlite": ("SQLiteStore", "default_store_path"),
    }
    __getattr__, __dir__ = _lazy.on_first_use(globals(), _LAZY)
