"""Worker processes on one shared store, started together (the multi-process store tests).

Each child runs ``_worker.py`` with its arguments, prints ``ready`` once its imports are
done, waits for ``go`` on stdin (so all of them start the work at once), and prints its
answer when done.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    """Start one worker per argument list, release them together, and return each one's
    exit code and output; a worker still running at the end is killed."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    children = [
        subprocess.Popen(
            [sys.executable, str(WORKER), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for argv in argvs
    ]
    try:
        for child in children:  # every child is up (imports done) before any starts
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=timeout)[0] for child in children]
        return [(child.returncode, out) for child, out in zip(children, outputs, strict=True)]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
