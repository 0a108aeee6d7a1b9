"""Fixtures for the Claude Managed Agents host: an emulator, a real SDK client, a provider."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

import claude_fixtures
import managedloop as ml
from claude_fixtures import make_provider
from managedloop.providers import ClaudeManagedAgents
from managedloop.testing import ClaudeEmulator
from weather import get_weather

# The shared Claude fixtures (tests/claude_fixtures.py), served to this folder.
client = claude_fixtures.client
emu = claude_fixtures.emu


WEATHER = ml.AgentSpec(name="weather", system_prompt="Use tools.", tools=[get_weather])


@pytest.fixture
def sdk_max_retries() -> int:
    return 2  # the host tests let the SDK retry, as a user's client would


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
