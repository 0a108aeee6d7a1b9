"""Issue 21 item 3: the agent and session surface users reach for.

Agent create sends ``mcp_servers`` (so ``mcp_toolset()`` works), ``skills`` and the model
options beside ``effort``; a session pins the provisioned agent version unless told
otherwise; ``vault_ids``, create-time ``resources``, ``initial_events`` (one round trip)
and per-session overrides reach the create body; sessions list / get / update / archive /
delete. Every body is checked by the emulator against the SDK's own types.
"""

from __future__ import annotations

from typing import Any

import pytest

import managedloop as ml
from claude_fixtures import make_provider
from managedloop.providers.claude import (
    ClaudeHandle,
    file_resource,
    github_repository,
    mcp_toolset,
    memory_store,
)
from managedloop.testing import ClaudeEmulator, say

from .conftest import WEATHER, provisioned

pytestmark = pytest.mark.anyio


def _created(emu: ClaudeEmulator, path: str) -> list[dict[str, Any]]:
    return [r.json for r in emu.requests if r.method == "POST" and r.path == path]


async def test_mcp_servers_skills_and_model_options_reach_the_agent(
    emu: ClaudeEmulator, client: Any
) -> None:
    spec = ml.AgentSpec(
        name="docs",
        model="claude-sonnet-5-5",
        effort="high",
        speed="fast",
        inference_geo="us",
        mcp_servers={"docs": "https://mcp.example.com/sse"},
        host_tools=[mcp_toolset("docs", "always_allow")],
        skills=[{"type": "anthropic", "skill_id": "xlsx"}],
    )
    handle = await ml.provision(make_provider(client), spec)
    (body,) = _created(emu, "/v1/agents")
    assert body["mcp_servers"] == [
        {"type": "url", "name": "docs", "url": "https://mcp.example.com/sse"}
    ]
    assert body["skills"] == [{"type": "anthropic", "skill_id": "xlsx"}]
    assert body["model"] == {
        "id": "claude-sonnet-5-5",
        "effort": "high",
        "speed": "fast",
        "inference_geo": "us",
    }
    agent = emu.state.agents[handle.agent_id]
    assert agent["mcp_servers"][0]["name"] == "docs"


@pytest.mark.parametrize(
    ("servers", "tools"),
    [({}, [mcp_toolset("docs")]), ({"docs": "https://x.example"}, [])],
    ids=["undeclared-server", "unused-server"],
)
async def test_mcp_servers_and_toolsets_must_match(
    emu: ClaudeEmulator, client: Any, servers: dict[str, str], tools: list[Any]
) -> None:
    spec = ml.AgentSpec(name="docs", mcp_servers=servers, host_tools=tools)
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.provision(make_provider(client), spec)
    assert info.value.context["option"] == "mcp_servers"
    assert emu.requests == []  # refused before any request


@pytest.mark.parametrize(
    "field",
    [
        {"speed": "turbo"},
        {"skills": [{"type": "x", "skill_id": "s"}]},
        {"skills": {"type": "anthropic", "skill_id": "s"}},
        {"mcp_servers": {"docs": "ftp://x"}},
        {"inference_geo": ""},
    ],
)
def test_bad_claude_fields_are_refused_by_the_spec(field: dict[str, Any]) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        ml.AgentSpec(name="a", **field)
    assert info.value.context["option"] == next(iter(field))


async def test_a_provisioned_session_pins_the_agent_version(
    emu: ClaudeEmulator, client: Any
) -> None:
    provider = await provisioned(client)
    handle = provider.agent
    assert isinstance(handle, ClaudeHandle)
    assert handle.agent_version == 1
    await ml.run(provider, agent=handle, prompt="hi")
    (body,) = _created(emu, "/v1/sessions")
    assert body["agent"] == {"type": "agent", "id": handle.agent_id, "version": 1}
    latest = make_provider(client, agent=handle, environment=handle, agent_version="latest")
    await ml.run(latest, agent=handle, prompt="hi")
    assert _created(emu, "/v1/sessions")[-1]["agent"] == handle.agent_id


