"""Local host benchmarks: (a) per-request overhead over HTTP, (b) in-process cost per tool
call, each kind of tool against the floor doing the same work, (c) concurrent sessions.
Every ratio is against a baseline measured in this same run.

(a) A 20-tool-call conversation (21 requests) against a chat emulator in another process.
    Headline: ``ml.run`` on ``Local`` (its default transport, ``HttpTransport`` over
    ``_wire.Pool``) versus a bare loop making the same requests on that same pool (a head
    written by hand, ``json.dumps`` / ``json.loads``, a direct tool call), with an
    ``inline=True`` tool on both sides; beside it the same ``ml.run`` against a bare aiohttp
    loop (one ``ClientSession``, unbounded pool), the bare loop through Local's chat
    function, and ``ml.run`` with a default (threaded) sync tool against the bare loop on
    the pool running the tool through ``asyncio.to_thread``. Runs interleave, in
    alternating order; medians are reported.
(b) The same 20 calls in process with a scripted model and no HTTP
    (``Local(chat=ScriptedChatModel(...))``), once per kind of tool, each against the bare
    asyncio loop doing the same work over precomputed responses: an ``async def`` tool vs
    a loop awaiting the same function, an ``inline=True`` sync tool vs a loop calling it,
    a default sync tool (run in a worker thread) vs a loop running it through
    ``asyncio.to_thread``. Also timed: the bare loop hopping the way a default tool does
    (``managedloop._threads.run_sync``) and the way it did before (anyio's
    ``to_thread.run_sync``), pydantic-ai (``FunctionModel``, ``tool_plain``) and the
    OpenAI Agents SDK (``Runner.run`` with a fake ``Model``, ``function_tool``), sync tools
    there. The loops interleave, in alternating order; each is timed over a block of
    consecutive conversations (~50 ms, after an untimed one); medians of the blocks.
    ``python -m bench.local b`` runs (b) alone.
(c) 1,000 concurrent sessions x 3 requests against one emulator, each client in a fresh
    process (``bench._concurrent``; managedloop with a default sync tool): wall and CPU
    time, peak RSS growth per session and the garbage collector's share (full collections
    and their seconds, gc-tracked objects per session), without and with 200 ms of
    simulated model latency; then 10,000 sessions, ``Local`` against the raw-asyncio floor
    (``raw``: asyncio streams, no HTTP library) in two rounds (raw and Local first and
    last: each ratio against the raw run beside it, then pooled), ``Local`` with an inline
    tool (the thread hop's share) and bare loops on Local's transport (``wire``) and on
    aiohttp on one emulator, with the kernel's accept-queue overflows
    (``TcpExtListenOverflows``, from ``nstat``) per run. ``python -m bench.local c`` runs
    (c) alone.

The load average is printed with each suite: on a shared machine the absolute figures
move with it; the ratios (both sides measured in the same run) and the in-process
instruction counts (``python -m bench.instructions``) move far less.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import anyio.to_thread

import managedloop as ml
from bench._server import script, serve
from managedloop.providers import Local
from managedloop.providers.local._wire import Pool
from managedloop.testing import ScriptedChatModel

TOOL_CALLS = 20
RUNS_A = 60  # interleaved runs per loop in (a): a stable median in ~6 s
RUNS_B = 15  # timed blocks per loop in (b), interleaved: ~3 s in all
BLOCK_B = 0.05  # seconds per timed block in (b): ~120 of our conversations, ~20 of pydantic-ai's
SESSIONS_C = 1000
SESSIONS_C_LARGE = 10_000
# At 10,000 sessions: raw and managedloop twice, first and last (each ratio is against the
# raw run beside it, so drifting load shows as two rounds that disagree); between them the
# same loop with an inline tool (the thread hop's share) and the bare loops on Local's
# transport and on aiohttp.
LARGE_CLIENTS = [
    "raw",
    "managedloop",
    "managedloop-inline",
    "wire",
    "aiohttp:0",
    "managedloop",
    "raw",
]


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


TOOL = ml.tool(inline=True)(get_weather)
AGENT = ml.AgentSpec(tools=[TOOL])
AGENT_DEFAULT = ml.AgentSpec(tools=[ml.tool(get_weather)])  # a sync tool's default: a thread
TOOLS_WIRE = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": TOOL.definition.input_schema,
        },
    }
]


# -- (a) per-turn overhead over HTTP ---------------------------------------------------


async def bare_http_run(session: aiohttp.ClientSession, url: str, key: str) -> int:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather?"}]
    requests = 0
    while True:
        body = json.dumps({"model": "m", "messages": messages, "tools": TOOLS_WIRE}).encode()
        async with session.post(url, data=body, headers=headers) as resp:
            resp.raise_for_status()
            data = json.loads(await resp.read())
        requests += 1
        message = data["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            return requests
        for c in message["tool_calls"]:
            text = get_weather(**json.loads(c["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": text})


async def bare_wire_run(pool: Pool, url: str, key: str, threaded: bool = False) -> int:
    """The conversation on Local's own transport's pool, no seam: one head written by hand;
    ``threaded``: each tool call through ``asyncio.to_thread`` (what a default tool does)."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    origin = ("http", parts.hostname, parts.port)
    head = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"Content-Type: application/json\r\nAccept-Encoding: gzip\r\n"
        f"Authorization: Bearer {key}\r\n"
    ).encode()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather?"}]
    requests = 0
    while True:
        body = json.dumps({"model": "m", "messages": messages, "tools": TOOLS_WIRE}).encode()
        resp = await pool.request(origin, head + b"Content-Length: %d\r\n\r\n" % len(body), body)
        try:
            assert resp.status == 200, resp.status
            data = json.loads(await resp.read())
        finally:
            resp.release()
        requests += 1
        message = data["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            return requests
        for c in message["tool_calls"]:
            args = json.loads(c["function"]["arguments"])
            text = await asyncio.to_thread(get_weather, **args) if threaded else get_weather(**args)
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": text})


async def chat_function_run(chat: Any) -> int:
    """The bare loop again, but each request made by Local's own HTTP chat function."""
    from managedloop.providers.local import ChatRequest, History
    from managedloop.providers.local._types import encode

    history = History([{"role": "user", "content": "Weather?"}])
    tools_json = encode(TOOLS_WIRE)
    requests = 0
    while True:
        response = await chat(
            ChatRequest(model="m", messages=history, tools=TOOLS_WIRE, tools_json=tools_json)
        )
        requests += 1
        message = response.message
        history.append(message)
        if not message.get("tool_calls"):
            return requests
        for c in message["tool_calls"]:
            text = get_weather(**json.loads(c["function"]["arguments"]))
            history.append({"role": "tool", "tool_call_id": c["id"], "content": text})


async def bench_a() -> dict[str, float]:
    with serve(TOOL_CALLS) as (base_url, key):
        url = base_url + "/chat/completions"
        pool = Pool(read_timeout=600, connect_timeout=600)
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
            Local(model="m", base_url=base_url, api_key=key) as provider,
        ):
            loops = {
                "bare_wire": lambda: bare_wire_run(pool, url, key),
                "managedloop": lambda: _turns(provider, AGENT),
                "bare_wire_thread": lambda: bare_wire_run(pool, url, key, threaded=True),
                "managedloop_default": lambda: _turns(provider, AGENT_DEFAULT),
                "bare": lambda: bare_http_run(session, url, key),
                "chat_function": lambda: chat_function_run(provider._http),
            }
            try:
                for fn in loops.values():  # warm every path (connections, imports, caches)
                    for _ in range(3):
                        await fn()
                wall: dict[str, list[float]] = {name: [] for name in loops}
                cpu: dict[str, list[float]] = {name: [] for name in loops}
                order = list(loops.items())
                for r in range(RUNS_A):
                    for name, fn in order if r % 2 == 0 else reversed(order):
                        start, cpu_start = time.perf_counter(), time.process_time()
                        n = await fn()
                        wall[name].append((time.perf_counter() - start) / n)
                        cpu[name].append((time.process_time() - cpu_start) / n)
                        assert n == TOOL_CALLS + 1, (name, n)
            finally:
                await pool.aclose()
    out = {f"{k}_us": statistics.median(v) * 1e6 for k, v in wall.items()}
    out.update({f"{k}_cpu_us": statistics.median(v) * 1e6 for k, v in cpu.items()})
    out["ratio"] = out["managedloop_us"] / out["bare_wire_us"]
    out["default_ratio"] = out["managedloop_default_us"] / out["bare_wire_thread_us"]
    out["aiohttp_ratio"] = out["managedloop_us"] / out["bare_us"]
    out["chat_function_ratio"] = out["chat_function_us"] / out["bare_wire_us"]
    return out


