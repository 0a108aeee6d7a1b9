"""``open_store``: one string names a store (a spec file's ``store =``, a ``--store`` option)."""

from __future__ import annotations

import os
from pathlib import Path

from managedloop.stores._base import Store
from managedloop.stores._file import FileStore
from managedloop.stores._memory import MemoryStore
from managedloop.stores._redis import RedisStore
from managedloop.stores._sqlite import SQLiteStore, default_store_path

__all__ = ["open_store"]

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def open_store(where: str | os.PathLike[str] | None = None) -> Store:
    """The store ``where`` names.

    ``None`` (or ``""``): the default, an :class:`SQLiteStore` at
    :func:`default_store_path`; ``"memory:"``: a new :class:`MemoryStore`; a ``redis://``,
    ``rediss://`` or ``unix://`` URL: a :class:`RedisStore`; a path ending in ``.json``: a
    :class:`FileStore`; any other path: an :class:`SQLiteStore`. ``~`` in a path is the
    user's home.
    """
    if where is None or where == "":
        return SQLiteStore(default_store_path())
    text = os.fspath(where)
    if text == "memory:":
        return MemoryStore()
    if text.startswith(_REDIS_SCHEMES):
        return RedisStore(text)
    path = Path(text).expanduser()
    if path.suffix.lower() == ".json":
        return FileStore(path)
    return SQLiteStore(path)
