"""Claude permission policies: an ``always_ask`` built-in tool maps onto the approvals flow.

The agent spec declares the built-in toolset's policies (``agent_toolset``); the emulator
holds the ``bash`` use (``evaluated_permission: "ask"``, ``evaluation``) and idles on
``requires_action``; ``confirm=`` decides at once (one ``user.tool_confirmation`` on the
wire), or, with no callback, the request ends with the pending decision in the result and
a resume answers it. Every emitted event and the agent resource pass the SDK's strict
validation.
"""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import pytest
from anthropic.types.beta.sessions import BetaManagedAgentsStreamSessionEvents

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.providers.claude import agent_toolset, mcp_toolset, tool_confirmation
from managedloop.testing import ClaudeEmulator, Reply, ToolCall, say

pytestmark = pytest.mark.anyio


def _variants() -> dict[str, Any]:
    union = typing.get_args(BetaManagedAgentsStreamSessionEvents)[0]
    return {
        typing.get_args(model.model_fields["type"].annotation)[0]: model
        for model in typing.get_args(union)
    }


VARIANTS = _variants()


def _validate_all(events: list[dict[str, Any]]) -> set[str]:
    """Each event parsed strictly into the SDK's own type for it; the types seen."""
    for event in events:
        VARIANTS[event["type"]].model_validate(event)
    return {e["type"] for e in events}


@ml.tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


SPEC = ml.AgentSpec(
    name="ops",
    system_prompt="Use tools.",
    tools=[lookup],
    host_tools=[agent_toolset("always_allow", tools={"bash": "always_ask"})],
)
BASH = ToolCall(name="bash", input={"command": "ls"}, server=True)


@pytest.fixture
def emu() -> Iterator[ClaudeEmulator]:
    with ClaudeEmulator() as e:
        e.agent.script = [Reply(text="running", tool_calls=[BASH]), say("listed")]
        yield e


@pytest.fixture
async def client(emu: ClaudeEmulator) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        base_url=emu.base_url, api_key=emu.api_key, _strict_response_validation=True
    ) as c:
        yield c


async def provider_for(client: anthropic.AsyncAnthropic) -> ClaudeManagedAgents:
    base = ClaudeManagedAgents(client=client, reconnect_backoff=0.0)
    handle = await ml.provision(base, SPEC)
    return ClaudeManagedAgents(
        client=client, agent=handle, environment=handle, reconnect_backoff=0.0
    )


def confirmations(emu: ClaudeEmulator) -> list[dict[str, Any]]:
    return [e for e in emu.sent_events() if e["type"] == "user.tool_confirmation"]


@pytest.mark.parametrize("allow", [True, False], ids=["approve", "deny"])
async def test_confirm_decides_an_always_ask_built_in_tool(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic, allow: bool
) -> None:
    seen: list[ml.ApprovalRequest] = []

    async def confirm(request: ml.ApprovalRequest) -> ml.Approve | ml.Deny:
        seen.append(request)
        return ml.Approve() if allow else ml.Deny("not on prod")

    provider = await provider_for(client)
    result = await ml.run(provider, agent=SPEC, prompt="list files", confirm=confirm)
    assert result.terminal is ml.Terminal.END_TURN
    assert result.text == "listed"
    (request,) = seen
    assert (request.source, request.verdict, request.reason) == ("host", "ask", "always_ask")
    assert request.evaluation == {"type": "always_ask"}
    assert (request.tool_use.name, request.tool_use.input) == ("bash", {"command": "ls"})
    expected = tool_confirmation(request.id, allow=allow, deny_message="not on prod")
    assert confirmations(emu) == [expected]  # exactly one answer on the wire
    (answer,) = [e for e in result.events if e["type"] == "agent.tool_result"]
    assert answer["is_error"] is (not allow)
    if not allow:
        assert answer["content"][0]["text"] == "not on prod"
    assert {"agent.tool_use", "user.tool_confirmation"} <= _validate_all(emu.events())
    # The agent resource, with its resolved toolset, passes the SDK's strict validation.
    agent = await client.beta.agents.retrieve(emu.session().agent["id"])
    toolset = next(t for t in agent.tools if t.type == "agent_toolset_20260401")
    assert toolset.default_config.permission_policy.type == "always_allow"
    assert [(c.name, c.permission_policy.type) for c in toolset.configs] == [("bash", "always_ask")]


