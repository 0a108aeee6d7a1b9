"""Worker processes on one shared store, started together (the multi-process store tests):
each runs ``_worker.py`` with its arguments (:mod:`procs` says how they start)."""

from __future__ import annotations

from pathlib import Path

import pytest

import procs
from managedloop.stores import FileStore, RedisStore, SQLiteStore, Store

from .conftest import RedisServer

WORKER = Path(__file__).with_name("_worker.py")


def target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, str]:
    """Where a persistent ``backend``'s store lives, and its namespace (Redis only)."""
    if backend == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return server.url, server.namespace()
    return str(tmp_path / ("store.json" if backend == "file" else "store.sqlite3")), ""


def open_store(backend: str, target: str, namespace: str) -> Store:
    if backend == "file":
        return FileStore(target)
    if backend == "sqlite":
        return SQLiteStore(target)
    return RedisStore(target, namespace=namespace)


def run_together(argvs: list[list[str]], *, timeout: float) -> list[tuple[int, str]]:
    """``_worker.py`` once per argument list, released together (:mod:`procs`)."""
    return procs.run_together(WORKER, argvs, timeout=timeout)
