"""Fields the hosts have grown (issue 10 item 6): the Claude session budget and its
``budget_reached`` stop. (Agent ``effort`` / ``execution_identity`` and the AgentCore
harness fields are pinned in the lifecycle tests of each host.)

A Claude session created with ``session_budget`` carries it as ``budget``; a session that
idles with ``stop_reason {"type": "budget_reached"}`` ends ``terminated`` with
``reason="budget_reached"`` and the raw stop reason kept verbatim.

No §9 line: the reference predates budgets.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.testing import ClaudeEmulator, Reply

pytestmark = pytest.mark.anyio

BUDGET = {"type": "limit", "max_list_cost": {"amount": "2500", "currency": "USD"}}


async def test_budget_on_the_wire_and_budget_reached_is_a_named_terminal() -> None:
    spec = ml.AgentSpec(name="b", system_prompt="s")
    with ClaudeEmulator([Reply(text="Spent.", stop_reason="budget_reached")]) as emu:
        async with anthropic.AsyncAnthropic(
            base_url=emu.base_url, api_key=emu.api_key, _strict_response_validation=True
        ) as client:
            provider = ClaudeManagedAgents(client=client, session_budget=BUDGET)
            result = await ml.run(provider, agent=spec, prompt="go")
            events = [e async for e in client.beta.sessions.events.list(result.session_id)]
    (create,) = [r for r in emu.requests if r.method == "POST" and r.path == "/v1/sessions"]
    assert create.json["budget"] == BUDGET
    assert result.terminal == ml.Terminal.TERMINATED
    assert result.reason == "budget_reached"
    assert result.stop_reason == {"type": "budget_reached"}
    assert result.text == "Spent."
    idle = [e for e in events if e.type == "session.status_idle"]
    assert idle[-1].stop_reason.type == "budget_reached"  # strictly parsed by the SDK


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "limit"},
        {"type": "limit", "max_list_cost": {"amount": 2500, "currency": "USD"}},
        {"type": "limit", "max_list_cost": {"amount": "025", "currency": "USD"}},
        {"type": "limit", "max_list_cost": {"amount": "25", "currency": "EUR"}},
        {"type": "cap", "max_list_cost": {"amount": "25", "currency": "USD"}},
        "2500",
    ],
)
def test_bad_budgets_are_refused_at_construction(bad: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        ClaudeManagedAgents(api_key="sk-x", base_url="http://127.0.0.1:9", session_budget=bad)
    assert info.value.context["option"] == "session_budget"
