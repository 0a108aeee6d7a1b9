"""Stores: where provisioned handles, tags and stored-by-reference state outlive a process.

``Store`` is the protocol (see ``managedloop.stores._base`` for the invariants every
backend keeps, the atomic ``update`` included; ``managedloop.testing.stores.check_store``
checks them on any store). The backends, and what each guarantees:

===============  ==========================  ============================  =======================
backend          who may share it            what makes ``update`` atomic  a write that returned
                                                                           survives
===============  ==========================  ============================  =======================
``MemoryStore``  threads of one process      one lock                      nothing (dies with it)
``FileStore``    processes on one machine    the file lock, held from      a crash or power cut
                                             read to atomic replace        (fsync + atomic rename)
``SQLiteStore``  processes on one machine    one ``BEGIN IMMEDIATE``       a crash or power cut
                                                                           (WAL, synchronous=FULL)
``RedisStore``   processes on many machines  ``WATCH``/``MULTI``,          what the server's
                                             retried on conflict           persistence keeps
===============  ==========================  ============================  =======================

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
