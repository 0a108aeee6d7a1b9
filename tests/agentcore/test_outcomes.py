"""Every harness outcome named: each stop reason, a denying hook, server tool results and
cache token counts, end to end through botocore's decoder and the emulator."""

from __future__ import annotations

from typing import Any

import pytest

import managedloop as ml
from managedloop.providers.agentcore import (
    REASONS,
    hook_decisions,
    server_tool_results,
)
from managedloop.testing import AgentCoreEmulator, Reply, ToolCall, call, say

from .conftest import make_provider

pytestmark = pytest.mark.anyio

# The HarnessStopReason enum of botocore's model, read here rather than copied, so a reason
# the service adds fails until it is named.
STOP_REASONS = [
    "end_turn",
    "tool_use",
    "stop_sequence",
    *sorted(REASONS),
]


@ml.tool
def lookup(city: str) -> str:
    """Look a city up."""
    return city


@ml.tool
def delete_everything(confirm: bool) -> str:
    """Delete everything."""
    raise AssertionError("a denied tool must never run")


SPEC = ml.AgentSpec(name="outcomes", tools=[lookup, delete_everything])


def test_every_stop_reason_of_the_service_model_is_classified() -> None:
    from botocore.session import get_session

    model = get_session().get_service_model("bedrock-agentcore")
    enum = model.shape_for("HarnessStopReason").enum
    assert sorted(enum) == sorted(STOP_REASONS)


@pytest.mark.parametrize("reason", sorted(REASONS))
async def test_each_stop_reason_ends_with_its_own_reason(reason: str) -> None:
    with AgentCoreEmulator([Reply(text="partial", stop_reason=reason)]) as emu:
        result = await ml.run(make_provider(emu), agent=SPEC, prompt="go")
    assert result.terminal is ml.Terminal.TERMINATED
    assert result.stop_reason == reason
    assert result.reason == reason
    assert result.text == "partial"


async def test_an_unknown_stop_reason_is_host_stopped() -> None:
    with AgentCoreEmulator([Reply(text="x", stop_reason="brand_new_reason")]) as emu:
        result = await ml.run(make_provider(emu), agent=SPEC, prompt="go")
    assert (result.terminal, result.reason) == (ml.Terminal.TERMINATED, "host_stopped")


async def test_a_denying_hook_is_visible_on_the_result() -> None:
    hooks = [
        {"beforeInvocation": {"name": "audit", "target": {"sns": {"arn": _SNS}}}},
        {"beforeToolCall": {"name": "guard", "target": {"lambda": {"arn": _LAMBDA}}}},
    ]
    seen: list[dict[str, Any]] = []

    def guard(event: dict[str, Any]) -> Any:
        seen.append(event)
        if event["tool_name"] == "delete_everything":
            return ("deny", "destructive")
        return "allow"

    script = [call("lookup", {"city": "Paris"}), call("delete_everything", {"confirm": True})]
    with AgentCoreEmulator(script, hooks={"guard": guard}) as emu:
        harness = emu.add_harness("guarded", hooks=hooks)
        result = await ml.run(make_provider(emu, harness_arn=harness.arn), agent=SPEC, prompt="go")
    assert result.terminal is ml.Terminal.TERMINATED
    assert result.reason == "hook_stopped"
    # the allowed call ran in turn 1; the denied one never pends, so it never runs
    assert [u.name for u in result.custom_tool_uses] == ["lookup"]
    decisions = hook_decisions(result)
    assert [(d.name, d.type, d.decision) for d in decisions] == [
        ("audit", "before_invocation", "allow"),
        ("guard", "before_tool_call", "allow"),
        ("audit", "before_invocation", "allow"),
        ("guard", "before_tool_call", "deny"),
    ]
    (denied,) = [d for d in decisions if d.denied]
    assert (denied.tool_name, denied.reason) == ("delete_everything", "destructive")
    assert denied.tool_use_id is not None
    assert [e["tool_name"] for e in seen] == ["lookup", "delete_everything"]


async def test_a_hook_denying_the_invocation_stops_before_the_model() -> None:
    hooks = [{"beforeInvocation": {"name": "gate", "target": {"sns": {"arn": _SNS}}}}]
    with AgentCoreEmulator([say("never")], hooks={"gate": lambda e: "deny"}) as emu:
        harness = emu.add_harness("gated", hooks=hooks)
        result = await ml.run(make_provider(emu, harness_arn=harness.arn), agent=SPEC, prompt="go")
    assert (result.reason, result.text) == ("hook_stopped", "")
    (decision,) = hook_decisions(result)
    assert (decision.name, decision.denied, decision.tool_name) == ("gate", True, None)


async def test_server_tool_results_and_cache_tokens_reach_the_result() -> None:
    script = [
        Reply(text="searching", tool_calls=[ToolCall(name="web_search", id="srv_1", server=True)]),
    ]
    with AgentCoreEmulator(script, cache_tokens=(7, 3)) as emu:
        result = await ml.run(make_provider(emu), agent=SPEC, prompt="go")
    assert result.terminal is ml.Terminal.END_TURN
    assert [u.name for u in result.server_tool_uses] == ["web_search"]
    (done,) = server_tool_results(result)
    assert (done.tool_use_id, done.text, done.is_error) == ("srv_1", "web_search ran", False)
    assert result.usage.cache_read_input_tokens == 7
    assert result.usage.cache_creation_input_tokens == 3
    assert result.usage.total_tokens == 10 + 5 + 7 + 3


_SNS = "arn:aws:sns:us-east-1:123456789012:audit-topic"
_LAMBDA = "arn:aws:lambda:us-east-1:123456789012:function:guard"
