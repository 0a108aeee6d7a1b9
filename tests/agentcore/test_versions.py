"""Versions, endpoints and runtime sessions: UpdateHarness on a changed spec (same base
name), endpoints created and moved by provisioning when asked, StopRuntimeSession.

The judge is botocore: every call is serialized (and its parameters validated) by the
real client, and the emulator's answers are checked against the output shapes in
``test_shapes.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

import managedloop as ml
from managedloop.providers import BedrockAgentCore
from managedloop.stores import MemoryStore
from managedloop.testing import AgentCoreEmulator, say

from .conftest import make_provider

pytestmark = pytest.mark.anyio

V1 = ml.AgentSpec(name="versioned", system_prompt="Be brief.")
V2 = ml.AgentSpec(name="versioned", system_prompt="Be very brief.", timeout_seconds=60)


async def _provision(
    emu: AgentCoreEmulator, provider: BedrockAgentCore, spec: ml.AgentSpec, **kw: Any
) -> Any:
    return await provider.provision(
        spec, execution_role_arn=emu.execution_role_arn, timeout=5, update=True, **kw
    )


async def test_a_changed_spec_is_a_new_version_not_a_new_harness(emu: AgentCoreEmulator) -> None:
    with make_provider(emu) as provider:
        first = await _provision(emu, provider, V1)
        assert first.harness_name == "versioned"  # the base name alone: no digest suffix
        same = await _provision(emu, provider, V1)
        assert emu.operations("UpdateHarness") == []  # unchanged: adopted as it is
        second = await _provision(emu, provider, V2)
        versions = await provider.harness_versions(second)
    assert len(emu.operations("CreateHarness")) == 1
    (update,) = emu.operations("UpdateHarness")
    assert update.body["systemPrompt"] == [{"text": "Be very brief."}]
    assert update.body["timeoutSeconds"] == 60
    assert update.body["memory"] == {}  # unset members reset, not merged
    assert same.harness_id == first.harness_id == second.harness_id
    assert second.harness_version == "2"
    assert [v["harnessVersion"] for v in versions] == ["2", "1"]
    tags = [r.body["tags"] for r in emu.operations("TagResource")]
    assert tags == [{"managedloop:digest": V2.digest[:16]}]
    assert emu.harness_status(second.harness_id) == "READY"


async def test_provisioning_creates_and_moves_an_endpoint_when_asked(
    emu: AgentCoreEmulator,
) -> None:
    with make_provider(emu) as provider:
        first = await _provision(emu, provider, V1, endpoint_name="canary", create_endpoint=True)
        (created,) = emu.operations("CreateHarnessEndpoint")
        assert created.body == {"endpointName": "canary", "targetVersion": "1"} | {
            k: v for k, v in created.body.items() if k == "clientToken"
        }
        await _provision(emu, provider, V2, endpoint_name="canary", create_endpoint=True)
        (moved,) = emu.operations("UpdateHarnessEndpoint")
        assert moved.body["targetVersion"] == "2"
        listed = await provider.list_endpoints(first)
        assert {e["endpointName"]: e["liveVersion"] for e in listed} == {
            "DEFAULT": "2",
            "canary": "2",
        }
        pinned = await provider.update_endpoint("canary", harness=first, target_version="1")
        assert pinned["liveVersion"] == "1"
        await provider.delete_endpoint("canary", harness=first)
        after = {e["endpointName"]: e["status"] for e in await provider.list_endpoints(first)}
        assert after == {"DEFAULT": "READY", "canary": "DELETING"}
        with pytest.raises(ml.InvalidOptionsError):
            await _provision(emu, provider, V1, create_endpoint=True)  # DEFAULT: refused


async def test_stop_runtime_session(emu: AgentCoreEmulator, sid: str) -> None:
    emu.set_script([say("hi")])
    with make_provider(emu, runtime_session_id=sid) as provider:
        await ml.run(provider, agent=V1, prompt="go")
        report = await provider.stop_runtime_session(sid)
        assert report["runtime_session_id"] == sid
        assert emu.stopped_sessions == [sid]
        with pytest.raises(ml.APIStatusError) as again:
            await provider.stop_runtime_session(sid)  # gone already
        assert again.value.status == 404
        with pytest.raises(ml.InvalidOptionsError):
            await provider.stop_runtime_session("short")


async def _ensure(
    emu: AgentCoreEmulator, provider: BedrockAgentCore, spec: ml.AgentSpec, store: Any, **kw: Any
) -> Any:
    return await ml.ensure_agent(
        provider,
        spec,
        store=store,
        execution_role_arn=emu.execution_role_arn,
        timeout=5,
        update=True,
        **kw,
    )


async def test_ensure_agent_update_makes_versions_of_one_harness(emu: AgentCoreEmulator) -> None:
    store = MemoryStore()
    with make_provider(emu) as provider:
        first = await _ensure(emu, provider, V1, store)
        again = await _ensure(emu, provider, V1, store)  # same spec: no new version
        second = await _ensure(emu, provider, V2, store)
        back = await _ensure(emu, provider, V1, store)  # V1 again: a third version, not v1
    assert len(emu.operations("CreateHarness")) == 1
    assert len(emu.operations("UpdateHarness")) == 2
    assert first.name == second.name == "versioned"  # the base alone: no digest suffix
    assert first.harness_id == second.harness_id == back.harness_id
    assert (first.harness_version, again.harness_version) == ("1", "1")
    assert (second.harness_version, back.harness_version) == ("2", "3")
    assert (first.digest, second.digest) == (V1.digest, V2.digest)
    assert isinstance(first, ml.HarnessHandle)
    # the store keeps the version each digest last became (the round trip keeps it)
    stored = store.get(f"ml:harness:versioned:{V1.digest[:8]}")
    assert stored is not None
    assert stored["handle"]["harness_version"] == "3"
    assert ml.HarnessHandle.from_dict(stored["handle"]) == back


async def test_resolve_gives_the_version_of_the_tagged_spec(emu: AgentCoreEmulator) -> None:
    store = MemoryStore()
    with make_provider(emu) as provider:
        one = await _ensure(emu, provider, V1, store)
        await ml.tag("versioned", "stable", one, store=store)
        two = await _ensure(emu, provider, V2, store)
        await ml.tag("versioned", "canary", two, store=store)
    stable = await ml.resolve("versioned:stable", store=store)
    canary = await ml.resolve("versioned:canary", store=store)
    assert isinstance(stable, ml.HarnessHandle)
    assert isinstance(canary, ml.HarnessHandle)
    assert (stable.harness_version, stable.digest) == ("1", V1.digest)
    assert (canary.harness_version, canary.digest) == ("2", V2.digest)
    assert stable.harness_arn == canary.harness_arn  # one harness, two versions


async def test_prune_forgets_old_versions_but_never_a_tagged_one(emu: AgentCoreEmulator) -> None:
    store = MemoryStore()
    specs = [ml.AgentSpec(name="versioned", system_prompt=f"Prompt {n}.") for n in range(1, 5)]
    with make_provider(emu) as provider:
        handles = [await _ensure(emu, provider, spec, store) for spec in specs]
        await ml.tag("versioned", "pinned", handles[0], store=store)  # version 1
        dry = await ml.prune_agents(provider, "versioned", keep=2, store=store, dry_run=True)
        assert dry.forgotten == ["versioned@2"]
        assert dry.archived == []
        assert store.get(f"ml:harness:versioned:{specs[1].digest[:8]}") is not None
        report = await ml.prune_agents(provider, "versioned", keep=2, store=store)
        listed = await provider.harness_versions(handles[0])
    assert report.archived == []  # the service keeps every version: nothing is deleted
    assert report.forgotten == ["versioned@2"]
    assert report.kept == ["versioned@4", "versioned@3", "versioned@1"]  # newest 2 + tagged
    assert report.to_dict()["forgotten"] == ["versioned@2"]
    assert emu.operations("DeleteHarness") == []
    assert len(listed) == 4
    assert store.get(f"ml:harness:versioned:{specs[1].digest[:8]}") is None  # forgotten
    for kept in (0, 2, 3):
        assert store.get(f"ml:harness:versioned:{specs[kept].digest[:8]}") is not None
    assert (await ml.resolve("versioned:pinned", store=store)).digest == specs[0].digest


async def test_prune_keeps_a_digest_whose_entry_moved_to_a_newer_version(
    emu: AgentCoreEmulator,
) -> None:
    """V1 (v1), V2 (v2), V1 again (v3): the store's V1 entry is version 3, so forgetting
    version 1 must not drop it."""
    store = MemoryStore()
    with make_provider(emu) as provider:
        for spec in (V1, V2, V1):
            await _ensure(emu, provider, spec, store)
        report = await ml.prune_agents(provider, "versioned", keep=1, store=store)
    assert report.forgotten == ["versioned@1", "versioned@2"]
    assert report.kept == ["versioned@3"]
    entry = store.get(f"ml:harness:versioned:{V1.digest[:8]}")
    assert entry is not None
    assert entry["handle"]["harness_version"] == "3"
    assert store.get(f"ml:harness:versioned:{V2.digest[:8]}") is None


async def test_ensure_agent_update_pins_an_endpoint_when_asked(emu: AgentCoreEmulator) -> None:
    store = MemoryStore()
    with make_provider(emu) as provider:
        await _ensure(emu, provider, V1, store, endpoint_name="live", create_endpoint=True)
        two = await _ensure(emu, provider, V2, store, endpoint_name="live", create_endpoint=True)
        endpoints = {
            e["endpointName"]: e["liveVersion"] for e in await provider.list_endpoints(two)
        }
    assert endpoints == {"DEFAULT": "2", "live": "2"}
    assert [r.body["targetVersion"] for r in emu.operations("UpdateHarnessEndpoint")] == ["2"]


async def test_update_on_a_host_without_versions_is_refused_before_any_request() -> None:
    from managedloop.providers import ClaudeManagedAgents
    from managedloop.testing import ClaudeEmulator

    with ClaudeEmulator() as claude:
        import anthropic

        client = anthropic.AsyncAnthropic(base_url=claude.base_url, api_key=claude.api_key)
        provider = ClaudeManagedAgents(client=client)
        with pytest.raises(ml.InvalidOptionsError) as refused:
            await ml.ensure_agent(provider, V1, store=MemoryStore(), update=True)
        assert refused.value.code == "not_supported"
        assert refused.value.context["option"] == "update"
        assert claude.requests == []


async def test_a_too_long_base_is_refused_before_any_request(emu: AgentCoreEmulator) -> None:
    long = ml.AgentSpec(name="b" * 41, system_prompt="x")
    with make_provider(emu) as provider, pytest.raises(ml.InvalidOptionsError) as refused:
        await _ensure(emu, provider, long, MemoryStore())
    assert refused.value.code == "agent_base_too_long"
    assert refused.value.context["max_base"] == 40
    assert emu.operations("ListHarnesses") == []
    assert emu.operations("CreateHarness") == []


def test_a_harness_handle_keeps_its_version_only_when_it_has_one() -> None:
    plain = ml.HarnessHandle(
        harness_arn="arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/h-0123456789",
        harness_id="h-0123456789",
        name="h_0123abcd",
        digest="0" * 64,
    )
    assert "harness_version" not in plain.to_dict()  # entries stored before versions read
    assert ml.HarnessHandle.from_dict(plain.to_dict()) == plain
    versioned = ml.HarnessHandle.from_dict({**plain.to_dict(), "harness_version": "7"})
    assert versioned.harness_version == "7"
    assert ml.HarnessHandle.from_dict(versioned.to_dict()) == versioned
    with pytest.raises(ml.InvalidOptionsError):
        ml.HarnessHandle.from_dict({**plain.to_dict(), "harness_version": ""})
    with pytest.raises(ml.InvalidOptionsError):
        ml.HarnessHandle.from_dict({**plain.to_dict(), "extra": "x"})
