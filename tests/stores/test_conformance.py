"""The public conformance kit (``managedloop.testing.stores``) passes on every backend, and
fails on stores that break the contract (so its checks can fail)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from managedloop.stores import FileStore, MemoryStore, RedisStore, SQLiteStore, Store, Updater
from managedloop.testing.stores import CHECKS, check_concurrent_updates, check_store, check_update

from .conftest import RedisServer

BACKENDS = ("memory", "file", "sqlite", "redis")


def _make(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], Store]:
    if backend == "memory":
        shared = MemoryStore()

        class Handle(MemoryStore):
            """A handle on the one shared MemoryStore whose close does not empty it."""

            def __init__(self) -> None:
                self._lock, self._data = shared._lock, shared._data

            def close(self) -> None:
                pass

        return Handle
    if backend == "file":
        return lambda: FileStore(tmp_path / "store.json")
    if backend == "sqlite":
        return lambda: SQLiteStore(tmp_path / "store.sqlite3")
    server: RedisServer = request.getfixturevalue("redis_server")
    namespace = server.namespace()
    return lambda: RedisStore(server.url, namespace=namespace)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_conforms(
    backend: str, check: Callable[..., None], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    check(_make(backend, tmp_path, request))


def test_check_store_runs_every_check_and_leaves_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite3")
    store.put("mine", {"kept": True})
    check_store(lambda: SQLiteStore(tmp_path / "s.sqlite3"))
    assert store.scan("") == {"mine": {"kept": True}}  # only its own prefix was touched
    store.close()


class _ReadThenWrite(MemoryStore):
    """A store whose update is get-then-put with a gap: the race the kit must catch."""

    def update(self, key: str, fn: Updater) -> dict[str, Any] | None:
        current = self.get(key)
        threading.Event().wait(0.0005)  # let another thread in between the read and write
        new = fn(current)
        if new is None:
            self.delete(key)
        else:
            self.put(key, new)
        return new


class _Swallowing(MemoryStore):
    """A store whose update turns fn's exceptions into its own."""

    def update(self, key: str, fn: Updater) -> dict[str, Any] | None:
        try:
            return super().update(key, fn)
        except Exception as exc:
            raise RuntimeError("update failed") from exc


class _WritesOnFailure(MemoryStore):
    """A store that writes what fn changed in place even when fn then raised."""

    def update(self, key: str, fn: Updater) -> dict[str, Any] | None:
        current = self.get(key)
        try:
            return super().update(key, lambda _v: fn(current))
        except BaseException:
            if current is not None:
                self.put(key, current)
            raise


def _one(store_type: type[MemoryStore]) -> Callable[[], Store]:
    shared = store_type()

    class Handle(store_type):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            self._lock, self._data = shared._lock, shared._data

        def close(self) -> None:
            pass

    return Handle  # type: ignore[no-any-return]


def test_the_kit_catches_a_lost_update() -> None:
    with pytest.raises(AssertionError, match="lost updates"):
        check_concurrent_updates(_one(_ReadThenWrite), threads=8, rounds=20)


@pytest.mark.parametrize(
    ("store_type", "message"),
    [
        (_Swallowing, "must propagate unchanged"),
        (_WritesOnFailure, "must write nothing"),
    ],
)
def test_the_kit_catches_a_broken_abort(store_type: type[MemoryStore], message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check_update(_one(store_type))


def test_the_kit_refuses_a_store_without_update() -> None:
    class NoUpdate:
        def get(self, key: str) -> dict[str, Any] | None:
            return None

        def put(self, key: str, value: Mapping[str, Any]) -> None:
            pass

        def delete(self, key: str) -> bool:
            return False

        def scan(self, prefix: str) -> dict[str, dict[str, Any]]:
            return {}

        def close(self) -> None:
            pass

    with pytest.raises(AssertionError, match="does not implement"):
        check_store(NoUpdate)  # type: ignore[arg-type]
