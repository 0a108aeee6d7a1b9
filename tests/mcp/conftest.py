"""Real MCP servers for the tests, started by them: the scripts beside this file.

``weather_server.py`` (the SDK's ``MCPServer``) runs over stdio as a subprocess of the client
under test, or over streamable HTTP (uvicorn on 127.0.0.1, a free port) as a subprocess this
module starts and stops; every wait here is bounded.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp_support import PYTHON, START_TIMEOUT, WEATHER, Pidfile, Weather

import managedloop as ml


@pytest.fixture
def pidfile(tmp_path: Path) -> Pidfile:
    return Pidfile(tmp_path / "pids")


@pytest.fixture(scope="module")
def weather_tools(tmp_path_factory: pytest.TempPathFactory) -> Weather:
    where = tmp_path_factory.mktemp("weather")
    pidfile = Pidfile(where / "pids")
    refuse = where / "refuse-start"
    env = {**pidfile.env, "MCP_TEST_REFUSE_START": str(refuse)}
    tools = ml.Toolset.from_mcp_sync(PYTHON, args=[WEATHER], env=env)
    pidfile.assert_all_gone()  # the listing's own server
    return Weather(tools, pidfile, refuse)


@pytest.fixture
def weather(weather_tools: Weather) -> Iterator[Weather]:
    weather_tools.pidfile.mark()
    yield weather_tools
    weather_tools.refuse_start.unlink(missing_ok=True)


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


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpServer]:
    """The weather server over streamable HTTP, with a bearer token it checks."""
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