async def test_on_the_fly_provisioning_pins_the_version_too(
    emu: ClaudeEmulator, client: Any
) -> None:
    result = await ml.run(make_provider(client), agent=WEATHER, prompt="hi")
    assert result.terminal is ml.Terminal.END_TURN
    (body,) = _created(emu, "/v1/sessions")
    assert body["agent"]["type"] == "agent"
    assert body["agent"]["version"] == 1


async def test_session_options_reach_the_create_body(emu: ClaudeEmulator, client: Any) -> None:
    upload = await client.beta.files.upload(file=("in.txt", b"data", "text/plain"))
    provider = await provisioned(
        client,
        session_overrides={"model": "claude-haiku-4-5", "system": "Be brief."},
        vault_ids=["vlt_1"],
        session_resources=[
            github_repository("https://github.com/o/r", authorization_token="ghp_x", branch="main"),
            file_resource(upload.id, mount_path="/data/in.txt"),
            memory_store("memstore_1", access="read_only"),
        ],
    )
    result = await ml.run(provider, agent=WEATHER, prompt="hi")
    assert result.terminal is ml.Terminal.END_TURN
    (body,) = _created(emu, "/v1/sessions")
    assert body["agent"]["type"] == "agent_with_overrides"
    assert (body["agent"]["model"], body["agent"]["system"]) == ("claude-haiku-4-5", "Be brief.")
    assert body["vault_ids"] == ["vlt_1"]
    assert [r["type"] for r in body["resources"]] == ["github_repository", "file", "memory_store"]
    session = emu.session(result.session_id)
    assert session.agent["model"] == {"id": "claude-haiku-4-5"}  # overridden for this session
    assert session.vault_ids == ["vlt_1"]


async def test_initial_events_take_one_round_trip(emu: ClaudeEmulator, client: Any) -> None:
    emu.agent.script = [say("Hello!")]
    message = {"type": "user.message", "content": [{"type": "text", "text": "hi"}]}
    provider = await provisioned(client, initial_events=[message])
    result = await ml.run(provider, agent=WEATHER, prompt="hi")
    assert (result.terminal, result.text) == (ml.Terminal.END_TURN, "Hello!")
    sends = [r for r in emu.requests if r.path.endswith("/events") and r.method == "POST"]
    assert sends == []  # the prompt went with the create
    assert _created(emu, "/v1/sessions")[0]["initial_events"] == [message]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("agent_version", 0),
        ("agent_version", "newest"),
        ("session_overrides", {"name": "x"}),
        ("vault_ids", "vlt_1"),
        ("session_resources", [{"type": "volume"}]),
        ("initial_events", [{"type": "user.interrupt"}]),
        ("event_deltas", "yes"),
    ],
)
def test_bad_session_options_are_refused_at_construction(option: str, value: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        ml.providers.ClaudeManagedAgents(
            api_key="sk-x", base_url="http://127.0.0.1:9", **{option: value}
        )
    assert info.value.context["option"] == option


async def test_session_verbs(emu: ClaudeEmulator, client: Any) -> None:
    provider = await provisioned(client)
    first = await ml.run(provider, agent=WEATHER, prompt="a")
    second = await ml.run(provider, agent=WEATHER, prompt="b")
    listed = await provider.list_sessions()
    assert [s["id"] for s in listed] == [second.session_id, first.session_id]
    assert await provider.list_sessions(statuses=["running"]) == []
    assert first.session_id is not None
    assert second.session_id is not None
    updated = await provider.update_session(first.session_id, title="t", metadata={"k": "v"})
    assert (updated["title"], updated["metadata"]) == ("t", {"k": "v"})
    updated = await provider.update_session(first.session_id, metadata={"k": None})
    assert updated["metadata"] == {}
    assert (await provider.get_session(first.session_id))["title"] == "t"
    archived = await provider.archive_session(first.session_id)
    assert archived["archived_at"] is not None
    assert [s["id"] for s in await provider.list_sessions()] == [second.session_id]
    assert len(await provider.list_sessions(include_archived=True)) == 2
    deleted = await provider.delete_session(second.session_id)
    assert deleted == {"id": second.session_id, "type": "session_deleted"}
    with pytest.raises(ml.InvalidOptionsError):
        await provider.get_session("../agents")
