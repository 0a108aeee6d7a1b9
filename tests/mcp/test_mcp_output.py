"""``output=`` composes with an MCP toolset: the MCP tool runs on the real server first,
the output tool is never sent to it, and the session returns the typed instance."""

from __future__ import annotations

import pydantic
import pytest
from mcp_support import Weather

import managedloop as ml
from managedloop.providers import Local
from managedloop.testing import ChatEmulator, ToolCall, calls

pytestmark = pytest.mark.anyio


class Answer(pydantic.BaseModel):
    summary: str


async def test_an_mcp_tool_and_the_output_tool_in_one_turn(weather: Weather) -> None:
    agent = ml.AgentSpec(name="mcp-output", tools=[weather.tools])
    script = [
        calls(
            ToolCall(name="final_result", input={"summary": "sunny"}),
            ToolCall(name="get_forecast", input={"city": "Paris", "days": 1}),
        )
    ]
    with ChatEmulator(script) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(provider, agent=agent, prompt="x", output=Answer)
    assert result.output == Answer(summary="sunny")
    assert [u.name for u in result.custom_tool_uses] == ["get_forecast"]
    assert "final_result" in [t.name for t in emu.requests[0].tools]
    weather.pidfile.assert_all_gone()  # the session's server process ended with it
