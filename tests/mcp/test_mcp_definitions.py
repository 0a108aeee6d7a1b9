"""What an MCP server declares becomes custom-tool definitions only when it is safe on every
host; the options of ``Toolset.from_mcp`` are checked; secrets never show; the extra is
optional and loaded lazily.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any

import pytest
from mcp_support import HOSTILE, PYTHON, WEATHER, Weather

import managedloop as ml
from managedloop import _mcp
from managedloop.handler import run_tool_calls
from managedloop.providers import Local
from managedloop.testing import ScriptedChatModel, call, say

pytestmark = pytest.mark.anyio

INFO = ml.SessionInfo(session_id="s1", provider="test")
BAD_NAMES = ["evil\x1b[2Jname", "files.read", "n" * 65]
BAD_OTHERWISE = ["control_description", "long_description", "deep_schema", "huge_schema"]


async def test_a_paged_listing_is_read_whole_filtered_and_prefixed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tools = await ml.Toolset.from_mcp(
        PYTHON, args=[HOSTILE, "all"], tools=["good", "last_good"], prefix="h_"
    )
    assert [d.name for d in tools.definitions()] == ["h_good", "h_last_good"]  # pages 1 and 3
    assert tools.get("h_good") is not None
    definition = tools.definitions()[1]
    assert definition.description == "A tool."
    assert definition.input_schema == {"type": "object", "properties": {"q": {"type": "string"}}}
    async with tools.lifespan() as live:
        (result,) = await run_tool_calls(
            live, [ml.ToolUse(id="1", name="h_last_good", input={"q": "hi"})], INFO
        )
    assert result.text == 'called last_good with {"q": "hi"}'  # the server's own name
    # The session's connection listed every page before calling: the SDK knows the tool
    # from page 3 (else it warns that it cannot check the tool's structured content).
    assert "not listed by server" not in caplog.text


async def test_a_hostile_listing_is_refused_with_a_named_error_that_forges_nothing() -> None:
    with pytest.raises(ml.ToolDefinitionError) as caught:
        await ml.Toolset.from_mcp(PYTHON, args=[HOSTILE, "all"])
    assert caught.value.code == "invalid_tool_definition"
    message = caught.value.message
    assert "\x1b" not in message  # the name is shown as a repr: no terminal escape gets out
    assert "'evil\\x1b[2Jname'" in message
    assert "not usable on every host" in message


async def test_every_hostile_definition_is_refused() -> None:
    server = _mcp.server_from(
        command=PYTHON,
        args=[HOSTILE, "all"],
        env=None,
        cwd=None,
        url=None,
        headers=None,
        connect_timeout=30.0,
        max_result_chars=100,
    )
    reasons: dict[str, str] = {}
    async with _mcp.connect(server) as connection:
        for name in [*BAD_NAMES, *BAD_OTHERWISE, "twice"]:
            with pytest.raises(ml.ToolDefinitionError) as caught:
                await connection.list_tools(include={name})
            reasons[name] = caught.value.message
        # A prefix counts towards the 64 characters every host allows.
        with pytest.raises(ml.ToolDefinitionError, match="prefix included"):
            await connection.list_tools("p" * 60 + "_", include={"good"})
        assert [t.name for t in await connection.list_tools(include={"good"})] == ["good"]
    for name in BAD_NAMES:
        assert "is not usable on every host" in reasons[name]
    assert "holds control characters" in reasons["control_description"]
    assert "longer than 8192 characters" in reasons["long_description"]
    assert "nested too deep" in reasons["deep_schema"]
    assert "longer than 65536 bytes" in reasons["huge_schema"]
    assert "lists tool 'twice' twice" in reasons["twice"]


async def test_tools_naming_a_tool_the_server_does_not_list_is_a_named_error() -> None:
    with pytest.raises(ml.ToolDefinitionError, match="lists no tool named 'missing'"):
        await ml.Toolset.from_mcp(PYTHON, args=[HOSTILE, "all"], tools=["good", "missing"])


async def test_a_listing_that_never_ends_is_a_named_error() -> None:
    with pytest.raises(ml.McpError) as caught:
        await ml.Toolset.from_mcp(PYTHON, args=[HOSTILE, "endless"])
    assert caught.value.code == "mcp_protocol"
    assert "did not end within 100 pages" in caught.value.message


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array"},
        {"properties": {}},
        {"type": "object", "properties": {"x": {"type": "number", "maximum": float("nan")}}},
        {"type": "object", "description": "\ud800"},
    ],
)
def test_schemas_that_are_not_strict_json_object_schemas_are_refused(schema: Any) -> None:
    class Listed:
        name = "tool"
        description = "A tool."
        input_schema = schema

    with pytest.raises(ml.ToolDefinitionError, match="input schema of tool 'tool'"):
        _mcp.check_tool(Listed(), "", _server())


def _server(**overrides: Any) -> _mcp.Server:
    options: dict[str, Any] = {
        "command": PYTHON,
        "args": [],
        "env": None,
        "cwd": None,
        "url": None,
        "headers": None,
        "connect_timeout": 30.0,
        "max_result_chars": 100,
        **overrides,
    }
    return _mcp.server_from(**options)


def test_mcp_tools_mix_with_python_tools_and_a_clash_is_a_named_error(weather: Weather) -> None:
    @ml.tool
    def local_time(city: str) -> str:
        """Local time."""
        return city

    @ml.tool
    def get_forecast(city: str) -> str:
        """A Python tool with an MCP tool's name."""
        return city

    forecast = weather.only("get_forecast")
    agent = ml.AgentSpec(name="mixed", tools=[forecast, local_time])
    assert [d.name for d in agent.tool_definitions()] == ["get_forecast", "local_time"]
    assert agent.tool_definitions()[0] == forecast.definitions()[0]  # the server's schema
    assert set(ml.Toolset([forecast, local_time])) == {*forecast, local_time}
    for make in (
        lambda: ml.AgentSpec(name="clash", tools=[forecast, get_forecast]),
        lambda: ml.Toolset([get_forecast, forecast]),
    ):
        with pytest.raises(ml.ToolDefinitionError, match="prefix=") as caught:
            make()
        assert caught.value.code == "invalid_tool_definition"
        assert "duplicate tool name 'get_forecast'" in caught.value.message


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({}, "exactly one of command"),
        ({"command": "x", "url": "http://127.0.0.1/mcp"}, "exactly one of command"),
        ({"command": " "}, "command= must be a non-empty string"),
        ({"command": "x", "args": "--flag"}, "args= must be a sequence of strings"),
        ({"command": "x", "env": {"A": 1}}, "env= must map strings to strings"),
        ({"command": "x", "headers": {"A": "b"}}, "headers= are for url= servers"),
        ({"url": "http://127.0.0.1/mcp", "env": {"A": "b"}}, "env= is for command= servers"),
        ({"url": "ftp://127.0.0.1/mcp"}, "must be an http"),
        ({"command": "x", "prefix": "a b"}, "prefix must be"),
        ({"command": "x", "prefix": "p" * 64}, "prefix must be"),
        ({"command": "x", "tools": "get_forecast"}, "tools= must be a collection"),
        ({"command": "x", "timeout": float("nan")}, "timeout must be a finite"),
        ({"command": "x", "timeout": 0}, "timeout must be a finite"),
        ({"command": "x", "timeout": True}, "timeout must be a finite"),
        ({"command": "x", "connect_timeout": float("inf")}, "connect_timeout must be a finite"),
        ({"command": "x", "max_result_chars": 0}, "max_result_chars must be an integer"),
    ],
)
async def test_bad_options_are_named_errors_before_anything_starts(
    options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ml.ToolDefinitionError, match=match):
        await ml.Toolset.from_mcp(**options)