async def _turns(provider: Local, agent: ml.AgentSpec) -> int:
    return (await ml.run(provider, agent=agent, prompt="Weather?")).turns


# -- (b) in process, scripted model ----------------------------------------------------


async def get_weather_async(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


# One tool per kind, all named get_weather (the script calls it): the default sync tool
# (run in a worker thread), a sync tool run on the loop, an async tool.
TOOLS_B: dict[str, ml.Tool[..., Any]] = {
    "default": AGENT_DEFAULT.tools[0],
    "inline": TOOL,
    "async": ml.tool(name="get_weather")(get_weather_async),
}
AGENTS_B = {kind: ml.AgentSpec(tools=[t]) for kind, t in TOOLS_B.items()}

_REPLIES_B = [
    json.dumps({"id": f"c{i}", "name": "get_weather", "arguments": {"city": f"city{i}"}})
    for i in range(TOOL_CALLS)
]


async def bare_inprocess_run() -> None:
    """The floor of an inline sync tool: a bare loop over precomputed responses
    (json.loads + a direct call)."""
    history: list[dict[str, Any]] = []
    for raw in _REPLIES_B:
        c = json.loads(raw)
        history.append({"role": "assistant", "tool_calls": [c]})
        history.append({"role": "tool", "content": get_weather(**c["arguments"])})
        await asyncio.sleep(0)


async def bare_async_run() -> None:
    """The floor of an async tool: the same loop awaiting the same async function."""
    history: list[dict[str, Any]] = []
    for raw in _REPLIES_B:
        c = json.loads(raw)
        history.append({"role": "assistant", "tool_calls": [c]})
        history.append({"role": "tool", "content": await get_weather_async(**c["arguments"])})
        await asyncio.sleep(0)


async def bare_to_thread_run() -> None:
    """The floor of a default sync tool: the same loop running the same function in a
    worker thread with ``asyncio.to_thread``."""
    history: list[dict[str, Any]] = []
    for raw in _REPLIES_B:
        c = json.loads(raw)
        history.append({"role": "assistant", "tool_calls": [c]})
        text = await asyncio.to_thread(get_weather, **c["arguments"])
        history.append({"role": "tool", "content": text})
        await asyncio.sleep(0)


async def bare_anyio_run() -> None:
    """Not a floor, a diagnosis: the same loop hopping the way a default tool did before
    its own hop (``anyio.to_thread.run_sync(..., abandon_on_cancel=True)``; on trio it
    still does)."""
    history: list[dict[str, Any]] = []
    for raw in _REPLIES_B:
        c = json.loads(raw)
        history.append({"role": "assistant", "tool_calls": [c]})
        text = await anyio.to_thread.run_sync(
            functools.partial(get_weather, **c["arguments"]), abandon_on_cancel=True
        )
        history.append({"role": "tool", "content": text})
        await asyncio.sleep(0)


async def bare_hop_run() -> None:
    """Not a floor, a diagnosis: the same loop hopping the way a default tool does
    (``managedloop._threads.run_sync``, ``Toolset``'s call on asyncio)."""
    from managedloop._threads import run_sync

    history: list[dict[str, Any]] = []
    for raw in _REPLIES_B:
        c = json.loads(raw)
        history.append({"role": "assistant", "tool_calls": [c]})
        text = await run_sync(get_weather, c["arguments"])
        history.append({"role": "tool", "content": text})
        await asyncio.sleep(0)


# Built once, like the other loops' agents and models: steps are immutable data, and each
# run gets a fresh ScriptedChatModel (its own ids and request record).
SCRIPT_B = script(TOOL_CALLS)


def ours_runner(kind: str) -> Callable[[], Awaitable[None]]:
    """``ml.run`` on ``Local(chat=ScriptedChatModel(...))`` with the ``kind`` of tool."""
    agent = AGENTS_B[kind]

    async def run() -> None:
        model = ScriptedChatModel(SCRIPT_B)
        result = await ml.run(Local(model="m", chat=model), agent=agent, prompt="Weather?")
        assert len(result.custom_tool_uses) == TOOL_CALLS

    return run


ours_inprocess_run = ours_runner("inline")


def pydantic_ai_runner() -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    state = {"n": 0}

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        i = state["n"]
        state["n"] += 1
        if i < TOOL_CALLS:
            return ModelResponse(
                parts=[ToolCallPart(tool_name="get_weather", args={"city": f"city{i}"})]
            )
        return ModelResponse(parts=[TextPart("All done.")])

    agent = Agent(FunctionModel(model))
    agent.tool_plain(get_weather)

    async def run() -> None:
        state["n"] = 0
        result = await agent.run("Weather?")
        assert result.output == "All done."

    return run


def agents_sdk_runner() -> Any:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)
    state = {"n": 0}

    class FakeModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            i = state["n"]
            state["n"] += 1
            if i < TOOL_CALLS:
                output: list[Any] = [
                    ResponseFunctionToolCall(
                        id=f"fc{i}",
                        call_id=f"c{i}",
                        type="function_call",
                        name="get_weather",
                        arguments=json.dumps({"city": f"city{i}"}),
                    )
                ]
            else:
                output = [
                    ResponseOutputMessage(
                        id="m",
                        type="message",
                        role="assistant",
                        status="completed",
                        content=[
                            ResponseOutputText(type="output_text", text="All done.", annotations=[])
                        ],
                    )
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    agent = Agent(name="bench", model=FakeModel(), tools=[function_tool(get_weather)])

    async def run() -> None:
        state["n"] = 0
        result = await Runner.run(agent, "Weather?", max_turns=TOOL_CALLS + 5)
        assert result.final_output == "All done."

    return run


# (b)'s ratios: each kind of tool against the floor doing the same work, and the target.
RATIOS_B = {
    "async": ("managedloop_async", "bare_async", 2.0),
    "inline": ("managedloop_inline", "bare", 2.0),
    "default": ("managedloop_default", "bare_to_thread", 1.2),
}


async def bench_b() -> dict[str, float]:
    loops: dict[str, Callable[[], Awaitable[None]]] = {
        "bare": bare_inprocess_run,
        "bare_async": bare_async_run,
        "bare_to_thread": bare_to_thread_run,
        "bare_anyio": bare_anyio_run,
        "bare_hop": bare_hop_run,
        "managedloop_inline": ours_runner("inline"),
        "managedloop_async": ours_runner("async"),
        "managedloop_default": ours_runner("default"),
        "pydantic_ai": pydantic_ai_runner(),
        "openai_agents": agents_sdk_runner(),
    }
    block: dict[str, int] = {}
    for name, fn in loops.items():  # warm-up, and each loop's block size
        start = time.perf_counter()
        for _ in range(3):
            await fn()
        one = (time.perf_counter() - start) / 3
        block[name] = max(1, round(BLOCK_B / one))
    times: dict[str, list[float]] = {name: [] for name in loops}
    cpu: dict[str, list[float]] = {name: [] for name in loops}
    order = list(loops.items())
    for r in range(RUNS_B):  # interleaved, so drift hits every loop alike
        # alternating direction, so no loop always runs right after the same other one
        for name, fn in order if r % 2 == 0 else reversed(order):
            # Every loop alike: one untimed conversation, then a timed block of consecutive
            # ones lasting ~BLOCK_B. A run timed right after another loop's starts on what
            # that loop left in the caches, which costs a short run far more than a long
            # one, and takes more than one run to wear off: one conversation timed cold read
            # ours at 54-60 µs per call (34-36 µs back to back), one after an untimed run
            # still 25 µs (19.7 back to back), 5 ms blocks 26 µs, 50 ms blocks 21 µs; the
            # bare loop 8.6 cold against 7.4 µs.
            await fn()
            n = block[name]
            start, cpu_start = time.perf_counter(), time.process_time()
            for _ in range(n):
                await fn()
            times[name].append((time.perf_counter() - start) / (n * TOOL_CALLS))
            cpu[name].append((time.process_time() - cpu_start) / (n * TOOL_CALLS))
    us = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    out = {f"{k}_us": v for k, v in us.items()}
    out.update({f"{k}_cpu_us": statistics.median(t) * 1e6 for k, t in cpu.items()})
    for kind, (ours, floor, _target) in RATIOS_B.items():
        out[f"{kind}_ratio"] = us[ours] / us[floor]
        out[f"{kind}_cpu_ratio"] = out[f"{ours}_cpu_us"] / out[f"{floor}_cpu_us"]
    out["anyio_ratio"] = us["bare_anyio"] / us["bare_to_thread"]
    out["hop_ratio"] = us["bare_hop"] / us["bare_to_thread"]
    out["vs_pydantic_ai"] = us["pydantic_ai"] / us["managedloop_default"]
    out["vs_openai_agents"] = us["openai_agents"] / us["managedloop_default"]
    return out


# -- (c) 1,000 concurrent sessions -----------------------------------------------------


def _listen_overflows() -> int | None:
    """The kernel's count of connections dropped from a full accept queue (Linux)."""
    try:
        out = subprocess.run(
            ["nstat", "-az", "TcpExtListenOverflows"], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if line.startswith("TcpExtListenOverflows"):
            return int(line.split()[1])
    return None


def bench_c(clients: list[str], latency: float, sessions: int = SESSIONS_C) -> list[dict[str, Any]]:
    rows = []
    with serve(2, latency) as (base_url, key):
        for client in clients:
            before = _listen_overflows()
            out = subprocess.run(
                [sys.executable, "-m", "bench._concurrent", client, base_url, key, str(sessions)],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            if out.returncode != 0:
                print(f"   {client}: failed: {out.stderr.strip()[-300:]}")
                continue
            row = json.loads(out.stdout)
            after = _listen_overflows()
            row["overflows"] = after - before if after is not None and before is not None else None
            rows.append(row)
    return rows


def _print_c(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        print(
            f"   {row['client']:<18} wall {row['wall_s']:6.2f} s  cpu {row['cpu_s']:6.2f} s  "
            f"{row['kib_per_session']:5.1f} KiB/session  {row['tracked_per_session']:5.1f} "
            f"tracked/session  failed {row['failed']}  gc: {row['gc_full']} full "
            f"{row['gc_full_s']:.2f} s, young {row['gc_young_s']:.2f} s  accept-queue "
            f"overflows {row['overflows']}" + (f"  errors {row['errors']}" if row["failed"] else "")
        )


def ratios_c(rows: list[dict[str, Any]], ours: str = "managedloop") -> str:
    """``ours`` against ``raw`` at 10,000 sessions, each run against the raw run next to it
    (the clients run raw, ours, ..., ours, raw: the first pair and the last), then both
    pairs pooled; with the target verdict on the pooled figures."""
    raws = [r for r in rows if r["client"] == "raw"]
    mine = [r for r in rows if r["client"] == ours]
    if not raws or not mine:
        return f"    {ours} / raw: not measured"
    lines = []
    pairs = zip(mine, raws, strict=False)  # a failed run leaves its pair out
    for i, (m, r) in enumerate(pairs, 1):
        lines.append(
            f"    round {i}: {ours} / raw: wall {m['wall_s']:.2f} / {r['wall_s']:.2f} s = "
            f"{m['wall_s'] / r['wall_s']:.2f}x, CPU {m['cpu_s']:.2f} / {r['cpu_s']:.2f} s = "
            f"{m['cpu_s'] / r['cpu_s']:.2f}x, KiB/session {m['kib_per_session']:.1f} / "
            f"{r['kib_per_session']:.1f} = {m['kib_per_session'] / r['kib_per_session']:.2f}x, "
            f"tracked/session {m['tracked_per_session']:.1f} / {r['tracked_per_session']:.1f}"
        )

    def total(group: list[dict[str, Any]], key: str) -> float:
        return sum(row[key] for row in group)

    wall = total(mine, "wall_s") / total(raws, "wall_s") * len(raws) / len(mine)
    kib = total(mine, "kib_per_session") / total(raws, "kib_per_session") * len(raws) / len(mine)
    cpu = total(mine, "cpu_s") / total(raws, "cpu_s") * len(raws) / len(mine)
    failed = int(total(mine, "failed"))
    met = failed == 0 and wall <= 1.5 and kib <= 1.5
    lines.append(
        f"    {ours} / raw, all rounds: wall {wall:.2f}x, KiB/session {kib:.2f}x, CPU "
        f"{cpu:.2f}x, failed {failed} (target: 0 failed, <= 1.5x wall and KiB: "
        + ("met" if met else "NOT met")
        + ")"
    )
    return "\n".join(lines)


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min: {five:.1f}) on {os.cpu_count()} cores"


def main() -> None:
    import httpx
    import pydantic_ai

    print(
        f"python {platform.python_version()} on {platform.machine()}, "
        f"aiohttp {aiohttp.__version__}, httpx {httpx.__version__}, "
        f"pydantic-ai {pydantic_ai.__version__}"
    )
    a = asyncio.run(bench_a())
    print(
        f"(a) per request over HTTP, {TOOL_CALLS + 1} requests/run, medians of {RUNS_A}:\n"
        f"    inline tool: managedloop Local {a['managedloop_us']:.0f} µs vs a bare loop on "
        f"Local's own transport {a['bare_wire_us']:.0f} µs: ratio {a['ratio']:.3f} "
        f"(target <= 1.10: {'met' if a['ratio'] <= 1.10 else 'NOT met'}); vs a bare aiohttp "
        f"loop {a['bare_us']:.0f} µs: {a['aiohttp_ratio']:.3f}\n"
        f"    default tool: managedloop Local {a['managedloop_default_us']:.0f} µs vs the bare "
        f"loop on its transport calling the tool via asyncio.to_thread "
        f"{a['bare_wire_thread_us']:.0f} µs: ratio {a['default_ratio']:.3f}\n"
        f"    the bare loop through Local's HTTP chat function: {a['chat_function_us']:.0f} µs, "
        f"{a['chat_function_ratio']:.3f}x the bare loop on the transport\n"
        f"    client CPU per request: bare on the transport {a['bare_wire_cpu_us']:.0f} µs, "
        f"bare aiohttp {a['bare_cpu_us']:.0f} µs, chat function "
        f"{a['chat_function_cpu_us']:.0f} µs, managedloop {a['managedloop_cpu_us']:.0f} µs"
    )
    print_b(asyncio.run(bench_b()))
    print(f"    ({_load()})")
    main_c()


def print_b(b: dict[str, float]) -> None:
    print(f"(b) per tool call in process, {TOOL_CALLS} calls/conversation, each kind of tool:")
    labels = {
        "async": "async def tool  vs a bare loop awaiting it      ",
        "inline": "inline sync tool vs a bare loop calling it      ",
        "default": "default sync tool vs a bare loop via to_thread  ",
    }
    for kind, (ours, floor, target) in RATIOS_B.items():
        ratio = b[f"{kind}_ratio"]
        print(
            f"    {labels[kind]} {b[ours + '_us']:6.1f} vs {b[floor + '_us']:6.1f} µs: "
            f"{ratio:.2f}x (target <= {target:g}: {'met' if ratio <= target else 'NOT met'}); "
            f"CPU {b[ours + '_cpu_us']:.1f} vs {b[floor + '_cpu_us']:.1f} µs: "
            f"{b[kind + '_cpu_ratio']:.2f}x"
        )
    print(
        f"    the hop a default tool makes (managedloop._threads.run_sync) in the bare loop: "
        f"{b['bare_hop_us']:.1f} µs, {b['hop_ratio']:.2f}x asyncio.to_thread's "
        f"(CPU {b['bare_hop_cpu_us']:.1f} vs {b['bare_to_thread_cpu_us']:.1f} µs); "
        f"anyio.to_thread.run_sync's {b['bare_anyio_us']:.1f} µs, {b['anyio_ratio']:.2f}x"
    )
    print(
        f"    pydantic-ai {b['pydantic_ai_us']:.0f} µs, OpenAI Agents SDK "
        f"{b['openai_agents_us']:.0f} µs: the default sync tool is {b['vs_pydantic_ai']:.1f}x "
        f"faster than pydantic-ai and {b['vs_openai_agents']:.1f}x than the Agents SDK"
    )


def main_c() -> None:
    """(c) alone: ``python -m bench.local c``."""
    for latency in (0.0, 0.2):
        clients = ["raw", "managedloop", "wire", "aiohttp:0", "aiohttp:100"]
        if latency == 0.0:
            clients += ["managedloop:100", "httpx"]
        rows = bench_c(clients, latency)
        print(f"(c) {SESSIONS_C} concurrent sessions x 3 requests, model latency {latency:g} s:")
        _print_c(rows)
        print(f"    (target: managedloop <= 1 s and <= 25 KiB/session at latency 0; {_load()})")
    rows = bench_c(LARGE_CLIENTS, 0.0, SESSIONS_C_LARGE)
    print(f"(c) {SESSIONS_C_LARGE} concurrent sessions x 3 requests, model latency 0 s:")
    _print_c(rows)
    print(ratios_c(rows))
    print(f"    ({_load()})")


def main_b() -> None:
    """(b) alone: ``python -m bench.local b``."""
    print_b(asyncio.run(bench_b()))
    print(f"    ({_load()})")


if __name__ == "__main__":
    {"b": main_b, "c": main_c}.get(sys.argv[1] if sys.argv[1:] else "", main)()
