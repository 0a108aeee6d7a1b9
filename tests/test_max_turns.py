"""``max_turns=N`` bounds the model calls of a request on every host (issue 8 item 2).

Each host's emulator counts the model calls it played (``emu.requests`` / ``emu.agent
.requests``: one :class:`~managedloop.testing.ModelRequest` per scripted step), so the bound
is checked where the calls arrive, not by the loop's own count.
"""

from __future__ import annotations

import anthropic
import pytest

import managedloop as ml
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.testing import AgentCoreEmulator, ChatEmulator, ClaudeEmulator, call
from weather import get_weather

pytestmark = pytest.mark.anyio


AGENT = ml.AgentSpec(name="bounded", system_prompt="Use tools.", tools=[get_weather])
BOUNDS = [1, 2, 4]


def endless(distinct: bool = True) -> list[ml.testing.Reply]:
    """A model that never stops calling the tool (with new arguments, or the same ones)."""
    return [call("get_weather", {"city": str(i) if distinct else "Paris"}) for i in range(20)]


def check(result: ml.SessionResult, calls: int, n: int) -> None:
    assert calls <= n
    assert result.turns == calls == n
    assert result.terminal is ml.Terminal.TERMINATED
    assert result.reason == "max_turns"
    assert len(result.custom_tool_uses) <= n - 1  # the last turn's calls never ran


@pytest.mark.parametrize("n", BOUNDS)
@pytest.mark.parametrize("distinct", [True, False])
@pytest.mark.parametrize("stream", [False, True])
async def test_local(n: int, distinct: bool, stream: bool) -> None:
    with ChatEmulator(endless(distinct)) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=stream)
        result = await ml.run(provider, agent=AGENT, prompt="go", max_turns=n)
        assert len(emu.received) == len(emu.requests)  # no failed or retried call
    check(result, len(emu.requests), n)
    finals = [e for e in result.events if e.get("role") == "final_turn"]
    assert len(finals) == 1  # tools are offered: the directive goes out once
    if not distinct and n > 1:  # only the first call ran; the guard answered the repeats
        assert len(result.custom_tool_uses) == 1


@pytest.mark.parametrize("n", BOUNDS)
async def test_claude(n: int) -> None:
    with ClaudeEmulator(endless()) as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            handle = await ml.provision(ClaudeManagedAgents(client=client), AGENT)
            provider = ClaudeManagedAgents(client=client, agent=handle, environment=handle)
            result = await ml.run(provider, agent=AGENT, prompt="go", max_turns=n, timeout=20)
    check(result, len(emu.agent.requests), n)


@pytest.mark.parametrize("n", BOUNDS)
async def test_agentcore(n: int) -> None:
    with AgentCoreEmulator(endless()) as emu:
        with BedrockAgentCore(harness_arn=emu.harness_arn, **emu.client_kwargs) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="go", max_turns=n)
        invokes = len(emu.operations("InvokeHarness"))
    check(result, len(emu.agent.requests), n)
    assert invokes == n
