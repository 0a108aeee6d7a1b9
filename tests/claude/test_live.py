"""Against the real Claude Managed Agents service. Runs only with credentials."""

from __future__ import annotations

import os

import pytest

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents

from .conftest import WEATHER

pytestmark = [
    pytest.mark.live,
    pytest.mark.anyio,
    pytest.mark.skipif(
        not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_BEARER_TOKEN_FILE")),
        reason="needs ANTHROPIC_API_KEY or ANTHROPIC_BEARER_TOKEN_FILE",
    ),
]


async def test_live_tool_round_trip() -> None:
    provider = ClaudeManagedAgents()
    spec = ml.AgentSpec(
        name="managedloop_live",
        system_prompt="Call get_weather for the city, then answer in one sentence.",
        tools=list(WEATHER.tools),
        model=os.environ.get("CMA_LIVE_MODEL", "claude-haiku-4-5"),
    )
    handle = await ml.provision(provider, spec)
    try:
        live = ClaudeManagedAgents(agent=handle, environment=handle)
        result = await ml.run(live, agent=spec, prompt="Weather in Paris?", timeout=300)
        assert result.terminal is ml.Terminal.END_TURN
        assert any(u.name == "get_weather" for u in result.custom_tool_uses)
        await live.aclose()
    finally:
        await ml.teardown(provider, handle)
        await provider.aclose()
