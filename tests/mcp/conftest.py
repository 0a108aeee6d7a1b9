"""Real MCP servers for the tests, started by them: the scripts beside this file.

``weather_server.py`` (the SDK's ``MCPServer``) runs over stdio as a subprocess of the client
under test, or over streamable HTTP (uvicorn on 127.0.0.1, a free port) as a subprocess this
module starts and stops; every wait here is bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_support import PYTHON, WEATHER, HttpServer, Pidfile, Weather, serve_http

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


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpServer]:
    """The weather server over streamable HTTP, with a bearer token it checks."""
    with serve_http() as server:
        yield server
