"""Self-hosted sandbox benchmark (``python -m bench selfhosted``): the ratio is against a
baseline measured in this same run, on the same emulator.

A session on a ``self_hosted`` environment makes 20 built-in ``read`` calls (one per model
turn), then answers. Ours: one ``ml.run`` on ``ClaudeManagedAgents(environment=
SelfHostedEnvironment(...))`` (session create, the in-process worker's poll, claim and
serving, the loop to ``end_turn``). Baseline: the SDK alone doing the same work: the
session created, its stream opened and the message sent by hand, the item polled and acked
by hand, the SDK's ``EnvironmentWorker.handle_item`` serving it, the clock stopped at the
``end_turn`` idle read from the stream (as ``ml.run`` returns on it). Both use one
``AsyncAnthropic`` (the baseline's environment-key client is built once, outside the
timing); runs interleave, alternating order, and medians are reported. The figure is per
tool call (the session's time over 20). Target: ratio at most 1.10.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anthropic
from anthropic.lib.environments import EnvironmentWorker

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.providers.claude import SelfHostedEnvironment, agent_toolset
from managedloop.testing import ClaudeEmulator
from managedloop.testing.script import call, say

TOOL_CALLS = 20
RUNS = 9
AGENT = ml.AgentSpec(name="bench-sandbox", host_tools=[agent_toolset()])


def _script() -> list[Any]:
    steps: list[Any] = [
        call("read", {"file_path": "data.txt"}, server=True) for _ in range(TOOL_CALLS)
    ]
    return [*steps, say("done")]


async def _ours(emu: ClaudeEmulator, provider: ClaudeManagedAgents) -> float:
    emu.agent.script = _script()
    start = time.perf_counter()
    result = await ml.run(provider, agent=AGENT, prompt="read it")
    elapsed = time.perf_counter() - start
    assert result.terminal == ml.Terminal.END_TURN, result.terminal
    return elapsed


async def _sdk(
    emu: ClaudeEmulator,
    client: anthropic.AsyncAnthropic,
    poll_client: anthropic.AsyncAnthropic,
    agent_id: str,
    env_id: str,
    key: str,
    workdir: str,
) -> float:
    """The SDK alone: the clock stops when the session's ``end_turn`` idle is read from
    the stream (as ``ml.run`` returns on it), not when the worker lets the item go (its
    ``max_idle`` wind-down is not the tool calls' cost)."""
    emu.agent.script = _script()
    start = time.perf_counter()
    session = await client.beta.sessions.create(agent=agent_id, environment_id=env_id)
    stream = await client.beta.sessions.events.stream(session.id)
    await client.beta.sessions.events.send(
        session.id,
        events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}],
    )
    item = await poll_client.beta.environments.work.poll(env_id, block_ms=999)
    assert item is not None
    await poll_client.beta.environments.work.ack(item.id, environment_id=env_id)
    worker = EnvironmentWorker(
        client, environment_key=key, workdir=workdir, max_idle=0, memory_sync_interval=None
    )
    serving = asyncio.ensure_future(
        worker.handle_item(
            work_id=item.id, environment_id=env_id, session_id=session.id, work_secret=item.secret
        )
    )
    async for event in stream:
        stop = getattr(event, "stop_reason", None)
        if event.type == "session.status_idle" and getattr(stop, "type", None) == "end_turn":
            break
    elapsed = time.perf_counter() - start
    await stream.close()
    await serving  # max_idle=0: it stops the item on its own
    return elapsed


async def _bench() -> None:
    with tempfile.TemporaryDirectory() as workdir, ClaudeEmulator() as emu:
        Path(workdir, "data.txt").write_text("some data\n" * 10)
        async with anthropic.AsyncAnthropic(
            base_url=emu.base_url, api_key=emu.api_key, max_retries=0
        ) as client:
            env = await client.beta.environments.create(
                name="bench", config={"type": "self_hosted"}
            )
            key = emu.work.environment_key(env.id)
            agent = await client.beta.agents.create(
                name="bench", model="claude-sonnet-4-6", tools=[{"type": "agent_toolset_20260401"}]
            )
            sandbox = SelfHostedEnvironment(
                environment_id=env.id, environment_key=key, workdir=workdir
            )
            provider = ClaudeManagedAgents(client=client, agent=agent.id, environment=sandbox)
            ours: list[float] = []
            sdk: list[float] = []
            await _ours(emu, provider)  # warm both paths (imports, pools)
            poll_client = anthropic.AsyncAnthropic(
                base_url=emu.base_url, api_key=None, auth_token=key, max_retries=0
            )
            await _sdk(emu, client, poll_client, agent.id, env.id, key, workdir)
            for i in range(RUNS):
                pair = [
                    lambda: _ours(emu, provider),
                    lambda: _sdk(emu, client, poll_client, agent.id, env.id, key, workdir),
                ]
                if i % 2:
                    pair.reverse()  # alternate the order: neither always runs second
                for which, run in zip((0, 1) if i % 2 == 0 else (1, 0), pair, strict=True):
                    (ours if which == 0 else sdk).append(await run())
            await poll_client.close()
    o = statistics.median(ours) / TOOL_CALLS * 1e3
    s = statistics.median(sdk) / TOOL_CALLS * 1e3
    print(
        f"self-hosted tool call, {TOOL_CALLS} per session, {RUNS} runs each (medians): "
        f"ours {o:.2f} ms vs the SDK's EnvironmentWorker {s:.2f} ms per call: "
        f"ratio {o / s:.3f} (target <= 1.10)"
    )


def main() -> None:
    asyncio.run(_bench())


if __name__ == "__main__":
    main()
