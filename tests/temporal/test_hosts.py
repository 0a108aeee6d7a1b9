"""Durable sessions on the managed hosts (Claude Managed Agents, AgentCore), through
their loopback emulators and the production clients, on a real Temporal dev server."""

from __future__ import annotations

import pytest
from temporalio.client import Client

import managedloop as ml
from managedloop.contrib import temporal as mlt
from managedloop.providers import BedrockAgentCore
from managedloop.testing import AgentCoreEmulator, ClaudeEmulator
from weather import get_time, get_weather

from .conftest import claude_on, task_queue, until_pending

pytestmark = pytest.mark.anyio


SPEC = ml.AgentSpec(name="weather", system_prompt="Use tools.", tools=[get_weather, get_time])


async def test_a_claude_session_runs_as_a_workflow(client: Client) -> None:
    queue = task_queue()
    with ClaudeEmulator() as emu:
        make = await claude_on(emu, SPEC)
        async with mlt.worker(
            client, task_queue=queue, providers={"claude": make}, agents={"weather": SPEC}
        ):
            result = await mlt.run(
                client, provider="claude", agent="weather", prompt="Paris?", task_queue=queue
            )
    assert result.terminal == ml.Terminal.END_TURN, result
    assert sorted(u.name for u in result.custom_tool_uses) == ["get_time", "get_weather"]
    assert result.session_id is not None
    sent = [
        e["custom_tool_use_id"]
        for e in emu.sent_events(result.session_id)
        if e["type"] == "user.custom_tool_result"
    ]
    assert sorted(sent) == sorted(u.id for u in result.custom_tool_uses)  # each once
    prompts = [e for e in emu.sent_events(result.session_id) if e["type"] == "user.message"]
    assert len(prompts) == 1


async def test_an_agentcore_session_runs_as_a_workflow(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    queue = task_queue()
    with AgentCoreEmulator() as emu:

        def make() -> BedrockAgentCore:
            return BedrockAgentCore(
                harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
            )  # type: ignore[arg-type]

        async with mlt.worker(
            client, task_queue=queue, providers={"agentcore": make}, agents={"weather": SPEC}
        ):
            result = await mlt.run(
                client, provider="agentcore", agent="weather", prompt="Paris?", task_queue=queue
            )
    assert result.terminal == ml.Terminal.END_TURN, result
    assert sorted(u.name for u in result.custom_tool_uses) == ["get_time", "get_weather"]
    assert result.session_id is not None


async def test_a_claude_permission_policy_is_decided_by_signal(client: Client) -> None:
    """A built-in tool held by an ``always_ask`` policy parks the durable session: the
    decision comes by ``managedloop.decide`` and reaches the host as one confirmation."""
    from managedloop.providers.claude import agent_toolset
    from managedloop.testing import Reply, ToolCall, say

    spec = ml.AgentSpec(
        name="ops",
        system_prompt="Use tools.",
        tools=[get_weather],
        host_tools=[agent_toolset("always_allow", tools={"bash": "always_ask"})],
    )
    queue = task_queue()
    with ClaudeEmulator() as emu:
        emu.agent.script = [
            Reply(
                text="running",
                tool_calls=[ToolCall(name="bash", input={"command": "ls"}, server=True)],
            ),
            say("listed"),
        ]
        make = await claude_on(emu, spec)
        async with mlt.worker(
            client, task_queue=queue, providers={"claude": make}, agents={"ops": spec}
        ):
            wid = await mlt.start(
                client, provider="claude", agent="ops", prompt="list files", task_queue=queue
            )
            [request] = await until_pending(client, wid)
            assert (request.source, request.tool_use.name) == ("host", "bash")
            await mlt.decide(client, wid, {request.tool_use.id or "": ml.Deny("not on prod")})
            result = await mlt.result(client, wid)
        confirmations = [
            e for e in emu.sent_events(result.session_id) if e["type"] == "user.tool_confirmation"
        ]
    assert result.terminal == ml.Terminal.END_TURN, result
    assert len(confirmations) == 1  # one answer on the wire
    assert confirmations[0]["result"] == "deny"
