"""Acceptance (issue 12, item 5): a signed webhook from the Claude emulator drives a parked
deployment session to its end; a bad signature changes nothing; a redelivery runs nothing
twice; a failed delivery loses nothing and its retry does not re-run the tool."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

import anthropic
import anyio
import pytest
from anthropic.types.beta import BetaWebhookEvent
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.routing import Mount
from tests.webhooks.conftest import (
    Calls,
    asgi_bridge,
    deployment,
    held_weather_spec,
    make_provider,
    parked,
    run_deployment,
    serve,
    tool_results,
    tool_uses,
    until,
    weather_spec,
)

import managedloop as ml
import managedloop.webhooks as mw
from managedloop.stores import MemoryStore
from managedloop.testing import ClaudeEmulator

pytestmark = pytest.mark.anyio

SECRET = "whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM="
NOW = 1_900_000_000.0  # the receiver's and the emulator's clock: no wall-clock in these tests


def _clock() -> float:
    return NOW


async def test_a_signed_webhook_drives_a_parked_session_to_its_end(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    calls = Calls()
    dep_id, spec = await deployment(client, weather_spec(calls))
    outcomes: list[mw.WebhookOutcome] = []
    hooks = mw.app(
        make_provider(client),
        agent=spec,
        secret=SECRET,
        store=MemoryStore(),
        clock=_clock,
        on_outcome=outcomes.append,
    )
    site = Starlette(routes=[Mount("/hooks", app=hooks)])  # mounted in a real framework
    emu.webhooks.clock = _clock
    async with serve(asgi_bridge(site, "/hooks/claude")) as url:
        emu.webhooks.subscribe(f"{url}/hooks/claude", secret=SECRET)
        run = await client.beta.deployments.run(dep_id)
        sid = run.session_id
        assert sid is not None
        assert run.trigger_context.type == "manual"
        # requires_action + status_idled for the parked idle, status_idled for the last one.
        deliveries = await emu.webhooks.delivered(3)
        await hooks.drain()

    assert [d.status for d in deliveries] == [202, 202, 202]
    for d in deliveries:  # the SDK's own types and verifier accept every delivery
        assert BetaWebhookEvent.model_validate_json(d.body).data.id == sid
        assert d.headers["webhook-id"] == json.loads(d.body)["id"]
        # standardwebhooks signs it the same (its verify() reads the wall clock: not used).
        stamp = dt.datetime.fromtimestamp(NOW, tz=dt.UTC)
        theirs = Webhook(SECRET).sign(d.webhook_id, stamp, d.body.decode())
        assert d.headers["webhook-signature"] == theirs
    assert {d.event_type for d in deliveries} == {"session.requires_action", "session.status_idled"}
    uses = tool_uses(emu, sid)
    assert len(uses) == 1
    assert tool_results(emu, sid) == uses  # each pending tool use answered exactly once
    assert calls.log == ["Paris"]
    assert emu.events(sid)[-1]["stop_reason"] == {"type": "end_turn"}
    statuses = sorted(o.status for o in outcomes)
    assert statuses == ["completed", "nothing_pending", "nothing_pending"]
    (done,) = [o for o in outcomes if o.status == "completed"]
    assert done.session_id == sid
    assert done.result is not None
    assert done.result.terminal == ml.Terminal.END_TURN
    assert [u.name for u in done.result.custom_tool_uses] == ["get_weather"]
    assert (await client.beta.sessions.retrieve(sid)).deployment_id == dep_id


async def test_a_bad_signature_or_a_stale_timestamp_is_refused_and_changes_nothing(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    calls = Calls()
    dep_id, spec = await deployment(client, weather_spec(calls))
    store = MemoryStore()
    hooks = mw.app(
        make_provider(client), agent=spec, secret=b"the receiver's key", store=store, clock=_clock
    )
    async with serve(asgi_bridge(hooks)) as url:
        emu.webhooks.subscribe(url, events=["session.requires_action"])  # another secret
        good = emu.webhooks.subscribe(url, events=["session.status_idled"])
        emu.webhooks.clock = lambda: NOW - mw.TOLERANCE - 1  # and a stale timestamp
        hooks_good_secret = mw.app(make_provider(client), agent=spec, secret=good, clock=_clock)
        assert hooks_good_secret is not hooks
        sid = await run_deployment(client, dep_id)
        await parked(emu, sid)
        before = list(emu.requests)
        deliveries = await emu.webhooks.delivered(2)
        await hooks.drain()
        # The stale one, checked against a receiver that holds its secret.
        stale = deliveries[[d.event_type for d in deliveries].index("session.status_idled")]
        with pytest.raises(ml.ManagedLoopError) as info:
            await hooks_good_secret.handle(stale.body, stale.headers)
        assert info.value.code == "stale_webhook"

    assert sorted(d.status for d in deliveries) == [401, 401]
    assert emu.requests == before  # the request log is unchanged: nothing attached or sent
    assert calls.log == []
    assert store.scan("") == {}
    assert emu.call(lambda: list(emu.session(sid).open_calls)) == tool_uses(emu, sid)


async def test_a_redelivered_webhook_does_not_run_tools_again(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    calls = Calls()
    release = anyio.Event()  # the tool is still running when the redelivery arrives
    dep_id, spec = await deployment(client, held_weather_spec(calls, release))
    outcomes: list[mw.WebhookOutcome] = []
    hooks = mw.app(
        make_provider(client),
        agent=spec,
        secret="whsec_a2V5",
        store=MemoryStore(),
        clock=_clock,
        on_outcome=outcomes.append,
    )
    emu.webhooks.clock = _clock
    async with serve(asgi_bridge(hooks)) as url:
        emu.webhooks.subscribe(url, secret="whsec_a2V5", events=["session.requires_action"])
        sid = await run_deployment(client, dep_id)
        (first,) = await emu.webhooks.delivered(1)
        await until(lambda: bool(calls.log))
        emu.webhooks.redeliver(first)  # while the first delivery's tool is running
        second = (await emu.webhooks.delivered(2))[1]
        release.set()
        await hooks.drain()
        emu.webhooks.redeliver(first)  # and once it is done
        third = (await emu.webhooks.delivered(3))[2]
        await hooks.drain()

    assert (first.status, second.status, third.status) == (202, 200, 200)
    assert second.webhook_id == third.webhook_id == first.webhook_id
    assert json.loads(second.answer)["status"] == json.loads(third.answer)["status"] == "duplicate"
    assert calls.log == ["Paris"]
    assert tool_results(emu, sid) == tool_uses(emu, sid)
    assert [o.status for o in outcomes] == ["completed"]


async def test_a_failed_delivery_keeps_the_tool_use_pending_and_its_retry_does_not_rerun_it(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    calls = Calls()
    dep_id, spec = await deployment(client, weather_spec(calls))
    store = MemoryStore()
    made: list[Any] = []

    async def factory() -> Any:  # a provider per delivery, closed after it
        made.append(make_provider(client))
        return made[-1]

    secret = "whsec_cmV0cnkta2V5"
    hooks = mw.Webhooks(factory, agent=spec, secret=secret, store=store, clock=_clock)
    emu.webhooks.clock = _clock

    async def plain(body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        try:  # the plain-function face, as any framework would call it
            outcome = await hooks.handle(body, headers)
        except ml.ManagedLoopError as exc:
            return 500, json.dumps({"error": exc.code}).encode()
        return 200, json.dumps(outcome.to_json()).encode()

    # Every tool-result send fails (after the tool ran): the run fails.
    emu.faults.fault_path, emu.faults.fault_method = "/events", "POST"
    emu.faults.server_errors = 1000
    caplog.set_level(logging.ERROR, logger="managedloop.webhooks")
    async with serve(plain) as url:
        emu.webhooks.subscribe(url, secret=secret, events=["session.requires_action"])
        sid = await run_deployment(client, dep_id)
        (first,) = await emu.webhooks.delivered(1)
        assert first.status == 500
        assert calls.log == ["Paris"]
        assert tool_results(emu, sid) == []  # nothing landed: still pending on the host
        assert emu.call(lambda: list(emu.session(sid).open_calls)) == tool_uses(emu, sid)
        (use_id,) = tool_uses(emu, sid)
        assert store.get(f"{mw.STORE_PREFIX}tool:{sid}:{use_id}")["result"]["text"] == (
            "Sunny in Paris"
        )
        assert "stay pending on the host" in caplog.text
        assert secret not in caplog.text
        assert emu.api_key not in caplog.text

        emu.faults.server_errors = 0
        emu.webhooks.redeliver(first)  # the host's retry: same webhook-id
        second = (await emu.webhooks.delivered(2))[1]

    assert second.status == 200
    assert calls.log == ["Paris"]  # the stored result was sent; the tool did not run again
    assert tool_results(emu, sid) == [use_id]
    assert emu.events(sid)[-1]["stop_reason"] == {"type": "end_turn"}
    assert len(made) == 2


async def test_a_tool_use_an_earlier_delivery_started_is_answered_with_an_error_not_rerun(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    calls = Calls()
    dep_id, spec = await deployment(client, weather_spec(calls))
    store = MemoryStore()
    sid = await run_deployment(client, dep_id)
    await parked(emu, sid)
    (use_id,) = tool_uses(emu, sid)
    store.put(f"{mw.STORE_PREFIX}tool:{sid}:{use_id}", {"state": "started", "webhook_id": "w0"})
    body, headers = _signed("msg_1", sid, "session.requires_action", b"k")
    outcome = await mw.handle(
        body,
        headers,
        provider=make_provider(client),
        agent=spec,
        secret=b"k",
        store=store,
        clock=_clock,
    )
    assert outcome.status == "completed"
    assert outcome.from_store == (use_id,)
    assert calls.log == []
    (answer,) = [e for e in emu.sent_events(sid) if e["type"] == "user.custom_tool_result"]
    assert answer["is_error"] is True
    assert "not run again" in answer["content"][0]["text"]


async def test_events_that_run_nothing(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    calls = Calls()
    _, spec = await deployment(client, weather_spec(calls))
    hooks = mw.app(
        make_provider(client), agent=spec, secret=b"k", store=MemoryStore(), clock=_clock
    )
    before = len(emu.requests)
    body, headers = _signed("msg_2", "drun_1", "deployment_run.started", b"k")
    assert (await hooks.handle(body, headers)).status == "ignored"
    assert len(emu.requests) == before
    # A session that waits on nothing: attached, nothing run.
    handle = await ml.provision(make_provider(client), spec)  # the cached handle
    session = await client.beta.sessions.create(
        agent=handle.agent_id, environment_id=handle.environment_id
    )
    body, headers = _signed("msg_3", session.id, "session.status_idled", b"k")
    outcome = await hooks.handle(body, headers)
    assert (outcome.status, outcome.session_id, outcome.result) == (
        "nothing_pending",
        session.id,
        None,
    )
    assert calls.log == []
    # A delivery left "running" by a worker that died counts as failed after the lease.
    store = MemoryStore()
    hooks = mw.app(make_provider(client), agent=spec, secret=b"k", store=store, clock=_clock)
    for wid, since, expected in (
        ("w1", NOW - 10, "duplicate"),
        ("w2", NOW - 3601, "nothing_pending"),
    ):
        store.put(f"{mw.STORE_PREFIX}delivery:{wid}", {"state": "running", "since": since})
        body, headers = _signed(wid, session.id, "session.status_idled", b"k")
        assert (await hooks.handle(body, headers)).status == expected
    with pytest.raises(ml.ManagedLoopError) as info:  # a handled type needs a session id
        await hooks.handle(*_signed("msg_4", "../x", "session.requires_action", b"k"))
    assert info.value.code == "malformed_webhook"


def _signed(
    webhook_id: str, subject: str, kind: str, key: bytes, now: float = NOW
) -> tuple[bytes, dict[str, str]]:
    payload = {
        "id": webhook_id,
        "type": "event",
        "created_at": "2030-03-17T17:46:40Z",
        "data": {"id": subject, "type": kind, "organization_id": "o", "workspace_id": "w"},
    }
    body = json.dumps(payload).encode()
    stamp = int(now)
    return body, {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": mw.sign(key, webhook_id, stamp, body),
    }


async def test_two_deliveries_for_one_idle_at_once_run_the_tool_once(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    calls = Calls()
    gate = anyio.Event()
    dep_id, spec = await deployment(client, held_weather_spec(calls, gate))
    sid = await run_deployment(client, dep_id)
    await parked(emu, sid)
    store = MemoryStore()
    outcomes: list[mw.WebhookOutcome] = []

    async def deliver(wid: str, kind: str) -> None:
        body, headers = _signed(wid, sid, kind, b"k")
        outcomes.append(  # the plain function, called twice at once (two receivers)
            await mw.handle(
                body,
                headers,
                provider=make_provider(client),
                agent=spec,
                secret=b"k",
                store=store,
                clock=_clock,
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(deliver, "w-a", "session.requires_action")
        tg.start_soon(deliver, "w-b", "session.status_idled")
        await until(lambda: bool(calls.log))
        gate.set()
    assert calls.log == ["Paris"]
    assert sorted(o.status for o in outcomes) == ["completed", "nothing_pending"]
    assert tool_results(emu, sid) == tool_uses(emu, sid)


async def test_old_records_are_swept(emu: ClaudeEmulator, client: anthropic.AsyncAnthropic) -> None:
    now = [NOW]
    store = MemoryStore()
    _, spec = await deployment(client, weather_spec(Calls()))
    hooks = mw.app(
        make_provider(client),
        agent=spec,
        secret=b"k",
        store=store,
        clock=lambda: now[0],
        retention=100.0,
    )
    handle = await ml.provision(make_provider(client), spec)
    session = await client.beta.sessions.create(
        agent=handle.agent_id, environment_id=handle.environment_id
    )
    store.put("unrelated", {"at": 0})  # not ours: never touched
    await hooks.handle(*_signed("w-old", session.id, "session.status_idled", b"k"))
    assert f"{mw.STORE_PREFIX}delivery:w-old" in store.scan(mw.STORE_PREFIX)
    now[0] += mw.PRUNE_INTERVAL + 1  # past the retention, and time for the next sweep
    await hooks.handle(*_signed("w-new", session.id, "session.status_idled", b"k", now[0]))
    assert sorted(store.scan("")) == [f"{mw.STORE_PREFIX}delivery:w-new", "unrelated"]


async def test_a_scheduled_run_is_driven_by_its_webhook_too(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    calls = Calls()
    start = dt.datetime(2030, 1, 7, 8, 59, tzinfo=dt.UTC)
    emu.deployments.clock = lambda: start
    _, spec = await deployment(
        client,
        weather_spec(calls),
        schedule={"type": "cron", "expression": "0 9 * * *", "timezone": "UTC"},
    )
    hooks = mw.app(
        make_provider(client), agent=spec, secret=SECRET, store=MemoryStore(), clock=_clock
    )
    emu.webhooks.clock = _clock
    async with serve(asgi_bridge(hooks)) as url:
        emu.webhooks.subscribe(url, secret=SECRET, events=["session.requires_action"])
        (fired,) = emu.deployments.tick(start + dt.timedelta(minutes=1))
        (delivery,) = await emu.webhooks.delivered(1)
        await hooks.drain()
    sid = fired["session_id"]
    assert (delivery.status, delivery.session_id) == (202, sid)
    assert calls.log == ["Paris"]
    assert tool_results(emu, sid) == tool_uses(emu, sid)
    assert emu.events(sid)[-1]["stop_reason"] == {"type": "end_turn"}
