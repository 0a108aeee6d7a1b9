"""The emulator's deployments: every route through the SDK's strict validation, manual
runs, cron schedules fired by an injected clock (never real time), and the sessions they
start parked on a custom tool until a client attaches."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import anthropic
import pytest
from anthropic.types import ErrorResponse
from anthropic.types.beta import BetaManagedAgentsDeployment, BetaManagedAgentsDeploymentRun
from tests.webhooks.conftest import (
    Calls,
    deployment,
    parked,
    run_deployment,
    tool_uses,
    weather_spec,
)

from managedloop.testing import ClaudeEmulator
from managedloop.testing._claude.deployments import CronError, parse_cron

pytestmark = pytest.mark.anyio

UTC = dt.UTC
T0 = dt.datetime(2030, 1, 7, 8, 58, tzinfo=UTC)  # a Monday

TOOL = {
    "type": "custom",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
HELLO = [{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]


async def strict_deployment_round_trip(
    strict: anthropic.AsyncAnthropic, emu: ClaudeEmulator, agent_id: str, env_id: str
) -> None:
    """One call to every deployment route through a strict client (also run by
    tests/claude/test_strict_sdk.py, which checks that every emulator route is covered)."""
    deps, runs = strict.beta.deployments, strict.beta.deployment_runs
    emu.deployments.clock = lambda: T0
    dep = await deps.create(
        agent=agent_id,
        environment_id=env_id,
        initial_events=HELLO,  # type: ignore[arg-type]
        name="nightly",
        schedule={"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Paris"},  # type: ignore[typeddict-unknown-key]
    )
    assert dep.schedule is not None
    assert dep.schedule.upcoming_runs_at is not None
    assert [dep.id] == [d.id async for d in deps.list()]
    assert (await deps.retrieve(dep.id)).name == "nightly"
    assert (await deps.update(dep.id, description="d")).description == "d"
    paused = await deps.pause(dep.id)
    assert (paused.status, paused.paused_reason and paused.paused_reason.type) == (
        "paused",
        "manual",
    )
    run = await deps.run(dep.id)  # a manual run is allowed while paused
    assert run.trigger_context.type == "manual"
    assert (await deps.unpause(dep.id)).status == "active"
    assert [r.id async for r in runs.list(deployment_id=dep.id)] == [run.id]
    assert (await runs.retrieve(run.id)).session_id == run.session_id
    assert run.session_id is not None
    assert (await strict.beta.sessions.retrieve(run.session_id)).deployment_id == dep.id
    assert (await deps.archive(dep.id)).archived_at is not None


async def test_every_deployment_route_passes_strict_validation(emu: ClaudeEmulator) -> None:
    async with anthropic.AsyncAnthropic(
        base_url=emu.base_url, api_key=emu.api_key, max_retries=0, _strict_response_validation=True
    ) as strict:
        agent = await strict.beta.agents.create(name="a", model="claude-sonnet-4-6", tools=[TOOL])  # type: ignore[list-item]
        env = await strict.beta.environments.create(name="e")
        await strict_deployment_round_trip(strict, emu, agent.id, env.id)
        for record in emu.deployments.records.values():
            BetaManagedAgentsDeployment.model_validate(record)
        for record in emu.deployments.runs.values():
            BetaManagedAgentsDeploymentRun.model_validate(record)
        # Refusals use the API's error envelope.
        archived = next(iter(emu.deployments.records))
        refusals = [
            (anthropic.NotFoundError, strict.beta.deployments.retrieve("depl_missing")),
            (
                anthropic.BadRequestError,
                strict.beta.deployments.create(
                    agent=agent.id, environment_id=env.id, initial_events=[], name="x"
                ),
            ),
            (
                anthropic.BadRequestError,
                strict.beta.deployments.create(
                    agent=agent.id,
                    environment_id=env.id,
                    initial_events=HELLO,  # type: ignore[arg-type]
                    name="x",
                    schedule={"type": "cron", "expression": "61 * * * *", "timezone": "UTC"},  # type: ignore[typeddict-unknown-key]
                ),
            ),
            (anthropic.ConflictError, strict.beta.deployments.run(archived)),
            (anthropic.NotFoundError, strict.beta.deployment_runs.retrieve("drun_missing")),
        ]
        for kind, call in refusals:
            with pytest.raises(kind) as info:
                await call
            ErrorResponse.model_validate(info.value.body)


async def test_a_manual_run_parks_its_session_on_the_custom_tool(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    calls = Calls()
    dep_id, _ = await deployment(client, weather_spec(calls))
    sid = await run_deployment(client, dep_id)
    await parked(emu, sid)
    session = await client.beta.sessions.retrieve(sid)
    assert (session.status, session.deployment_id) == ("idle", dep_id)
    idle = emu.events(sid)[-1]
    assert idle["stop_reason"] == {"type": "requires_action", "event_ids": tool_uses(emu, sid)}
    assert calls.log == []  # nobody attached: nothing ran


async def test_schedules_fire_only_on_tick_once_per_minute_and_not_while_paused(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    emu.deployments.clock = lambda: T0
    dep_id, _ = await deployment(
        client,
        weather_spec(Calls()),
        schedule={"type": "cron", "expression": "0 9 * * 1-5", "timezone": "UTC"},
    )
    dep = await client.beta.deployments.retrieve(dep_id)
    assert dep.schedule is not None
    assert [t.isoformat() for t in dep.schedule.upcoming_runs_at or []][:2] == [
        "2030-01-07T09:00:00+00:00",
        "2030-01-08T09:00:00+00:00",
    ]
    assert emu.deployments.tick(T0 + dt.timedelta(minutes=1)) == []  # 08:59: not yet
    fired = emu.deployments.tick(T0 + dt.timedelta(minutes=2))  # 09:00
    assert [r["trigger_context"] for r in fired] == [
        {"type": "schedule", "scheduled_at": "2030-01-07T09:00:00Z"}
    ]
    assert emu.deployments.tick(T0 + dt.timedelta(minutes=2)) == []  # the same instant again
    await client.beta.deployments.pause(dep_id)
    assert emu.deployments.tick(T0 + dt.timedelta(days=1, minutes=2)) == []  # paused: none
    await client.beta.deployments.unpause(dep_id)
    # Saturday and Sunday are skipped; Wednesday 09:00 fires.
    later = emu.deployments.tick(dt.datetime(2030, 1, 9, 9, 30, tzinfo=UTC))
    assert [r["trigger_context"]["scheduled_at"] for r in later] == ["2030-01-09T09:00:00Z"]
    listed = [r async for r in client.beta.deployment_runs.list(trigger_type="schedule")]
    assert len(listed) == 2
    retrieved = await client.beta.deployments.retrieve(dep_id)
    assert retrieved.schedule is not None
    assert retrieved.schedule.last_run_at == dt.datetime(2030, 1, 9, 9, tzinfo=UTC)
    with pytest.raises(ValueError, match="aware"):
        emu.deployments.tick(dt.datetime(2030, 1, 9))


def test_cron_fields_and_time_zones() -> None:
    cron = parse_cron("*/20 9-10 * * 0,7")  # Sundays (0 and 7), every 20 min, 9-10h
    paris = ZoneInfo("Europe/Paris")
    start = dt.datetime(2030, 1, 5, 0, 0, tzinfo=UTC)  # Saturday
    fires = cron.fires(paris, start, start + dt.timedelta(days=2))
    assert [f.isoformat() for f in fires] == [
        f"2030-01-06T{h:02d}:{m:02d}:00+00:00" for h in (8, 9) for m in (0, 20, 40)
    ]  # 9-10h in Paris is 8-9h UTC in winter
    both = parse_cron("0 0 13 * 5")  # POSIX: the 13th OR a Friday
    days = [f.day for f in both.fires(paris, start, start + dt.timedelta(days=14))]
    assert days == [10, 12, 17]  # Fri 11th, Sun 13th, Fri 18th at Paris midnight (UTC day before)
    for bad in ("* * * *", "60 * * * *", "* * * * 8", "*/0 * * * *", "a * * * *", "5-1 * * * *"):
        with pytest.raises(CronError):
            parse_cron(bad)
