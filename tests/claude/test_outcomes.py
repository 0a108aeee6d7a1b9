"""Issue 21 item 4: every Claude outcome named, and ``session.usage`` folded into ``Usage``.

``refusal``, ``retries_exhausted`` and ``budget_reached`` each end ``terminated`` with
their own ``reason`` (the idle's ``stop_details`` kept on the result); the emulator's
``session.usage`` snapshots (tokens, list cost, active seconds) and the per-request cache
counts reach ``result.usage`` and the telemetry stop events, counted once per request
(a resumed session does not count its past again).
"""

from __future__ import annotations

import math
from typing import Any

import anthropic
import pytest
from anthropic.types.beta import BetaManagedAgentsSessionUsageEvent
from anthropic.types.beta.sessions import BetaManagedAgentsSessionStatusIdleEvent

import managedloop as ml
from managedloop import telemetry
from managedloop.providers.claude import _wire
from managedloop.testing import ClaudeEmulator, Fail, Reply, call, say
from managedloop.testing._claude.session import REFUSAL_DETAILS

from .conftest import WEATHER, provisioned

pytestmark = pytest.mark.anyio

BUDGET = {"type": "limit", "max_list_cost": {"amount": "50", "currency": "USD"}}


async def test_a_refusal_is_named_and_keeps_its_details(emu: ClaudeEmulator, client: Any) -> None:
    emu.agent.script = [Reply(text="I can't help with that.", stop_reason="refusal")]
    result = await ml.run(await provisioned(client), agent=WEATHER, prompt="Go")
    assert (result.terminal, result.reason) == (ml.Terminal.TERMINATED, "refusal")
    assert result.stop_reason == {"type": "refusal"}
    assert result.stop_details == REFUSAL_DETAILS
    (idle,) = [e for e in result.events if e["type"] == "session.status_idle"]
    assert BetaManagedAgentsSessionStatusIdleEvent.model_validate(idle).stop_details is not None
    assert ml.SessionResult.from_dict(result.to_dict()).stop_details == REFUSAL_DETAILS


async def test_retries_exhausted_is_named(emu: ClaudeEmulator, client: Any) -> None:
    emu.agent.script = [Fail(message="overloaded", kind="model_overloaded_error")]
    result = await ml.run(await provisioned(client), agent=WEATHER, prompt="Go")
    assert (result.terminal, result.reason) == (ml.Terminal.TERMINATED, "retries_exhausted")
    assert result.stop_reason == {"type": "retries_exhausted"}
    assert result.stop_details is None


async def test_a_spent_budget_is_named_with_its_cost(emu: ClaudeEmulator, client: Any) -> None:
    # 200k input + 10k output tokens at the emulated prices: 60 + 15 = 75 cents > 50.
    emu.agent.script = [say("Expensive.", usage=(200_000, 10_000))]
    provider = await provisioned(client, session_budget=BUDGET)
    result = await ml.run(provider, agent=WEATHER, prompt="Go")
    assert (result.terminal, result.reason) == (ml.Terminal.TERMINATED, "budget_reached")
    assert result.usage.cost_usd == pytest.approx(0.75)


async def test_usage_carries_cache_tokens_cost_and_active_time(client: Any) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    handle = telemetry.attach(
        lambda name, _m, meta: events.append((name, dict(meta))),
        ["managedloop.session.request.stop"],
    )
    try:
        with ClaudeEmulator(
            [call("get_weather", {"city": "Paris"}, usage=(100_000, 0)), say("Sunny.")],
            cache_tokens=1000,
        ) as emu:
            async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
                result = await ml.run(await provisioned(c), agent=WEATHER, prompt="Go")
            snapshots = [e for e in emu.events() if e["type"] == "session.usage"]
    finally:
        telemetry.detach(handle)
    for snapshot in snapshots:
        BetaManagedAgentsSessionUsageEvent.model_validate(snapshot)
    usage = result.usage
    # Two model requests: the first writes the cached prompt, the second reads it.
    assert (usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (1000, 1000)
    assert usage.input_tokens == 100_000 + 10
    last = snapshots[-1]["usage"]
    assert usage.cost_usd == pytest.approx(int(last["list_cost"]["amount"]) / 100)
    assert usage.cost_usd == pytest.approx(0.30)  # 100,010 input tokens at $3/M, floored
    assert usage.active_seconds is not None
    assert math.isfinite(usage.active_seconds)
    assert usage.active_seconds >= 0
    ((_, stop),) = events
    assert stop["cache_read_input_tokens"] == 1000
    assert stop["cache_creation_input_tokens"] == 1000
    assert stop["cost_usd"] == pytest.approx(0.30)


async def test_a_resumed_session_counts_only_its_new_cost(emu: ClaudeEmulator, client: Any) -> None:
    emu.agent.script = [say("One.", usage=(100_000, 0)), say("Two.", usage=(200_000, 0))]
    provider = await provisioned(client)
    first = await ml.run(provider, agent=WEATHER, prompt="a")
    second = await ml.run(provider, agent=WEATHER, prompt="b", resume=first)
    assert first.usage.cost_usd == pytest.approx(0.30)
    assert second.usage.cost_usd == pytest.approx(0.60)  # 90 cents in all, 30 of them before


def test_hostile_usage_snapshots_are_ignored_not_propagated() -> None:
    before = _wire.usage_mark(
        {"list_cost": {"amount": "100", "currency": "USD"}, "active_seconds": 2.0}
    )
    for snapshot in (
        {"list_cost": {"amount": "1e9", "currency": "USD"}, "active_seconds": float("nan")},
        {"list_cost": {"amount": "²", "currency": "USD"}, "active_seconds": True},
        {"list_cost": {"amount": "500", "currency": "EUR"}, "active_seconds": -5},
        {"list_cost": "free", "input_tokens": -3, "cache_creation": "x"},
    ):
        mark = _wire.usage_mark(snapshot, before)
        assert (mark.cost_usd, mark.active_seconds, mark.input_tokens) == (1.0, 2.0, 0)
    usage = _wire._usage([{"type": "session.usage", "usage": {"active_seconds": 1.0}}], before)
    assert usage is not None
    assert (usage.cost_usd, usage.active_seconds) == (0.0, 0.0)  # never negative
