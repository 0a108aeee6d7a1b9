"""``MemoryStore``: the in-process store, the default of the library calls.

Values are kept as their JSON text, so a ``MemoryStore`` refuses and returns exactly what
a persistent store would (no shared references: mutating what ``get`` returned changes
nothing stored), and tests written against it hold for the others.

Concurrency: one lock serves every operation, so ``update`` is atomic for every thread of
the process (its function runs under that lock, once). Nothing is shared between processes.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from managedloop.stores._base import (
    UpdateAborted,
    Updater,
    call_updater,
    check_key,
    check_updater,
    decode_value,
    encode_value,
)

__all__ = ["MemoryStore"]


class MemoryStore:
    """A thread-safe dict of JSON texts; lives and dies with the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"MemoryStore(<{len(self._data)} keys>)"

    def get(self, key: str) -> dict[str, Any] | None:
        check_key(key)
        with self._lock:
            text = self._data.get(key)
        return None if text is None else decode_value(text, where="memory")

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        check_key(key)
        text = encode_value(value)
        with self._lock:
            self._data[key] = text

    def update(self, key: str, fn: Updater) -> dict[str, Any] | None:
        check_key(key)
        check_updater(fn)
        try:
            with self._lock:
                old = self._data.get(key)
                new = call_updater(fn, None if old is None else decode_value(old, where="memory"))
                if new is None:
                    self._data.pop(key, None)
                else:
                    self._data[key] = new
        except UpdateAborted as aborted:
            error = aborted.error
        else:
            return None if new is None else decode_value(new, where="memory")
        raise error

    def delete(self, key: str) -> bool:
        check_key(key)
        with self._lock:
            return self._data.pop(key, None) is not None

    def scan(self, prefix: str) -> dict[str, dict[str, Any]]:
        check_key(prefix, prefix=True)
        with self._lock:
            hits = {k: t for k, t in self._data.items() if k.startswith(prefix)}
        return {k: decode_value(t, where="memory") for k, t in sorted(hits.items())}

    def close(self) -> None:
        with self._lock:
            self._data.clear()