async def test_with_no_callback_the_pending_decision_is_in_the_result(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    provider = await provider_for(client)
    parked = await ml.run(provider, agent=SPEC, prompt="list files")
    assert parked.terminal is ml.Terminal.REQUIRES_ACTION
    assert parked.reason == "approval_required"
    assert parked.pending is not None
    (request,) = parked.pending.approvals
    assert (request.source, request.tool_use.name) == ("host", "bash")
    assert confirmations(emu) == []  # the session waits on the host; nothing was sent
    assert emu.session().status == "idle"
    again = ml.SessionResult.from_dict(parked.to_dict())
    done = await ml.run(provider, agent=SPEC, resume=again, approvals={request.id: ml.Approve()})
    assert done.terminal is ml.Terminal.END_TURN
    assert done.text == "listed"
    assert confirmations(emu) == [tool_confirmation(request.id, allow=True)]


async def test_auto_policy_carries_the_hosts_judgement(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    spec = ml.AgentSpec(name="auto", tools=[lookup], host_tools=[agent_toolset("auto")])
    base = ClaudeManagedAgents(client=client, reconnect_backoff=0.0)
    handle = await ml.provision(base, spec)
    provider = ClaudeManagedAgents(client=client, agent=handle, environment=handle)
    parked = await ml.run(provider, agent=spec, prompt="go")
    assert parked.pending is not None
    (request,) = parked.pending.approvals
    assert request.reason == "indeterminate"
    assert request.evaluation == {
        "type": "auto",
        "evaluated_permission": {"type": "ask", "reason_code": "indeterminate"},
    }
    _validate_all(emu.events())


async def test_a_custom_call_and_a_held_built_in_in_one_turn(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    """One turn, a custom call that needs no decision and a held built-in: the custom
    result and the confirmation go out together, once each, after the decision."""
    emu.agent.script = [
        Reply(tool_calls=[BASH, ToolCall(name="lookup", input={"q": "x"})]),
        say("both"),
    ]
    provider = await provider_for(client)
    parked = await ml.run(provider, agent=SPEC, prompt="go")
    assert parked.pending is not None
    assert [r.text for r in parked.pending.results] == ["found x"]
    assert [e["type"] for e in emu.sent_events()] == ["user.message"]
    (request,) = parked.pending.approvals
    done = await ml.run(provider, agent=SPEC, resume=parked, approvals={request.id: ml.Deny()})
    assert done.text == "both"
    kinds = [e["type"] for e in emu.sent_events()]
    assert kinds == ["user.message", "user.custom_tool_result", "user.tool_confirmation"]


def test_policy_builders_refuse_what_the_wire_does_not_take() -> None:
    assert mcp_toolset("github", "always_ask", tools={"get_issue": "always_allow"}) == {
        "type": "mcp_toolset",
        "mcp_server_name": "github",
        "default_config": {"permission_policy": {"type": "always_ask"}},
        "configs": [{"name": "get_issue", "permission_policy": {"type": "always_allow"}}],
    }
    assert agent_toolset() == {"type": "agent_toolset_20260401"}
    for bad in (
        lambda: agent_toolset("sometimes"),  # type: ignore[arg-type]
        lambda: agent_toolset(tools={"rm": "always_ask"}),
        lambda: mcp_toolset(""),
        lambda: ml.AgentSpec(name="x", host_tools=[{"no": "type"}]),
    ):
        with pytest.raises(ml.InvalidOptionsError):
            bad()


def test_host_tools_change_the_digest_only_when_present() -> None:
    plain = ml.AgentSpec(name="ops", tools=[lookup])
    assert "host_tools" not in plain.identity()  # existing digests are unchanged
    assert SPEC.digest != plain.digest
