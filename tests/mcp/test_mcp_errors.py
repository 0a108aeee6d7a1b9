"""What the model sees when an MCP server fails: every call answered with an error result,
on time, and the session's other calls unharmed.

``isError`` results, a server's own input validation, a server that crashes mid-call, one
that never answers (bounded by the session's ``tool_timeout`` and by ``from_mcp(timeout=)``),
a reply that is not a ``CallToolResult``, a line that is not JSON, a JSON-RPC error with a
huge message; and how non-text content, structured content and long results are rendered.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import mcp.types as mt
import pytest
from mcp_support import PYTHON, RAW, WEATHER, Weather, serve_http

import managedloop as ml
from managedloop import _mcp
from managedloop.handler import run_tool_calls

pytestmark = pytest.mark.anyio

INFO = ml.SessionInfo(session_id="s1", provider="test")


def use(name: str, uid: str, **input: object) -> ml.ToolUse:
    return ml.ToolUse(id=uid, name=name, input=dict(input))


async def test_errors_of_one_session_are_results_and_the_session_stays_usable(
    weather: Weather,
) -> None:
    async with weather.tools.lifespan() as live:
        first = await run_tool_calls(
            live,
            [
                use("refuse", "1", reason="no"),  # the tool's own error: isError
                use("add", "2", a="not a number", b=1),  # the server's input validation
                use("get_forecast", "3", city="Paris"),
                use("nope", "4"),  # not a tool of this toolset: never sent
            ],
            INFO,
        )
        # A call that never answers is bounded by the session's tool_timeout (any value:
        # the server never answers) ...
        (hung,) = await run_tool_calls(live, [use("hang", "5")], INFO, timeout=0.5)
        # ... and the connection still serves the next call.
        (after,) = await run_tool_calls(live, [use("add", "6", a=2, b=3)], INFO)
    refused, invalid, forecast, unknown = first
    assert refused.is_error
    assert "refused: no" in refused.text
    assert invalid.is_error
    assert "validation error" in invalid.text
    assert not forecast.is_error
    assert forecast.text == "Forecast for Paris: sunny for 1 day(s)"
    assert unknown.is_error
    assert "unknown tool 'nope'" in unknown.text
    assert hung.is_error
    assert hung.text == "tool 'hang' timed out after 0.5s"
    assert not after.is_error
    assert after.text == "5"
    weather.pidfile.assert_all_gone()


async def test_a_server_that_crashes_mid_call_answers_that_call_and_every_later_one(
    weather: Weather,
) -> None:
    async with weather.tools.lifespan() as live:
        (crashed,) = await run_tool_calls(live, [use("crash", "1")], INFO)
        (later,) = await run_tool_calls(live, [use("get_forecast", "2", city="Rome")], INFO)
    assert crashed.is_error
    assert crashed.text.startswith("MCP stdio server 'python' failed the call to 'crash': ")
    assert "Connection closed" in crashed.text
    assert later.is_error
    assert "failed the call to 'get_forecast'" in later.text
    weather.pidfile.assert_all_gone()


async def test_non_text_content_is_a_placeholder_and_resources_give_their_text(
    weather: Weather,
) -> None:
    async with weather.tools.lifespan() as live:
        (picture,) = await run_tool_calls(live, [use("picture", "1")], INFO)
    assert not picture.is_error
    assert picture.text == (
        "a picture:\n[image content: image/png, 8 base64 characters, not shown]\nthe notes"
    )


async def test_a_tool_that_is_not_connected_answers_with_an_error(weather: Weather) -> None:
    (result,) = await run_tool_calls(weather.tools, [use("get_forecast", "1", city="x")], INFO)
    assert result.is_error
    assert "is not connected" in result.text
    assert weather.pidfile.new() == []  # nothing was started for it


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("malformed", "failed the call to 'echo': its reply did not match the MCP schema"),
        ("garbage", "tool 'echo' timed out after 0.5s"),  # a reply that never parses
        ("rpc_error", "failed the call to 'echo': MCP error -32000: " + "E" * 1000 + "..."),
    ],
)
async def test_protocol_failures_are_error_results(mode: str, expected: str) -> None:
    tools = await ml.Toolset.from_mcp(PYTHON, args=[RAW, mode], timeout=0.5)
    async with tools.lifespan() as live:
        (result,) = await run_tool_calls(live, [use("echo", "1", q="x")], INFO)
    assert result.is_error
    assert result.text.endswith(expected)


async def test_an_http_server_that_dies_mid_call_answers_that_call_and_every_later_one() -> None:
    # Its own server: this one is killed. Over HTTP the SDK's transport task fails; that
    # must not cancel the session, only answer the calls.
    with serve_http() as http:
        headers = {"Authorization": f"Bearer {http.token}"}
        tools = await ml.Toolset.from_mcp(url=http.url, headers=headers, tools=["crash", "add"])
        async with tools.lifespan() as live:
            (crashed,) = await run_tool_calls(live, [use("crash", "1")], INFO)
            (later,) = await run_tool_calls(live, [use("add", "2", a=1, b=2)], INFO)
        assert http.process.wait(10) == 3  # the server is gone: it exited mid-call
    assert crashed.is_error
    assert "failed the call to 'crash'" in crashed.text
    assert later.is_error
    assert "'add'" in later.text


async def test_a_listing_that_does_not_validate_is_a_named_error() -> None:
    with pytest.raises(ml.McpError) as caught:
        await ml.Toolset.from_mcp(PYTHON, args=[RAW, "array_schema"])
    assert caught.value.code == "mcp_protocol"
    assert "tools/list failed" in caught.value.message


# -- rendering, on the SDK's own result type --------------------------------------------------


def test_structured_content_alone_is_rendered_as_json() -> None:
    result = mt.CallToolResult(content=[], structured_content={"temp": 21, "city": "Paris"})
    assert _mcp.render(result, 1000) == ('{"temp": 21, "city": "Paris"}', False)


def test_structured_content_with_a_text_block_shows_the_text_only() -> None:
    result = mt.CallToolResult(
        content=[mt.TextContent(type="text", text="21 degrees")], structured_content={"t": 21}
    )
    assert _mcp.render(result, 1000) == ("21 degrees", False)


WAV = "audio/wav"


def test_binary_content_and_links_are_placeholders() -> None:
    blob = mt.BlobResourceContents(uri="file:///a.bin", blob="AAAA", mime_type="application/x")
    result = mt.CallToolResult(
        content=[
            mt.AudioContent(
                type="audio", data=base64.b64encode(b"RIFF").decode(), mime_type="audio/wav"
            ),
            mt.EmbeddedResource(type="resource", resource=blob),
            mt.ResourceLink(type="resource_link", name="report", uri="file:///report.pdf"),
        ],
        is_error=True,
    )
    text, is_error = _mcp.render(result, 1000)
    assert is_error
    assert text.splitlines() == [
        "[audio content: audio/wav, 8 base64 characters, not shown]",
        "[binary resource file:///a.bin: application/x, not shown]",
        "[resource link: report file:///report.pdf]",
    ]


def test_long_results_are_cut_with_a_note() -> None:
    result = mt.CallToolResult(content=[mt.TextContent(type="text", text="x" * 500)])
    text, _ = _mcp.render(result, 100)
    assert text == "x" * 100 + "\n[result cut: 500 characters, the first 100 shown]"


async def test_max_result_chars_caps_a_real_servers_result() -> None:
    tools = await ml.Toolset.from_mcp(PYTHON, args=[WEATHER], tools=["flood"], max_result_chars=50)
    async with tools.lifespan() as live:
        (result,) = await run_tool_calls(live, [use("flood", "1", size=5000)], INFO)
    assert result.text.startswith("\x07\x1b[2J")  # control characters are text like any other
    assert result.text.endswith("\n[result cut: 5000 characters, the first 50 shown]")
    assert len(result.text) < 200


class _RecordingClient:
    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    async def call_tool(self, name: str, arguments: dict[str, object], **kw: Any) -> Any:
        self.timeouts.append(kw["read_timeout_seconds"])
        return mt.CallToolResult(content=[mt.TextContent(type="text", text="ok")])


async def test_a_call_without_a_timeout_is_not_bounded_by_the_connect_timeout() -> None:
    server = _mcp.server_from(
        command=PYTHON,
        args=[],
        env=None,
        cwd=None,
        url=None,
        headers=None,
        connect_timeout=5.0,
        max_result_chars=100,
    )
    client = _RecordingClient()
    connection = _mcp.Connection(server, client)
    assert await connection.call("t", {}, None) == ("ok", False)
    assert await connection.call("t", {}, 7.0) == ("ok", False)
    assert client.timeouts == [math.inf, 7.0]  # None would mean the SDK's 5 s read timeout
