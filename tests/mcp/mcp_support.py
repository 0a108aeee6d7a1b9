"""Helpers for the MCP tests: the server scripts beside this file, and process checks."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import managedloop as ml

HERE = Path(__file__).resolve().parent
WEATHER = str(HERE / "weather_server.py")
HOSTILE = str(HERE / "hostile_server.py")
RAW = str(HERE / "raw_server.py")
PYTHON = sys.executable
START_TIMEOUT = 30.0  # seconds for a server to listen: a Python start on a loaded 2-core box


def alive(pid: int) -> bool:
    """Whether ``pid`` is still a process (a zombie counts: nobody reaped it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


@dataclass
class Pidfile:
    """Where the stdio weather servers write their pids (one line each, appended)."""

    path: Path
    seen: int = 0  # pids before this mark belong to earlier checks

    @property
    def env(self) -> dict[str, str]:
        return {"MCP_TEST_PIDFILE": str(self.path)}

    def mark(self) -> None:
        self.seen = len(pids(self.path))

    def new(self) -> list[int]:
        """The pids of the servers started since the last mark."""
        return pids(self.path)[self.seen :]

    def assert_all_gone(self, at_least: int = 1) -> list[int]:
        """Every server started since the last mark has exited (and been reaped)."""
        found = self.new()
        assert len(found) >= at_least, f"expected {at_least}+ server processes, saw {found}"
        assert [p for p in found if alive(p)] == [], "an MCP server process outlived its session"
        self.mark()
        return found


@dataclass
class Weather:
    """The weather server's tools, listed once per module (``from_mcp_sync``: a Python
    start of an MCP server takes seconds on a loaded machine), and where its pids go."""

    tools: ml.Toolset
    pidfile: Pidfile
    refuse_start: Path  # while this file exists, a new server process exits at once

    def only(self, *names: str) -> ml.Toolset:
        picked = [self.tools.get(n) for n in names]
        assert all(picked)
        return ml.Toolset(t for t in picked if t is not None)


@dataclass
class HttpServer:
    url: str
    token: str
    process: subprocess.Popen[str]


def _read_port(process: subprocess.Popen[str]) -> int:
    """The ``PORT <n>`` line, waited for at most START_TIMEOUT seconds."""
    found: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        found.append(process.stdout.readline())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(START_TIMEOUT)
    line = found[0] if found else ""
    if not line.startswith("PORT "):
        process.kill()
        raise RuntimeError(f"the MCP HTTP server did not start: {line!r}")
    return int(line.split()[1])


@contextmanager
def serve_http() -> Iterator[HttpServer]:
    """The weather server over streamable HTTP (a subprocess), with a bearer token it checks;
    stopped on leaving, every wait bounded."""
    token = "tok-" + os.urandom(8).hex()
    env = {**os.environ, "MCP_TEST_TOKEN": token}
    process = subprocess.Popen(
        [PYTHON, WEATHER, "http"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        port = _read_port(process)
        yield HttpServer(url=f"http://127.0.0.1:{port}/mcp", token=token, process=process)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()
