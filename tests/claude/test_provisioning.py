"""Provisioning: create-or-reuse agent + environment, rollback, teardown, handles.

Reference §9 lines covered here:

* ``providers/claude_managed_agents_test``: provision creates the agent (model, system,
  tools) and environment and returns both ids; a nameless spec -> invalid_agent_spec;
  the environment body comes from ``environment=``; a bad environment ->
  invalid_environment_spec before any request; teardown archives both; environment
  failure rolls the agent back; teardown attempts both sides and reports each;
  normalize_model_id and the bare model id on the wire.
* ``conformance cma_outbound``: model qualifier stripped; the environment body
  ``{name: <name>_env, config: {type: cloud, networking: unrestricted}}``. *Changed on
  purpose:* the agent is named ``<spec.name>_<digest8>`` with the digest in metadata
  (reference §11.10: the spec name is kept), so the golden agent body differs.
* ``provisioning_test`` / ``provisioner_test``: miss provisions once, hit serves the
  cache; a changed spec or environment re-provisions, an env differing only by name
  shares; a failed provision is not cached; teardown evicts, a failing teardown does
  not. *Changed:* the cache is keyed per endpoint and credential (two providers of one
  account share handles; two accounts never do) rather than per provider module.
  *Not ported:* coercing a bare spec map (the API is typed: ``ml.AgentSpec``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.providers.claude import ClaudeHandle, normalize_model_id
from managedloop.testing import ClaudeEmulator

from .conftest import WEATHER, make_provider

pytestmark = pytest.mark.anyio


async def test_provision_creates_agent_and_environment(emu: ClaudeEmulator, client: Any) -> None:
    spec = ml.AgentSpec(
        name="billing",
        system_prompt="Be brief.",
        tools=list(WEATHER.tools),
        model="anthropic:claude-haiku-4-5",
    )
    handle = await ml.provision(make_provider(client), spec)
    assert isinstance(handle, ClaudeHandle)
    agent_req = next(r for r in emu.requests if r.path == "/v1/agents")
    env_req = next(r for r in emu.requests if r.path == "/v1/environments")
    assert agent_req.json["name"] == f"billing_{spec.digest[:8]}" == handle.name
    assert agent_req.json["model"] == "claude-haiku-4-5"  # provider qualifier stripped
    assert agent_req.json["system"] == "Be brief."
    assert agent_req.json["tools"] == [
        {
            "type": "custom",
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": WEATHER.tools[0].definition.input_schema,
        }
    ]
    assert env_req.json == {
        "name": f"billing_{spec.digest[:8]}_env",
        "config": {"type": "cloud", "networking": {"type": "unrestricted"}},
    }
    assert handle.agent_id in emu.state.agents
    assert handle.environment_id in emu.state.environments
    assert ClaudeHandle.from_dict(json.loads(json.dumps(handle.to_dict()))) == handle


async def test_provision_is_cached_per_provider_and_spec(emu: ClaudeEmulator, client: Any) -> None:
    provider = make_provider(client)
    a = await ml.provision(provider, WEATHER)
    b = await ml.provision(provider, WEATHER)
    assert a == b
    assert len(emu.state.agents) == 1
    env = ml.EnvironmentSpec(name="img", config={"type": "cloud", "packages": {"pip": ["x"]}})
    c = await ml.provision(provider, WEATHER, environment=env)
    assert c != a
    assert len(emu.state.environments) == 2
    env_req = [r for r in emu.requests if r.path == "/v1/environments"][-1]
    assert env_req.json == {"name": "img", "config": env.config}


def test_provision_sync_twin() -> None:
    """Each ``*_sync`` call runs on its own loop: the provider builds (and closes) a client
    per loop, so one provider serves both calls."""
    with ClaudeEmulator() as emu:
        provider = ClaudeManagedAgents(
            api_key=emu.api_key, bearer_token_file=None, base_url=emu.base_url
        )
        handle = ml.provision_sync(provider, WEATHER)
        report = ml.teardown_sync(provider, handle)
        assert report == {"agent": "ok", "environment": "ok"}
        assert emu.state.agents[handle.agent_id]["archived_at"]


async def test_nameless_spec_is_rejected(emu: ClaudeEmulator, client: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.provision(make_provider(client), ml.AgentSpec(tools=list(WEATHER.tools)))
    assert info.value.code == "invalid_agent_spec"
    assert emu.requests == []


async def test_unknown_keywords_are_refused_before_any_request(
    emu: ClaudeEmulator, client: Any
) -> None:
    """The same refusal as every other keyword check (AgentCore's provision included):
    the unknown name, what is accepted, and no request."""
    provider = make_provider(client)
    with pytest.raises(ml.InvalidOptionsError) as info:
        await provider.provision(WEATHER, bogus=1)
    assert (info.value.code, info.value.context["option"]) == ("invalid_opts", "bogus")
    assert "accepted: environment, name" in str(info.value)
    with pytest.raises(ml.InvalidOptionsError) as info:
        await provider.teardown({"agent_id": "agent_x"}, purge=True)
    assert (info.value.code, info.value.context["option"]) == ("invalid_opts", "purge")
    assert emu.requests == []


async def test_environment_failure_rolls_the_agent_back(emu: ClaudeEmulator, client: Any) -> None:
    emu.faults.server_errors = 10
    emu.faults.fault_path = "/v1/environments"
    with pytest.raises(ml.ProvisioningError) as info:
        await ml.provision(make_provider(client), WEATHER)
    assert info.value.code == "create_environment_failed"
    assert info.value.context["rollback"] == "ok"
    (agent,) = emu.state.agents.values()
    assert agent["archived_at"] is not None
    # a failed provision is not cached: the next call provisions again
    emu.faults.server_errors = 0
    handle = await ml.provision(make_provider(client), WEATHER)
    assert handle.agent_id != agent["id"]


async def test_teardown_archives_both_and_evicts(emu: ClaudeEmulator, client: Any) -> None:
    provider = make_provider(client)
    handle = await ml.provision(provider, WEATHER)
    report = await ml.teardown(provider, handle)
    assert report == {"agent": "ok", "environment": "ok"}
    assert emu.state.agents[handle.agent_id]["archived_at"]
    assert emu.state.environments[handle.environment_id]["archived_at"]
    again = await ml.provision(provider, WEATHER)
    assert again.agent_id != handle.agent_id


async def test_teardown_reports_each_side(emu: ClaudeEmulator, client: Any) -> None:
    provider = make_provider(client)
    handle = await ml.provision(provider, WEATHER)
    del emu.state.agents[handle.agent_id]  # the agent side will 404
    with pytest.raises(ml.ProvisioningError) as info:
        await ml.teardown(provider, handle.to_dict())
    assert info.value.code == "teardown_failed"
    assert info.value.context["agent"] == "http_error:404"
    assert info.value.context["environment"] == "ok"  # still attempted
    # not evicted: the cached handle keeps being served
    assert await ml.provision(provider, WEATHER) == handle


async def test_existing_environment_id_is_reused_not_archived(
    emu: ClaudeEmulator, client: Any
) -> None:
    env = await client.beta.environments.create(name="shared")
    provider = make_provider(client)
    handle = await ml.provision(provider, WEATHER, environment=env.id)
    assert handle.environment_id == env.id
    assert handle.owns_environment is False
    report = await ml.teardown(provider, handle)
    assert report == {"agent": "ok", "environment": "skipped"}
    assert emu.state.environments[env.id]["archived_at"] is None


def test_normalize_model_id() -> None:
    assert normalize_model_id("anthropic:claude-sonnet-4-6") == "claude-sonnet-4-6"
    assert normalize_model_id("claude-haiku-4-5") == "claude-haiku-4-5"


async def test_cache_is_per_account_not_per_endpoint(
    emu: ClaudeEmulator, client: Any, tmp_path: Any
) -> None:
    """Two credentials on one endpoint are two accounts: they never share a handle. Two
    providers with the same credential share one (and the key is only fingerprinted)."""
    path = tmp_path / "token.json"
    path.write_text(json.dumps({"access_token": "tok-b", "expires_at": 4_000_000_000}))
    emu.bearer_tokens.add("tok-b")
    a = make_provider(client)
    a2 = make_provider(client)
    b = ClaudeManagedAgents(bearer_token_file=str(path), base_url=emu.base_url)
    ha = await ml.provision(a, WEATHER)
    assert await ml.provision(a2, WEATHER) == ha
    hb = await ml.provision(b, WEATHER)
    assert hb.agent_id != ha.agent_id
    assert len(emu.state.agents) == 2
    assert emu.api_key not in repr(a.cache_identity())
    assert "tok-b" not in repr(b.cache_identity())


async def test_invalid_environment_is_rejected_before_any_request(
    emu: ClaudeEmulator, client: Any
) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.provision(make_provider(client), WEATHER, environment=42)
    assert info.value.code == "invalid_environment_spec"
    assert emu.requests == []
