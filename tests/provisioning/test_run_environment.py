"""``ml.run(provider, agent=handle, environment=env_handle)``: handles pass straight into a
run (issue 10: "pass straight into ml.run as agent= / environment="). Claude uses the
environment over the provider's own; the hosts without environments refuse it before any
request; a spec or a wrong type is refused before anything is opened."""

from __future__ import annotations

from typing import Any

import pytest

import managedloop as ml
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.stores import MemoryStore
from managedloop.testing import AgentCoreEmulator, ChatEmulator, ClaudeEmulator

pytestmark = pytest.mark.anyio

SPEC = ml.AgentSpec(name="runner", system_prompt="Answer.")


async def test_claude_runs_on_the_environment_handle_given_to_run() -> None:
    store = MemoryStore()
    with ClaudeEmulator() as emu:
        provider = ClaudeManagedAgents(api_key=emu.api_key, base_url=emu.base_url)
        env = await ml.ensure_environment(provider, {"type": "cloud"}, name="e1", store=store)
        other = await ml.ensure_environment(
            provider,
            {"type": "cloud", "networking": {"type": "unrestricted"}},
            name="e2",
            store=store,
        )
        agent = await ml.ensure_agent(provider, SPEC, store=store)
        # The provider names one environment; run(environment=...) wins over it.
        runner = ClaudeManagedAgents(api_key=emu.api_key, base_url=emu.base_url, environment=other)
        result = await ml.run(runner, agent=agent, environment=env, prompt="hi")
        again = await ml.run(runner, agent=agent, environment=env.to_dict(), prompt="hi")
        fallback = await ml.run(runner, agent=agent, prompt="hi")
        creates = [r.json for r in emu.requests if r.method == "POST" and r.path == "/v1/sessions"]
    assert result.terminal == again.terminal == fallback.terminal == ml.Terminal.END_TURN
    assert [c["environment_id"] for c in creates] == [
        env.environment_id,
        env.environment_id,
        other.environment_id,
    ]


@pytest.mark.parametrize(
    "bad", [ml.EnvironmentSpec(config={"type": "cloud"}), 12, "", ["env_1"]], ids=repr
)
async def test_a_bad_environment_is_refused_before_anything_opens(bad: Any) -> None:
    with ClaudeEmulator() as emu:
        provider = ClaudeManagedAgents(api_key=emu.api_key, base_url=emu.base_url)
        with pytest.raises(ml.InvalidOptionsError) as info:
            await ml.run(provider, agent="agent_x", environment=bad, prompt="hi")
        assert emu.requests == []
    assert info.value.context["option"] == "environment"


async def test_hosts_without_environments_refuse_one() -> None:
    with ChatEmulator() as chat:
        local = Local(model="m", base_url=chat.base_url, api_key=chat.api_key)
        with pytest.raises(ml.InvalidOptionsError) as info:
            await ml.run(local, agent=SPEC, environment="env_1", prompt="hi")
        assert chat.received == []
    assert info.value.context["option"] == "environment"
    with AgentCoreEmulator() as core:
        provider = BedrockAgentCore(harness_arn=core.harness_arn, **core.client_kwargs)  # type: ignore[arg-type]
        before = len(core.requests)
        with pytest.raises(ml.InvalidOptionsError) as info:
            await ml.run(provider, agent=SPEC, environment="env_1", prompt="hi")
        assert len(core.requests) == before
    assert info.value.context["option"] == "environment"
