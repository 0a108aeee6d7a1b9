"""Acceptance: one agent with an MCP-served tool and an ``@ml.tool`` runs on all three hosts
(emulated), over stdio and over streamable HTTP, and the stdio server process is gone
afterwards.

The emulators' default agent calls each declared tool once, with arguments made from the
tool's schema (the MCP server's own schema here), then answers; so what the model got back
for the MCP tool shows that the call went to the real server and came back.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

import managedloop as ml
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.testing import AgentCoreEmulator, ChatEmulator, ClaudeEmulator

pytestmark = pytest.mark.anyio

FORECAST = "Forecast for example: sunny for 1 day(s)"  # the server's answer to the made-up args


@ml.tool
def local_time(city: str) -> str:
    """Local time in a city."""
    return f"noon in {city}"


async def _http_tools(http: Any) -> ml.Toolset:
    return await ml.Toolset.from_mcp(
        url=http.url,
        headers={"Authorization": f"Bearer {http.token}"},
        tools=["get_forecast"],
    )


def _agent(mcp_tools: ml.Toolset) -> ml.AgentSpec:
    return ml.AgentSpec(name="mcp-agent", system_prompt="Use tools.", tools=[mcp_tools, local_time])


def _check(result: ml.SessionResult, results: list[ml.ToolResult]) -> None:
    assert result.terminal == ml.Terminal.END_TURN
    assert sorted(u.name for u in result.custom_tool_uses) == ["get_forecast", "local_time"]
    texts = sorted(r.text for r in results)
    assert texts == [FORECAST, "noon in example"]
    assert not any(r.is_error for r in results)


async def _on_local(agent: ml.AgentSpec) -> None:
    async with ChatEmulator() as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(provider, agent=agent, prompt="Weather and time in Paris?")
    assert [d.name for d in emu.requests[0].tools] == ["get_forecast", "local_time"]
    _check(result, emu.requests[1].tool_results)


async def _on_claude(agent: ml.AgentSpec) -> None:
    with ClaudeEmulator() as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            provider = ClaudeManagedAgents(client=client, reconnect_backoff=0.0)
            handle = await ml.provision(provider, agent)
            provider = ClaudeManagedAgents(client=client, agent=handle, environment=handle)
            result = await ml.run(provider, agent=agent, prompt="Weather and time in Paris?")
    _check(result, emu.agent.requests[1].tool_results)


async def _on_agentcore(agent: ml.AgentSpec) -> None:
    async with AgentCoreEmulator() as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            retry_backoff=0.0,
            **emu.client_kwargs,  # type: ignore[arg-type]
        )
        with provider:
            result = await ml.run(provider, agent=agent, prompt="Weather and time in Paris?")
    _check(result, emu.agent.requests[1].tool_results)


HOSTS = {"local": _on_local, "claude": _on_claude, "agentcore": _on_agentcore}


@pytest.mark.parametrize("host", list(HOSTS))
async def test_an_mcp_tool_over_stdio_and_a_python_tool_run_on_every_host(
    host: str, weather: Any
) -> None:
    agent = _agent(weather.only("get_forecast"))
    await HOSTS[host](agent)
    weather.pidfile.assert_all_gone()  # the session's own server


@pytest.mark.parametrize("host", list(HOSTS))
async def test_an_mcp_tool_over_http_and_a_python_tool_run_on_every_host(
    host: str, http_server: Any
) -> None:
    agent = _agent(await _http_tools(http_server))
    await HOSTS[host](agent)
