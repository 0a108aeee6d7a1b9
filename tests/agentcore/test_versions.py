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


async def test_ensure_agent_refuses_update_before_any_request(emu: AgentCoreEmulator) -> None:
    with make_provider(emu) as provider, pytest.raises(ml.InvalidOptionsError) as refused:
        await ml.ensure_agent(
            provider,
            V1,
            store=MemoryStore(),
            execution_role_arn=emu.execution_role_arn,
            update=True,
        )
    assert refused.value.context["option"] == "update"
    assert emu.operations("CreateHarness") == []