async def test_a_command_that_does_not_exist_is_a_named_error() -> None:
    with pytest.raises(ml.McpError) as caught:
        await ml.Toolset.from_mcp("/nonexistent/mcp-server", env={"TOKEN": "s3cr3t-env"})
    assert caught.value.code == "mcp_unavailable"
    assert "'mcp-server'" in caught.value.message
    assert "s3cr3t-env" not in repr(caught.value)


async def test_from_mcp_sync_refuses_to_run_inside_an_event_loop() -> None:
    with pytest.raises(ml.ManagedLoopError) as caught:
        ml.Toolset.from_mcp_sync(PYTHON, args=[WEATHER])
    assert caught.value.code == "sync_in_event_loop"


# -- secrets ----------------------------------------------------------------------------------

SECRET = "s3cr3t-" + "9f2c" * 4


async def test_a_stdio_servers_env_reaches_it_and_is_never_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    tools = await ml.Toolset.from_mcp(
        PYTHON, args=[WEATHER, "--api-key-in-env"], env={"MCP_TEST_TOKEN": SECRET}
    )
    model = ScriptedChatModel([call("whoami"), call("refuse", {"reason": "r"}), say("done")])
    result = await ml.run(Local(model="m", chat=model), agent=ml.AgentSpec(tools=[tools]))
    assert model.requests[1].tool_results[0].text == "token: present"
    shown = [repr(tools), repr(tools.get("whoami")), str(result), caplog.text]
    assert not [s for s in shown if SECRET in s]
    assert "--api-key-in-env" not in repr(tools.get("whoami"))  # arguments are not shown


async def test_http_headers_reach_the_server_and_are_never_shown(
    http_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    good = {"Authorization": f"Bearer {http_server.token}"}
    tools = await ml.Toolset.from_mcp(url=http_server.url, headers=good, tools=["whoami"])
    async with tools.lifespan() as live:
        (result,) = await run_tool_calls(live, [ml.ToolUse(id="1", name="whoami", input={})], INFO)
    assert not result.is_error  # the server checks the bearer token on every request
    with pytest.raises(ml.McpError) as caught:
        await ml.Toolset.from_mcp(
            url=http_server.url, headers={"Authorization": f"Bearer {SECRET}"}
        )
    assert caught.value.code == "mcp_unavailable"
    shown = [repr(tools), repr(tools.get("whoami")), repr(caught.value), caplog.text]
    assert not [s for s in shown if SECRET in s or http_server.token in s]


def test_a_url_is_shown_without_userinfo_or_query() -> None:
    server = _server(command=None, url="https://user:pw@mcp.example/mcp?key=abc#frag")
    assert server.label == "HTTP server https://***@mcp.example/mcp"
    assert repr(server) == "McpServer(HTTP server https://***@mcp.example/mcp)"


# -- the optional extra -----------------------------------------------------------------------


async def test_without_the_extra_from_mcp_names_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(ml.ConfigError) as caught:
        await ml.Toolset.from_mcp(PYTHON, args=[WEATHER])
    assert caught.value.code == "missing_dependency"
    assert "pip install 'managedloop[mcp]'" in caught.value.message


def test_importing_managedloop_does_not_import_the_mcp_sdk() -> None:
    code = "import sys, managedloop; print('mcp' in sys.modules)"
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
