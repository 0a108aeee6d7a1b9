"""The lifecycle verbs on AgentCore, against the AgentCoreEmulator (issue 10 items 3, 6, 7).

On AgentCore an agent is a harness: ``ensure_agent`` builds it exactly as ``provision``
does (one deadline for the harness wait and the endpoint wait, progress after each poll,
rollback of a harness this call created), names it ``<base>_<digest8>`` under the harness
policy, and stores a :class:`~managedloop.HarnessHandle`.

§9 lines covered (reference-inventory.md), as they apply to a harness:

* provisioner/agents_test: ensure creates once, a second ensure hits the store (no request);
  a 409 with a live namesake recovers it (fresh store); a too-long base is refused before
  any request; tag then resolve; prune keep required, keep 1 keeps newest + tagged,
  oldest first.
* name_test: hyphens sanitised (``conformance_agent_…``), the harness pattern holds.
* bedrock_agent_core_test (provision): harness READY then endpoint READY, a failure rolls
  the created harness back.

Deliberately changed: AgentCore has no archive, so prune *deletes* (the harness goes
DELETING and leaves the listing), a DELETING namesake after a 409 is waited out and
re-created (``provision``'s rule) instead of ``agent_archived``, and the harness digest
folds the environment's digest in (one harness = model + tools + environment). Bases
longer than 31 characters are refused (``agent_base_too_long``), never shortened.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator
from tests.agentcore.test_shapes import walk

import managedloop as ml
from managedloop.providers.agentcore import BedrockAgentCore
from managedloop.providers.agentcore._harness_body import create_body
from managedloop.providers.agentcore._waits import WaitContext
from managedloop.stores import MemoryStore, Store
from managedloop.testing import AgentCoreEmulator, AgentCoreFaults
from managedloop.testing.agentcore import ManualClock

pytestmark = pytest.mark.anyio


@ml.tool
def lookup(city: str) -> str:
    """Look a city up."""
    return city


SPEC = ml.AgentSpec(name="conformance-agent", system_prompt="Be helpful.", tools=[lookup])
ENV = ml.EnvironmentSpec(
    config={"agentCoreRuntimeEnvironment": {"networkConfiguration": {"networkMode": "PUBLIC"}}},
    variables={"MODE": "strict"},
    filesystems=[
        {"sessionStorage": {"mountPath": "/mnt/work"}},
        {"s3BucketMount": {"bucket": "my-bucket", "mountPath": "/mnt/data", "prefix": "in/"}},
    ],
)


@pytest.fixture(autouse=True)
def _isolated_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "aws-empty"
    empty.touch()
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))


@pytest.fixture
def emu() -> Iterator[AgentCoreEmulator]:
    faults = AgentCoreFaults(harness_ready_after=0.2, endpoint_ready_after=0.3)
    with AgentCoreEmulator(faults=faults, clock=ManualClock()) as e:
        yield e


@pytest.fixture
def provider(emu: AgentCoreEmulator) -> Iterator[BedrockAgentCore]:
    with BedrockAgentCore(**emu.client_kwargs, retry_backoff=0.0) as p:  # type: ignore[arg-type]
        yield p


def opts(emu: AgentCoreEmulator, **kw: Any) -> dict[str, Any]:
    clock = emu.clock
    assert isinstance(clock, ManualClock)
    return {
        "execution_role_arn": emu.execution_role_arn,
        "timeout": 5.0,
        "clock": clock,
        "sleep": clock.sleep,
        **kw,
    }


async def test_ensure_builds_a_harness_waits_for_it_and_its_endpoint_then_hits(
    emu: AgentCoreEmulator, provider: BedrockAgentCore, store: Store
) -> None:
    seen: list[WaitContext] = []
    handle = await ml.ensure_agent(provider, SPEC, store=store, **opts(emu, progress=seen.append))
    assert isinstance(handle, ml.HarnessHandle)
    assert handle.name == f"conformance_agent_{SPEC.digest8}"
    assert handle.harness_id.startswith(handle.name)
    assert [op for op in ("GetHarness", "GetHarnessEndpoint") if emu.operations(op)] == [
        "GetHarness",
        "GetHarnessEndpoint",
    ]
    assert {c.phase for c in seen} == {"ready", "endpoint"}
    assert seen[-1].phase == "endpoint"
    assert seen[-1].last_status == "READY"
    before = len(emu.requests)
    assert await ml.ensure_agent(provider, SPEC, store=store, **opts(emu)) == handle
    assert len(emu.requests) == before  # a hit: no request
    assert set(handle.to_dict()) == {"harness_arn", "harness_id", "name", "digest"}


async def test_a_409_adopts_the_live_harness(
    emu: AgentCoreEmulator, provider: BedrockAgentCore
) -> None:
    first = await ml.ensure_agent(provider, SPEC, store=MemoryStore(), **opts(emu))
    again = await ml.ensure_agent(provider, SPEC, store=MemoryStore(), **opts(emu))
    assert again == first
    assert len(emu.operations("CreateHarness")) == 2  # the second answered 409
    assert not emu.operations("DeleteHarness")  # an adopted harness is never rolled back


async def test_environment_fields_reach_the_wire_and_the_emulator_echoes_valid_shapes(
    emu: AgentCoreEmulator, provider: BedrockAgentCore, store: Store
) -> None:
    spec = ml.AgentSpec(name="fs", system_prompt="p", timeout_seconds=900)
    model = botocore.session.get_session().get_service_model("bedrock-agentcore-control")
    fs_shape = model.shape_for("FilesystemConfiguration")
    if "s3BucketMount" not in fs_shape.members:  # type: ignore[attr-defined]
        # An older botocore (the oldest we support) has no s3BucketMount yet: its own
        # validation refuses it, a named error before any request, nothing created.
        with pytest.raises(ml.InvalidOptionsError, match="s3BucketMount"):
            await ml.ensure_agent(provider, spec, store=store, environment=ENV, **opts(emu))
        assert emu.operations("CreateHarness") == []
        return
    handle = await ml.ensure_agent(provider, spec, store=store, environment=ENV, **opts(emu))
    assert handle.digest not in (spec.digest, SPEC.digest)
    (create,) = emu.operations("CreateHarness")
    body = create.body
    assert body["environmentVariables"] == {"MODE": "strict"}
    assert body["timeoutSeconds"] == 900
    fs = body["environment"]["agentCoreRuntimeEnvironment"]["filesystemConfigurations"]
    assert fs[1] == {
        "s3BucketMount": {"bucket": "my-bucket", "mountPath": "/mnt/data", "prefix": "in/"}
    }
    report = ParamValidator().validate(body, model.operation_model("CreateHarness").input_shape)
    assert not report.has_errors(), report.generate_report()
    got = await provider.control_call("get_harness", harnessId=handle.harness_id)
    assert got["harness"]["environmentVariables"] == {"MODE": "strict"}
    assert got["harness"]["timeoutSeconds"] == 900
    raw = emu._account.harnesses[handle.harness_id].view(emu.clock())
    shape = model.operation_model("GetHarness").output_shape.members["harness"]
    assert list(walk(raw, shape)) == []


async def test_claude_fields_and_runtimes_are_refused_before_any_request(
    emu: AgentCoreEmulator, provider: BedrockAgentCore, store: Store
) -> None:
    before = len(emu.requests)
    for spec, env, option in (
        (ml.AgentSpec(name="e", effort="high"), None, "effort"),
        (ml.AgentSpec(name="e", execution_identity={"type": "service_account"}), None, None),
        (SPEC, {"runtimes": [{"lang": "go", "version": "1.23"}]}, "runtimes"),
        (ml.AgentSpec(name="b" * 32), None, "name"),
    ):
        with pytest.raises(ml.InvalidOptionsError) as info:
            await ml.ensure_agent(provider, spec, store=store, environment=env, **opts(emu))
        if option is not None:
            assert info.value.context["option"] == option
    assert len(emu.requests) == before
    with pytest.raises(ml.InvalidOptionsError) as too_long:
        await ml.ensure_agent(provider, ml.AgentSpec(name="b" * 32), store=store, **opts(emu))
    assert too_long.value.code == "agent_base_too_long"
    with pytest.raises(ml.InvalidOptionsError):
        await ml.ensure_environment(provider, {"type": "cloud"}, store=store)
    with pytest.raises(ml.InvalidOptionsError):
        create_body(SPEC, name="n", execution_role_arn="r", environment={"runtimes": "x"})


async def test_a_failed_endpoint_rolls_the_created_harness_back_and_stores_nothing(
    emu: AgentCoreEmulator, provider: BedrockAgentCore, store: Store
) -> None:
    emu.faults = AgentCoreFaults(endpoint_outcome="CREATE_FAILED", endpoint_ready_after=0.1)
    with pytest.raises(ml.ProvisioningError) as info:
        await ml.ensure_agent(provider, SPEC, store=store, **opts(emu))
    assert info.value.code == "endpoint_failed"
    assert len(emu.operations("DeleteHarness")) == 1
    assert store.scan("ml:") == {}


async def test_tag_resolve_prune_delete_oldest_first_never_tagged(
    emu: AgentCoreEmulator, provider: BedrockAgentCore, store: Store
) -> None:
    versions = []
    for i in range(4):
        spec = ml.AgentSpec(name="bot", system_prompt=f"v{i}")
        h = await ml.ensure_agent(provider, spec, store=store, **opts(emu))
        assert isinstance(h, ml.HarnessHandle)
        emu._account.harnesses[h.harness_id].created_at = 1_700_000_000.0 + i
        versions.append(h)
    other = await ml.ensure_agent(
        provider, ml.AgentSpec(name="bot_two", system_prompt="x"), store=store, **opts(emu)
    )
    await ml.tag("bot", "prod", versions[0], store=store)
    assert await ml.resolve("bot:prod", store=store) == versions[0]
    dry = await ml.prune_agents(provider, "bot", keep=1, store=store, dry_run=True)
    assert dry.archived == [versions[1].name, versions[2].name]
    assert not emu.operations("DeleteHarness")
    report = await ml.prune_agents(provider, "bot", keep=1, store=store)
    assert report.kind == "harness"
    assert report.archived == [versions[1].name, versions[2].name]
    assert report.kept == [versions[3].name, versions[0].name]
    deleted = [r.path.rsplit("/", 1)[-1] for r in emu.operations("DeleteHarness")]
    assert deleted == [versions[1].harness_id, versions[2].harness_id]
    assert other.harness_id not in deleted
    assert store.get(f"ml:harness:bot:{versions[1].digest8}") is None
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.prune_environments(provider, "bot", keep=1, store=store)
    assert info.value.code == "not_supported"


async def test_the_handle_runs_and_tears_down(
    emu: AgentCoreEmulator, provider: BedrockAgentCore, store: Store
) -> None:
    handle = await ml.ensure_agent(provider, SPEC, store=store, **opts(emu))
    result = await ml.run(provider, agent=handle, prompt="go", handler=SPEC.toolset())
    assert result.text.startswith("Done.")
    report = await ml.teardown(provider, handle)
    assert report["harness_id"] == handle.harness_id
