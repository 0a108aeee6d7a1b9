"""Fixtures for the Claude Managed Agents host: an emulator, a real SDK client, a provider."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import pytest

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.testing import ClaudeEmulator


@ml.tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


@ml.tool
def get_time(city: str) -> str:
    """Local time in a city."""
    return f"Noon in {city}"


WEATHER = ml.AgentSpec(name="weather", system_prompt="Use tools.", tools=[get_weather])


@pytest.fixture
def emu() -> Iterator[ClaudeEmulator]:
    with ClaudeEmulator() as e:
        yield e


@pytest.fixture
async def client(emu: ClaudeEmulator) -> AsyncIterator[anthropic.AsyncAnthropic]:
    c = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key, max_retries=2)
    async with c:
        yield c


def make_provider(client: anthropic.AsyncAnthropic, **kwargs: Any) -> ClaudeManagedAgents:
    kwargs.setdefault("reconnect_backoff", 0.0)
    return ClaudeManagedAgents(client=client, **kwargs)


async def provisioned(
    client: anthropic.AsyncAnthropic, spec: ml.AgentSpec = WEATHER, **kwargs: Any
) -> ClaudeManagedAgents:
    """A provider bound to a freshly provisioned agent + environment for ``spec``."""
    handle = await ml.provision(make_provider(client), spec)
    return make_provider(client, agent=handle, environment=handle, **kwargs)


def wire_results(emu: ClaudeEmulator, session_id: str | None = None) -> list[str]:
    """custom_tool_use_ids of every tool result POSTed (all attempts)."""
    return [
        e["custom_tool_use_id"]
        for e in emu.sent_events(session_id)
        if e["type"] == "user.custom_tool_result"
    ]


def wire_messages(emu: ClaudeEmulator, session_id: str | None = None) -> list[str]:
    return [
        e["content"][0]["text"] for e in emu.sent_events(session_id) if e["type"] == "user.message"
    ]
