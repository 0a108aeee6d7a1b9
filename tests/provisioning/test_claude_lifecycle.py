"""The lifecycle verbs on Claude Managed Agents, against the ClaudeEmulator (issue 10
items 3, 5, 6, 7).

§9 lines covered (reference-inventory.md):

* provisioner/agents_test: ensure provisions once, named ``analyst_<d8>``, create body
  ``{name, model, system, tools}``; a second ensure hits the store (one create, and no
  request at all); 409 with a live namesake recovers its id (fresh store); 409 with only
  an archived namesake → ``agent_archived``; 409 with no namesake → ``agent_name_conflict``;
  a foreign-shape store entry is a miss and is rebuilt; tag then resolve; unknown tag →
  ``unknown_tag``; a tag to an unprovisioned digest → ``untracked_digest``; a reference
  without a colon fails; prune: keep required; keep 1 keeps newest + tagged; three
  untagged versions go strictly oldest first; a failure on the second archive reports
  the first as archived and names the failed one; a too-long base → ``agent_base_too_long``
  and no create.
* provisioner/environments_test: digest-named create on a miss, a pure store hit on the
  same spec; a different spec → another name; 409 recovery by exact name; archived →
  ``environment_archived``; none → ``environment_name_conflict``; a malformed entry is
  rebuilt and overwritten; provider errors pass through; tag/resolve/retag/unknown;
  prune keep required (absent, 0, negative), keep 1 keeps newest + tagged, ignores other
  bases (``data_analysis`` for ``data``, ``d_d_…`` for ``d``) and archived versions; a
  partial prune keeps the failed version's store entry and drops the archived one's;
  bootstrap on create, on a hit and on 409 recovery, never stored (stored JSON has the
  identity keys only); no runtimes → ``bootstrap is None``; the wire config never carries
  runtimes; limited networking gets the runtime hosts merged (deduplicated); the same
  spec under two bases shares the digest; a literal ``None`` spec is refused.
* provisioning_test: provision serves the store on a hit; a custom store is honoured and
  teardown evicts from it.
* agent/handle_test, environment/handle_test: handles absorb their dict and JSON-encode to
  exactly the identity keys.

Deliberately changed: the agent 409 recovery pages through every list page with
``include_archived=true`` (the reference read only the first page; §11.12); the unexpected
list shape is a named error on both kinds (§11.11); a raw-digest tag needs ``kind=``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.stores import MemoryStore, Store
from managedloop.testing import ClaudeEmulator, ClaudeFaults

pytestmark = pytest.mark.anyio


@ml.tool
def lookup(ticket: str) -> str:
    """Look a ticket up."""
    return f"ticket {ticket}: open"


ANALYST = ml.AgentSpec(name="analyst", system_prompt="s", model="claude-haiku-4-5", tools=[lookup])


def creates(emu: ClaudeEmulator, kind: str = "agents") -> list[Any]:
    return [r for r in emu.requests if r.method == "POST" and r.path == f"/v1/{kind}"]


async def test_ensure_agent_creates_once_and_a_hit_makes_no_request(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents, store: Store
) -> None:
    handle = await ml.ensure_agent(claude, ANALYST, store=store)
    assert isinstance(handle, ml.AgentHandle)
    assert handle.name == f"analyst_{ANALYST.digest8}"
    assert handle.digest == ANALYST.digest
    (create,) = creates(emu)
    assert create.json["name"] == handle.name
    assert (create.json["model"], create.json["system"]) == ("claude-haiku-4-5", "s")
    assert [t["name"] for t in create.json["tools"]] == ["lookup"]
    seen = len(emu.requests)
    assert await ml.ensure_agent(claude, ANALYST, store=store) == handle
    assert len(emu.requests) == seen  # a hit: no request at all
    assert json.loads(json.dumps(handle.to_dict())) == {
        "agent_id": handle.agent_id,
        "name": handle.name,
        "digest": handle.digest,
    }
    assert ml.AgentHandle.from_dict(handle.to_dict()) == handle


async def test_a_409_recovers_the_live_namesake_across_pages(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents
) -> None:
    first = await ml.ensure_agent(claude, ANALYST, store=MemoryStore())
    # 230 other agents created later: the namesake is on the last of three pages.
    for i in range(230):
        rid = f"agent_filler{i:04d}"
        emu.state.agents[rid] = {**emu.state.agents[first.agent_id], "id": rid, "name": f"f{i}"}
    again = await ml.ensure_agent(claude, ANALYST, store=MemoryStore())  # a fresh process
    assert again == first
    assert len(creates(emu)) == 2  # the second create answered 409
    lists = [r for r in emu.requests if r.method == "GET" and r.path == "/v1/agents"]
    assert len(lists) == 3
    assert all(r.query["include_archived"] == ["true"] for r in lists)


async def test_409_with_an_archived_namesake_or_none_is_a_named_error(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents
) -> None:
    first = await ml.ensure_agent(claude, ANALYST, store=MemoryStore())
    record = emu.state.agents[first.agent_id]

    def archive_it(method: str, path: str) -> None:  # between the 409 and the listing
        if method == "GET" and path == "/v1/agents":
            record["archived_at"] = "2026-01-01T00:00:00Z"

    emu.faults = ClaudeFaults(before_request=archive_it)
    with pytest.raises(ml.ProvisioningError) as info:
        await ml.ensure_agent(claude, ANALYST, store=MemoryStore())
    assert (info.value.code, info.value.context["name"]) == ("agent_archived", first.name)

    record["archived_at"] = None

    def vanish(method: str, path: str) -> None:
        if method == "GET" and path == "/v1/agents":
            emu.state.agents.pop(first.agent_id, None)

    emu.faults = ClaudeFaults(before_request=vanish)
    with pytest.raises(ml.ProvisioningError) as info:
        await ml.ensure_agent(claude, ANALYST, store=MemoryStore())
    assert info.value.code == "agent_name_conflict"


async def test_bad_store_entries_are_misses_and_are_overwritten(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents, store: Store
) -> None:
    handle = await ml.ensure_agent(claude, ANALYST, store=store)
    ((key, entry),) = store.scan("ml:agent:").items()
    for bad in (
        {"handle": {"agent_id": handle.agent_id, "name": handle.name}},  # no digest
        {"handle": "agent_x"},
        {"handle": handle.to_dict(), "account": "someone-else"},
    ):
        store.put(key, bad)
        assert await ml.ensure_agent(claude, ANALYST, store=store) == handle  # via the 409
        assert store.get(key) == entry  # healed
    assert len(creates(emu)) == 4


async def test_a_too_long_base_is_refused_before_any_request(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents, store: Store
) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.ensure_agent(claude, ANALYST, name="b" * 248, store=store)
    assert info.value.code == "agent_base_too_long"
    ok = await ml.ensure_agent(claude, ANALYST, name="b" * 247, store=store)
    assert len(ok.name) == 256
    assert len(creates(emu)) == 1


async def test_claude_fields_on_the_wire_and_agentcore_fields_refused(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents, store: Store
) -> None:
    spec = ml.AgentSpec(
        name="e",
        system_prompt="s",
        model="claude-sonnet-4-6",
        effort="high",
        execution_identity={"type": "aws_role", "role_arn": "arn:aws:iam::123456789012:role/r"},
    )
    await ml.ensure_agent(claude, spec, store=store)
    (create,) = creates(emu)
    assert create.json["model"] == {"id": "claude-sonnet-4-6", "effort": "high"}
    assert create.json["execution_identity"]["type"] == "aws_role"
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.ensure_agent(claude, ml.AgentSpec(name="t", timeout_seconds=60), store=store)
    assert info.value.context["option"] == "timeout_seconds"
    with pytest.raises(ml.InvalidOptionsError):
        await ml.ensure_agent(claude, ANALYST, store=store, environment={"type": "cloud"})


# ---------------------------------------------------------------------------- environments

RUNTIME_ENV = {
    "type": "cloud",
    "networking": {"type": "limited", "allowed_hosts": ["pypi.org", "github.com"]},
    "runtimes": [{"lang": "elixir", "version": "1.17.0"}],
}


async def test_ensure_environment_bootstrap_on_every_path_never_stored(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents, store: Store
) -> None:
    env = await ml.ensure_environment(claude, RUNTIME_ENV, name="data", store=store)
    assert isinstance(env, ml.EnvironmentHandle)
    assert env.bootstrap is not None
    assert "mise install" in env.bootstrap.script
    assert "## Runtime bootstrap" in env.bootstrap.instructions
    (create,) = creates(emu, "environments")
    assert create.json["name"] == env.name == f"data_{env.digest[:8]}"
    assert "runtimes" not in json.dumps(create.json)
    hosts = create.json["config"]["networking"]["allowed_hosts"]
    assert hosts[:2] == ["pypi.org", "github.com"]
    assert len(hosts) == len(set(hosts)) == 7
    seen = len(emu.requests)
    hit = await ml.ensure_environment(claude, RUNTIME_ENV, name="data", store=store)
    assert len(emu.requests) == seen
    assert hit.bootstrap == env.bootstrap
    recovered = await ml.ensure_environment(claude, RUNTIME_ENV, name="data", store=MemoryStore())
    assert recovered == env
    assert recovered.bootstrap == env.bootstrap
    for entry in store.scan("").values():
        assert "bootstrap" not in json.dumps(entry)
    assert set(env.to_dict()) == {"environment_id", "name", "digest"}
    plain = await ml.ensure_environment(claude, {"type": "cloud"}, name="data", store=store)
    assert plain.bootstrap is None
    assert plain.name != env.name


async def test_environment_409_archived_conflict_and_errors(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents
) -> None:
    env = await ml.ensure_environment(claude, {"type": "cloud"}, store=MemoryStore())
    assert env.name.startswith("env_")
    record = emu.state.environments[env.environment_id]

    def archive_it(method: str, path: str) -> None:
        if method == "GET" and path == "/v1/environments":
            record["archived_at"] = "2026-01-01T00:00:00Z"

    emu.faults = ClaudeFaults(before_request=archive_it)
    with pytest.raises(ml.ProvisioningError) as info:
        await ml.ensure_environment(claude, {"type": "cloud"}, store=MemoryStore())
    assert info.value.code == "environment_archived"
    record["archived_at"] = None

    def vanish(method: str, path: str) -> None:
        if method == "GET" and path == "/v1/environments":
            emu.state.environments.clear()

    emu.faults = ClaudeFaults(before_request=vanish)
    with pytest.raises(ml.ProvisioningError) as info:
        await ml.ensure_environment(claude, {"type": "cloud"}, store=MemoryStore())
    assert info.value.code == "environment_name_conflict"
    emu.faults = ClaudeFaults(server_errors=1, server_error_status=400)
    with pytest.raises(ml.APIStatusError):
        await ml.ensure_environment(claude, {"type": "self_hosted"}, store=MemoryStore())
    for bad in (None, "cloud", {"variables": {"A": "b"}}):
        with pytest.raises(ml.InvalidOptionsError) as refused:
            await ml.ensure_environment(claude, bad, store=MemoryStore())
        assert refused.value.code == "invalid_environment_spec"


async def test_the_same_environment_under_two_bases_shares_the_digest(
    claude: ClaudeManagedAgents, store: Store
) -> None:
    a = await ml.ensure_environment(claude, {"type": "cloud"}, name="a", store=store)
    b = await ml.ensure_environment(claude, {"type": "cloud"}, name="b", store=store)
    assert a.digest == b.digest
    assert a.environment_id != b.environment_id


# ---------------------------------------------------------------------------- tags


async def test_tag_resolve_retag_and_the_named_errors(
    claude: ClaudeManagedAgents, store: Store
) -> None:
    v1 = await ml.ensure_agent(claude, ANALYST, store=store)
    v2 = await ml.ensure_agent(
        claude, ml.AgentSpec(name="analyst", system_prompt="v2"), store=store
    )
    await ml.tag("analyst", "prod", v1, store=store)
    assert await ml.resolve("analyst:prod", store=store) == v1
    await ml.tag("analyst", "prod", v2, store=store)  # movable
    assert await ml.resolve("analyst:prod", store=store) == v2
    await ml.tag("analyst", "a:b", v1, store=store)  # tags may hold colons
    assert await ml.resolve("analyst:a:b", store=store) == v1
    with pytest.raises(ml.ProvisioningError) as info:
        await ml.resolve("analyst:staging", store=store)
    assert info.value.code == "unknown_tag"
    await ml.tag("analyst", "ghost", "00000000", store=store, kind="agent")
    with pytest.raises(ml.ProvisioningError) as info:
        await ml.resolve("analyst:ghost", store=store)
    assert (info.value.code, info.value.context["digest"]) == ("untracked_digest", "00000000")
    for ref in ("analyst", ":prod", "analyst:", 7):
        with pytest.raises(ml.InvalidOptionsError) as bad:
            await ml.resolve(ref, store=store)  # type: ignore[arg-type]
        assert bad.value.code == "invalid_reference"
    with pytest.raises(ml.InvalidOptionsError):
        await ml.tag("analyst", "x", "00000000", store=store)  # a raw digest needs kind=
    env = await ml.ensure_environment(claude, {"type": "cloud"}, name="analyst", store=store)
    await ml.tag("analyst", "prod", env, store=store)
    with pytest.raises(ml.InvalidOptionsError) as ambiguous:
        await ml.resolve("analyst:prod", store=store)
    assert ambiguous.value.code == "ambiguous_tag"
    assert await ml.resolve("analyst:prod", store=store, kind="environment") == env
    resolved = await ml.resolve("analyst:prod", store=store, kind="environment")
    assert isinstance(resolved, ml.EnvironmentHandle)
    assert resolved.bootstrap is None


# ---------------------------------------------------------------------------- prune


async def _versions(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents, store: Store, base: str, n: int
) -> list[ml.AgentHandle]:
    out = []
    for i in range(n):
        h = await ml.ensure_agent(
            claude, ml.AgentSpec(name=base, system_prompt=f"v{i}"), store=store
        )
        assert isinstance(h, ml.AgentHandle)
        emu.state.agents[h.agent_id]["created_at"] = f"2026-01-0{i + 1}T00:00:00Z"
        out.append(h)
    return out


async def test_prune_keeps_newest_and_tagged_archives_oldest_first(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents, store: Store
) -> None:
    v = await _versions(emu, claude, store, "data", 5)
    await _versions(emu, claude, store, "data_analysis", 2)  # another base: never touched
    await ml.ensure_agent(claude, ml.AgentSpec(name="d_d", system_prompt="x"), store=store)
    emu.state.agents[v[0].agent_id]["archived_at"] = "2026-02-01T00:00:00Z"  # already gone
    await ml.tag("data", "prod", v[1], store=store)
    dry = await ml.prune_agents(claude, "data", keep=1, store=store, dry_run=True)
    assert dry.dry_run
    assert dry.archived == [v[2].name, v[3].name]
    assert not [r for r in emu.requests if r.path.endswith("/archive")]
    report = await ml.prune_agents(claude, "data", keep=1, store=store)
    assert report.archived == [v[2].name, v[3].name]  # oldest first
    assert report.kept == [v[4].name, v[1].name]  # newest, then tagged
    assert all(emu.state.agents[h.agent_id]["archived_at"] for h in v[:4] if h is not v[1])
    assert not emu.state.agents[v[1].agent_id]["archived_at"]
    live = [a["name"] for a in emu.state.agents.values() if not a["archived_at"]]
    assert sum(n.startswith("data_analysis_") for n in live) == 2
    assert store.get(f"ml:agent:data:{v[2].digest8}") is None  # entry dropped
    assert store.get(f"ml:agent:data:{v[4].digest8}") is not None


@pytest.mark.parametrize("keep", [None, 0, -1, True, "3", 1.5])
async def test_prune_needs_keep(claude: ClaudeManagedAgents, store: Store, keep: Any) -> None:
    kwargs = {} if keep is None else {"keep": keep}
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.prune_agents(claude, "data", store=store, **kwargs)
    assert info.value.code == "keep_required"
    with pytest.raises(ml.InvalidOptionsError):
        await ml.prune_environments(claude, "data", store=store, **kwargs)


async def test_a_partial_prune_reports_what_was_archived_and_what_failed(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents, store: Store
) -> None:
    v = await _versions(emu, claude, store, "analyst", 4)
    emu.faults = ClaudeFaults(
        server_errors=1, server_error_status=400, fault_path=f"/v1/agents/{v[1].agent_id}/archive"
    )
    with pytest.raises(ml.ProvisioningError) as info:
        await ml.prune_agents(claude, "analyst", keep=1, store=store)
    assert info.value.code == "prune_partial"
    report = info.value.context["report"]
    assert (report.archived, report.failed) == ([v[0].name], v[1].name)
    assert store.get(f"ml:agent:analyst:{v[0].digest8}") is None
    assert store.get(f"ml:agent:analyst:{v[1].digest8}") is not None  # the failed one stays


async def test_prune_environments(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents, store: Store
) -> None:
    envs = []
    for i in range(3):
        e = await ml.ensure_environment(
            claude, {"type": "cloud", "packages": {"pip": [f"pkg{i}"]}}, name="data", store=store
        )
        emu.state.environments[e.environment_id]["created_at"] = f"2026-01-0{i + 1}T00:00:00Z"
        envs.append(e)
    report = await ml.prune_environments(claude, "data", keep=2, store=store)
    assert report.archived == [envs[0].name]
    assert report.kind == "environment"


# ---------------------------------------------------------------------------- run, provision


async def test_handles_pass_into_run(emu: ClaudeEmulator, client: Any, store: Store) -> None:
    provider = ClaudeManagedAgents(client=client)
    agent = await ml.ensure_agent(provider, ANALYST, store=store)
    env = await ml.ensure_environment(provider, {"type": "cloud"}, name="a", store=store)
    runner = ClaudeManagedAgents(client=client, environment=env)
    result = await ml.run(runner, agent=agent, prompt="hi", handler=ANALYST.toolset())
    assert result.terminal == ml.Terminal.END_TURN
    (session,) = emu.state.sessions.values()
    assert session.agent["id"] == agent.agent_id  # type: ignore[attr-defined]


async def test_provision_with_a_store_does_not_recreate_in_a_new_process(
    emu: ClaudeEmulator, claude: ClaudeManagedAgents, store: Store
) -> None:
    spec = ml.AgentSpec(name="support_bot", system_prompt="s")
    first = await ml.provision(claude, spec, store=store)
    ml.provisioning.clear_cache()  # what a new process starts with
    assert await ml.provision(claude, spec, store=store) == first
    assert len(creates(emu)) == 1
    # without the store, a new process's provision adopts the namesake (409), never a twin
    assert (await ml.provision(claude, spec)).agent_id == first.agent_id
    assert len([a for a in emu.state.agents.values() if a["name"] == first.name]) == 1
    await ml.teardown(claude, first, store=store)
    assert store.scan("provision:") == {}
