"""Fixtures for the lifecycle tests: the emulators, providers on them, and stores.

``store`` is a factory fixture: tests that need a store (or two handles on one) ask for
``store()``. It builds a ``MemoryStore`` here; at merge time the persistent stores
(``FileStore``, ``SQLiteStore``) slot in by parametrising ``store_factory``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anthropic
import pytest

from managedloop.providers import ClaudeManagedAgents
from managedloop.stores import MemoryStore, Store
from managedloop.testing import ClaudeEmulator


class JsonFileStore:
    """A throwaway file-backed ``Store`` for the two-process test: one JSON file, an
    exclusive ``O_EXCL`` lock file, atomic replace. Not a product store (``FileStore`` on
    the stores branch is); just enough to share state between two processes honestly."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._local = threading.Lock()

    def _locked(self, fn: Callable[[dict[str, Any]], Any], write: bool) -> Any:
        lock = self.path.with_suffix(".lock")
        with self._local:
            while True:
                try:
                    fd = os.open(lock, os.O_CREAT | os.O_EXCL)
                    break
                except FileExistsError:
                    threading.Event().wait(0.005)
            try:
                data = json.loads(self.path.read_text()) if self.path.exists() else {}
                out = fn(data)
                if write:
                    tmp = self.path.with_suffix(".tmp")
                    tmp.write_text(json.dumps(data))
                    os.replace(tmp, self.path)
                return out
            finally:
                os.close(fd)
                os.unlink(lock)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._locked(lambda d: d.get(key), write=False)  # type: ignore[no-any-return]

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        self._locked(lambda d: d.__setitem__(key, dict(value)), write=True)

    def delete(self, key: str) -> bool:
        return bool(self._locked(lambda d: d.pop(key, None) is not None, write=True))

    def scan(self, prefix: str) -> dict[str, dict[str, Any]]:
        return self._locked(  # type: ignore[no-any-return]
            lambda d: {k: v for k, v in sorted(d.items()) if k.startswith(prefix)}, write=False
        )

    def close(self) -> None:
        pass


@pytest.fixture
def store_factory() -> Callable[[], Store]:
    return MemoryStore


@pytest.fixture
def store(store_factory: Callable[[], Store]) -> Iterator[Store]:
    s = store_factory()
    yield s
    s.close()


@pytest.fixture
def emu() -> Iterator[ClaudeEmulator]:
    with ClaudeEmulator() as e:
        yield e


@pytest.fixture
async def client(emu: ClaudeEmulator) -> AsyncIterator[anthropic.AsyncAnthropic]:
    c = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key, max_retries=0)
    async with c:
        yield c


@pytest.fixture
def claude(client: anthropic.AsyncAnthropic) -> ClaudeManagedAgents:
    return ClaudeManagedAgents(client=client, reconnect_backoff=0.0)
