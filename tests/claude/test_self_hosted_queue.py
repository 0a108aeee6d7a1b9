"""The emulator's work queue, judged by the SDK: its ``EnvironmentWorker`` completes a
session, and every work endpoint is called through the SDK with strict response
validation (so each answer parses into ``BetaSelfHostedWork`` and its siblings)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from anthropic.lib.environments import EnvironmentWorker
from anthropic.types.beta.environments import BetaHeartbeatPreconditionFailedError

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.testing import ClaudeEmulator
from managedloop.testing.script import Reply, say
from selfhosted_kit import SCRIPT, SPEC, answers_per_use, builtin, self_hosted_env, strict_client

pytestmark = pytest.mark.anyio


@pytest.fixture
def emu() -> Iterator[ClaudeEmulator]:
    with ClaudeEmulator([Reply(tool_calls=[builtin("bash", command="true")]), say("ok")]) as e:
        yield e


def bearer(emu: ClaudeEmulator, token: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=emu.base_url,
        api_key=None,
        auth_token=token,
        max_retries=0,
        _strict_response_validation=True,
    )


async def test_the_sdks_environment_worker_completes_a_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with ClaudeEmulator(SCRIPT) as emu:
        async with strict_client(emu) as client:
            env_id, key = await self_hosted_env(client, emu)
            worker = EnvironmentWorker(
                client,
                environment_id=env_id,
                environment_key=key,
                workdir=tmp_path,
                max_idle=0,
                memory_sync_interval=None,
            )
            task = asyncio.ensure_future(worker.run())
            try:
                provider = ClaudeManagedAgents(client=client, environment=env_id)
                result = await ml.run(provider, agent=SPEC, prompt="go")
            finally:
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
        sid = result.session_id or ""
        assert result.terminal == ml.Terminal.END_TURN
        assert result.text == "done"
        assert (tmp_path / "note.txt").read_text() == "hi sandbox\n"
        counts = answers_per_use(emu, sid)
        assert len(counts) == 7
        assert set(counts.values()) == {1}


async def test_work_endpoints_as_the_service_answers_them(emu: ClaudeEmulator) -> None:
    async with strict_client(emu) as client:
        agent = await client.beta.agents.create(name="a", model="claude-sonnet-4-6")
        await strict_work_round_trip(client, emu, agent.id)


async def strict_work_round_trip(
    client: anthropic.AsyncAnthropic, emu: ClaudeEmulator, agent_id: str
) -> None:
    """Every work route, through ``client`` (strict) and bearer copies of it; also run by
    ``test_strict_sdk.py``'s every-route check."""
    if True:
        env_id, key = await self_hosted_env(client, emu)
        async with bearer(emu, key) as worker_client:
            work = worker_client.beta.environments.work
            assert await work.poll(env_id) is None  # empty: 200 with body null
            assert await work.poll(env_id, block_ms=1) is None
            with pytest.raises(anthropic.BadRequestError):
                await work.poll(env_id, block_ms=0)
            with pytest.raises(anthropic.AuthenticationError):
                await client.beta.environments.work.poll(env_id)  # the API key: refused

            session = await client.beta.sessions.create(agent=agent_id, environment_id=env_id)
            stats = await work.stats(env_id)
            assert (stats.depth, stats.pending) == (1, 0)

            item = await work.poll(env_id, block_ms=999, anthropic_worker_id="w-1")
            assert item is not None
            assert item.data.id == session.id
            assert item.state == "queued"
            secret = item.secret or ""
            token = json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))
            assert token["sessions_token"]
            stats = await work.stats(env_id)
            assert (stats.depth, stats.pending, stats.workers_polling) == (0, 1, 1)

            acked = await work.ack(item.id, environment_id=env_id)
            assert acked.state == "starting"
            with pytest.raises(anthropic.ConflictError):
                await work.ack(item.id, environment_id=env_id)

        async with bearer(emu, token["sessions_token"]) as item_client:
            work = item_client.beta.environments.work
            beat = await work.heartbeat(
                item.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT"
            )
            assert beat.lease_extended is True
            assert beat.state == "active"
            with pytest.raises(BetaHeartbeatPreconditionFailedError) as stale:
                await work.heartbeat(
                    item.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT"
                )
            assert stale.value.status_code == 412
            assert stale.value.details.current_state.last_heartbeat == beat.last_heartbeat
            again = await work.heartbeat(
                item.id, environment_id=env_id, expected_last_heartbeat=beat.last_heartbeat
            )
            assert again.last_heartbeat != beat.last_heartbeat
            # The token reaches its session's own endpoints too (the worker reads it).
            assert (await item_client.beta.sessions.retrieve(session.id)).id == session.id

        async with bearer(emu, key) as worker_client:
            listed = await worker_client.beta.environments.work.list(env_id)
            assert [w.id for w in listed.data] == [item.id]
            with pytest.raises(anthropic.AuthenticationError):
                await worker_client.beta.environments.work.retrieve(item.id, environment_id=env_id)
        with pytest.raises(anthropic.AuthenticationError):
            await client.beta.environments.work.list(env_id)  # list takes the environment key

        got = await client.beta.environments.work.retrieve(item.id, environment_id=env_id)
        assert got.secret is None
        updated = await client.beta.environments.work.update(
            item.id, environment_id=env_id, metadata={"a": "1", "b": "2"}
        )
        assert updated.metadata == {"a": "1", "b": "2"}
        updated = await client.beta.environments.work.update(
            item.id, environment_id=env_id, metadata={"a": None}
        )
        assert updated.metadata == {"b": "2"}

        async with bearer(emu, key) as worker_client:
            work = worker_client.beta.environments.work
            stopped = await work.stop(item.id, environment_id=env_id, force=True)
            assert stopped.state == "stopped"
            with pytest.raises(anthropic.ConflictError):
                await work.stop(item.id, environment_id=env_id, force=True)
            after = await work.heartbeat(
                item.id, environment_id=env_id, expected_last_heartbeat="anything"
            )
            assert after.lease_extended is False  # stopped: no precondition check


async def test_reclaim_of_an_unacked_and_of_a_dead_workers_item(emu: ClaudeEmulator) -> None:
    now = [0.0]
    emu.work.clock = lambda: now[0]
    async with strict_client(emu) as client:
        env_id, key = await self_hosted_env(client, emu)
        agent = await client.beta.agents.create(name="a", model="claude-sonnet-4-6")
        await client.beta.sessions.create(agent=agent.id, environment_id=env_id)
        async with bearer(emu, key) as worker_client:
            work = worker_client.beta.environments.work
            first = await work.poll(env_id)
            assert first is not None
            assert await work.poll(env_id) is None  # offered, not acked: not offered again
            now[0] += 5.0  # reclaim_older_than_ms (5000) later
            again = await work.poll(env_id)
            assert again is not None
            assert again.id == first.id
            await work.ack(again.id, environment_id=env_id)
            assert await work.poll(env_id) is None  # claimed: its lease is held
            emu.work.expire_leases()  # the worker died: no heartbeat renews the lease
            reclaimed = await work.poll(env_id)
            assert reclaimed is not None
            assert reclaimed.id == first.id
            assert reclaimed.state == "queued"


async def test_a_cloud_environment_has_no_queue(emu: ClaudeEmulator) -> None:
    async with strict_client(emu) as client:
        env = await client.beta.environments.create(name="cloud")
        with pytest.raises(ValueError, match="not a self_hosted"):
            emu.work.environment_key(env.id)
        with pytest.raises(anthropic.BadRequestError, match="not self_hosted"):
            await client.beta.environments.work.poll(env.id)
