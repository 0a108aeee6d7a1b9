"""Claude Managed Agents benchmarks (``python -m bench claude``). Every ratio is against a
baseline measured in this same run, on the same emulator.

(a) Per-turn overhead: a session with 20 custom tool calls (one per turn, then an answer:
    21 turns) on the loopback ``ClaudeEmulator``. ``ml.run`` on ``ClaudeManagedAgents``
    versus the SDK's own ``client.beta.sessions.events.tool_runner`` answering the same 20
    calls on the same emulator (the user message sent by hand, the runner stopping at the
    final idle with ``max_idle=0``). Both use one ``AsyncAnthropic``; runs interleave and
    medians are reported. Target: ratio at most 1.10.
(b) Stream decoding: events per second through our ``SSEDecoder`` (raw dicts) versus the
    SDK's ``AsyncStream`` (pydantic models), over the same recorded SSE bytes (a real
    emulator session's frames, repeated) served from memory in 4 KiB chunks.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

import anthropic
import httpx2
from anthropic.lib.tools import beta_async_tool
from anthropic.types.beta.sessions import BetaManagedAgentsStreamSessionEvents

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.providers.claude._sse import SSEDecoder
from managedloop.testing import ClaudeEmulator, call, say

TOOL_CALLS = 20
RUNS = 15  # interleaved runs per loop in (a); each is ~21 turns
FRAMES = 20_000  # events decoded per run in (b)
CHUNK = 4096


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


TOOL = ml.tool(inline=True)(get_weather)
AGENT = ml.AgentSpec(name="bench", tools=[TOOL])


@beta_async_tool(name="get_weather")
async def sdk_get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


def _script() -> list[Any]:
    return [call("get_weather", {"city": f"c{i}"}) for i in range(TOOL_CALLS)] + [say("done")]


async def _ours(emu: ClaudeEmulator, provider: ClaudeManagedAgents) -> float:
    emu.agent.script = _script()
    start = time.perf_counter()
    result = await ml.run(provider, agent=AGENT, prompt="Go")
    elapsed = time.perf_counter() - start
    assert result.turns == TOOL_CALLS + 1, result
    assert result.text == "done", result
    return elapsed


async def _sdk_runner_run(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic, handle: Any
) -> float:
    emu.agent.script = _script()
    start = time.perf_counter()
    session = await client.beta.sessions.create(
        agent=handle.agent_id, environment_id=handle.environment_id
    )
    runner = client.beta.sessions.events.tool_runner(
        session.id, tools=[sdk_get_weather], max_idle=0.0
    )
    calls = 0

    async def consume() -> None:
        nonlocal calls
        async for _ in runner:
            calls += 1

    consumer = asyncio.create_task(consume())
    # The runner attaches its stream first; wait until the emulator sees it, then kick off.
    stream_path = f"/v1/sessions/{session.id}/events/stream"
    while not any(r.path == stream_path for r in emu.requests):
        await asyncio.sleep(0.0005)
    await client.beta.sessions.events.send(
        session.id,
        events=[{"type": "user.message", "content": [{"type": "text", "text": "Go"}]}],
    )
    await consumer
    elapsed = time.perf_counter() - start
    assert calls == TOOL_CALLS, calls
    return elapsed


async def per_turn() -> None:
    with ClaudeEmulator() as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            provider = ClaudeManagedAgents(client=client)
            handle = await ml.provision(provider, AGENT)
            provider = ClaudeManagedAgents(client=client, agent=handle, environment=handle)
            await _ours(emu, provider)  # warm-up both paths
            await _sdk_runner_run(emu, client, handle)
            ours: list[float] = []
            sdk: list[float] = []
            for _ in range(RUNS):
                ours.append(await _ours(emu, provider))
                sdk.append(await _sdk_runner_run(emu, client, handle))
                emu.requests.clear()
    turns = TOOL_CALLS + 1
    mo, ms = statistics.median(ours), statistics.median(sdk)
    print(f"(a) per-turn, {TOOL_CALLS} tool calls, median of {RUNS} interleaved runs")
    print(
        f"    managedloop ClaudeManagedAgents: {mo / turns * 1e3:7.2f} ms/turn ({mo * 1e3:.1f} ms)"
    )
    print(
        f"    SDK sessions.events.tool_runner: {ms / turns * 1e3:7.2f} ms/turn ({ms * 1e3:.1f} ms)"
    )
    print(f"    ratio (ours / SDK runner): {mo / ms:.2f}  (target <= 1.10)")


def _recorded_frames() -> bytes:
    """SSE bytes of a real emulator session, repeated to FRAMES events."""

    async def record() -> list[dict[str, Any]]:
        with ClaudeEmulator() as emu:
            async with anthropic.AsyncAnthropic(
                base_url=emu.base_url, api_key=emu.api_key
            ) as client:
                emu.agent.script = [
                    call("get_weather", {"city": "Paris"}),
                    say("It is sunny in Paris today, 18 degrees."),
                ]
                provider = ClaudeManagedAgents(client=client)
                await ml.run(provider, agent=AGENT, prompt="Weather?")
                return emu.events()

    events = asyncio.run(record())
    frames = []
    for i in range(FRAMES):
        event = dict(events[i % len(events)], id=f"sevt_{i:08d}")
        data = json.dumps(event, separators=(",", ":"))
        frames.append(f"event: {event['type']}\nid: {event['id']}\ndata: {data}\n\n")
    return "".join(frames).encode()


async def _chunks(blob: bytes) -> Any:
    for i in range(0, len(blob), CHUNK):
        yield blob[i : i + CHUNK]


async def _decode_ours(blob: bytes) -> int:
    decoder = SSEDecoder()
    n = 0
    async for chunk in _chunks(blob):
        n += len(decoder.feed(chunk))
    return n


async def _decode_sdk(blob: bytes, client: anthropic.AsyncAnthropic) -> int:
    request = httpx2.Request("GET", "http://bench/v1/sessions/s/events/stream")
    response = httpx2.Response(200, stream=_Body(blob), request=request)
    stream = anthropic.AsyncStream(
        cast_to=BetaManagedAgentsStreamSessionEvents,  # type: ignore[arg-type]
        response=response,
        client=client,
    )
    n = 0
    async for _ in stream:
        n += 1
    return n


class _Body(httpx2.AsyncByteStream):
    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    async def __aiter__(self) -> Any:
        async for chunk in _chunks(self.blob):
            yield chunk


def decoding() -> None:
    blob = _recorded_frames()

    async def measure() -> tuple[float, float]:
        async with anthropic.AsyncAnthropic(api_key="bench", base_url="http://bench") as client:
            ours, sdk = [], []
            for _ in range(5):
                t = time.perf_counter()
                assert await _decode_ours(blob) == FRAMES
                ours.append(time.perf_counter() - t)
                t = time.perf_counter()
                assert await _decode_sdk(blob, client) == FRAMES
                sdk.append(time.perf_counter() - t)
            return statistics.median(ours), statistics.median(sdk)

    mo, ms = asyncio.run(measure())
    print(f"(b) stream decoding, {FRAMES} events, {len(blob) / 1e6:.1f} MB, median of 5")
    print(f"    managedloop SSEDecoder (dicts):  {FRAMES / mo:12,.0f} events/s")
    print(f"    SDK AsyncStream (models):        {FRAMES / ms:12,.0f} events/s")
    print(f"    ratio (ours / SDK): {ms / mo:.2f}x faster")


def main() -> None:
    asyncio.run(per_turn())
    decoding()


if __name__ == "__main__":
    main()
