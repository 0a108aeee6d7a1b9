"""Bedrock AgentCore benchmarks (``python -m bench agentcore``). Every ratio is against a
baseline measured in this same run, on the same emulator.

(a) Per-turn overhead: a session with 20 inline-tool calls (one per turn, then an answer:
    21 InvokeHarness turns) on the loopback ``AgentCoreEmulator``. ``ml.run`` on
    ``BedrockAgentCore`` versus a bare botocore loop doing the same turns by hand (invoke,
    iterate the event stream, key tool blocks by id, run the tool, send the two resume
    messages). Each uses its own botocore client, configured alike (the provider adds an
    inert ``before-send`` hook to the client it is given; the baseline's stays untouched);
    runs interleave and medians are reported. Target: ratio at most 1.10.
(b) Frame decoding: frames per second through botocore's ``EventStream`` alone, and
    through our async reader's decoder (``EventDecoder``: botocore's ``EventStreamBuffer``
    and event parser, fed chunk by chunk in an async loop), over the same
    emulator-rendered frames served from memory in 4 KiB chunks.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

import botocore.session
from botocore.config import Config
from botocore.eventstream import EventStream
from botocore.parsers import EventStreamJSONParser

import managedloop as ml
from managedloop.providers import BedrockAgentCore
from managedloop.providers.agentcore import new_runtime_session_id
from managedloop.providers.agentcore._decoding import EventDecoder
from managedloop.testing import AgentCoreEmulator, call, say
from managedloop.testing._agentcore import eventstream as es

TOOL_CALLS = 20
RUNS = 40  # interleaved runs per loop in (a); each is 21 turns (15 swung the ratio by ±0.06)
FRAMES = 20_000  # frames decoded per run in (b)
CHUNK = 4096


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


TOOL = ml.tool(inline=True)(get_weather)
AGENT = ml.AgentSpec(name="bench", tools=[TOOL])
INLINE = [
    {
        "type": "inline_function",
        "name": "get_weather",
        "config": {
            "inlineFunction": {
                "description": "Current weather for a city.",
                "inputSchema": TOOL.definition.input_schema,
            }
        },
    }
]


def _script() -> list[Any]:
    return [call("get_weather", {"city": f"c{i}"}) for i in range(TOOL_CALLS)] + [say("done")]


async def _ours(emu: Any, provider: BedrockAgentCore) -> float:
    emu.set_script(_script())
    start = time.perf_counter()
    result = await ml.run(provider, agent=AGENT, prompt="go")
    elapsed = time.perf_counter() - start
    assert result.turns == TOOL_CALLS + 1, result
    assert result.text == "done", result
    return elapsed


def _bare(emu: Any, client: Any) -> float:
    """The loop a user would write with botocore alone (no retries, no telemetry)."""
    emu.set_script(_script())
    sid = new_runtime_session_id("bare")
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": "go"}]}]
    start = time.perf_counter()
    turns = 0
    while True:
        response = client.invoke_harness(
            harnessArn=emu.harness_arn,
            runtimeSessionId=sid,
            qualifier="DEFAULT",
            tools=INLINE,
            messages=messages,
        )
        blocks: dict[str, dict[str, Any]] = {}
        active: dict[int, dict[str, Any]] = {}
        stop = None
        for event in response["stream"]:
            if "contentBlockStart" in event:
                body = event["contentBlockStart"]
                tu = body["start"]["toolUse"]
                block = blocks.setdefault(
                    tu["toolUseId"], {"id": tu["toolUseId"], "name": tu["name"], "input": ""}
                )
                active[body["contentBlockIndex"]] = block
            elif "contentBlockDelta" in event:
                body = event["contentBlockDelta"]
                frag = body["delta"].get("toolUse")
                if frag is not None:
                    active[body["contentBlockIndex"]]["input"] += frag["input"]
            elif "messageStop" in event:
                stop = event["messageStop"]["stopReason"]
        turns += 1
        if stop != "tool_use":
            break
        uses = list(blocks.values())
        messages = [
            {
                "role": "assistant",
                "content": [
                    {
                        "toolUse": {
                            "toolUseId": u["id"],
                            "name": u["name"],
                            "input": json.loads(u["input"] or "{}"),
                        }
                    }
                    for u in uses
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "toolResult": {
                            "toolUseId": u["id"],
                            "content": [{"text": get_weather(**json.loads(u["input"] or "{}"))}],
                            "status": "success",
                        }
                    }
                    for u in uses
                ],
            },
        ]
    elapsed = time.perf_counter() - start
    assert turns == TOOL_CALLS + 1
    return elapsed


class _Remote:
    """The emulator in a child process (``python -m bench.agentcore --serve``), so its CPU
    never competes with the client's for this process's GIL; ``set_script`` resets it
    between sessions over a pipe. Both loops measured talk to the same child."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.agentcore", "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        info = json.loads(self.proc.stdout.readline())
        self.harness_arn: str = info.pop("harness_arn")
        self.client_kwargs: dict[str, Any] = info

    def set_script(self, _script: Any) -> None:  # the child always serves _script()
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write("reset\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _serve() -> None:
    with AgentCoreEmulator() as emu:
        print(json.dumps({**emu.client_kwargs, "harness_arn": emu.harness_arn}), flush=True)
        for _line in sys.stdin:
            emu.set_script(_script())
            emu.requests.clear()  # a long bench would pile them up
            print("ok", flush=True)


def bench_turns(*, in_process: bool = False) -> dict[str, float]:
    emu: Any = AgentCoreEmulator().start() if in_process else _Remote()
    try:
        cfg = Config(retries={"total_max_attempts": 1}, read_timeout=305, tcp_keepalive=True)
        session = botocore.session.get_session()
        client = session.create_client("bedrock-agentcore", config=cfg, **emu.client_kwargs)
        ours_client = session.create_client("bedrock-agentcore", config=cfg, **emu.client_kwargs)
        provider = BedrockAgentCore(
            client=ours_client, harness_arn=emu.harness_arn, harness_tools=[]
        )
        ours: list[float] = []
        bare: list[float] = []

        async def one_ours() -> float:
            return await _ours(emu, provider)

        for _ in range(2):  # warm both paths (model loading, connection pool)
            asyncio.run(one_ours())
            _bare(emu, client)
        for i in range(RUNS):  # the order alternates: neither loop always runs second
            if i % 2:
                bare.append(_bare(emu, client))
                ours.append(asyncio.run(one_ours()))
            else:
                ours.append(asyncio.run(one_ours()))
                bare.append(_bare(emu, client))
        provider.close()
        ours_client.close()
        client.close()
    finally:
        emu.stop() if in_process else emu.close()
    turns = TOOL_CALLS + 1
    o, b = statistics.median(ours) / turns, statistics.median(bare) / turns
    return {"ours_ms": o * 1e3, "bare_ms": b * 1e3, "ratio": o / b}


class _Raw:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self) -> Any:
        for i in range(0, len(self.data), CHUNK):
            yield self.data[i : i + CHUNK]

    def close(self) -> None:
        pass


def _frames() -> tuple[bytes, int]:
    turn = [
        es.event_frame("messageStart", {"role": "assistant"}),
        es.event_frame(
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"text": "Let me check the weather. "}},
        ),
        es.event_frame("contentBlockStop", {"contentBlockIndex": 0}),
        es.event_frame(
            "contentBlockStart",
            {
                "contentBlockIndex": 1,
                "start": {
                    "toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "type": "tool_use"}
                },
            },
        ),
        es.event_frame(
            "contentBlockDelta",
            {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"city": "Pa'}}},
        ),
        es.event_frame(
            "contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": 'ris"}'}}}
        ),
        es.event_frame("contentBlockStop", {"contentBlockIndex": 1}),
        es.event_frame("messageStop", {"stopReason": "tool_use"}),
        es.event_frame(
            "metadata",
            {
                "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
                "metrics": {"latencyMs": 1},
            },
        ),
    ]
    reps = FRAMES // len(turn)
    return b"".join(turn) * reps, reps * len(turn)


def bench_decode() -> dict[str, float]:
    data, count = _frames()
    model = botocore.session.get_session().get_service_model("bedrock-agentcore")
    shape = model.operation_model("InvokeHarness").output_shape.members["stream"]

    def stream() -> EventStream:
        return EventStream(_Raw(data), shape, EventStreamJSONParser(), "InvokeHarness")

    def botocore_only() -> float:
        start = time.perf_counter()
        n = sum(1 for _ in stream())
        assert n == count
        return time.perf_counter() - start

    async def chunks() -> Any:
        for chunk in _Raw(data).stream():
            yield chunk

    async def ours() -> float:
        start = time.perf_counter()
        decoder = EventDecoder(model.operation_model("InvokeHarness"))
        n = 0
        async for chunk in chunks():
            for _ in decoder.feed(chunk):
                n += 1
        assert n == count
        return time.perf_counter() - start

    boto = [botocore_only() for _ in range(5)]
    mine = [asyncio.run(ours()) for _ in range(5)]
    return {
        "botocore_fps": count / statistics.median(boto),
        "ours_fps": count / statistics.median(mine),
    }


def main() -> None:
    for where, in_process in (("emulator in a child process", False), ("in-process", True)):
        t = bench_turns(in_process=in_process)
        print(
            f"(a) per-turn, {TOOL_CALLS} tool calls + answer, median of {RUNS}, {where}: "
            f"managedloop {t['ours_ms']:.2f} ms, bare botocore loop {t['bare_ms']:.2f} ms, "
            f"ratio {t['ratio']:.3f} (target <= 1.10)"
        )
    d = bench_decode()
    print(
        f"(b) frames decoded per second: botocore EventStream {d['botocore_fps']:,.0f}; "
        f"through EventDecoder (async reader) {d['ours_fps']:,.0f} "
        f"(ratio {d['botocore_fps'] / d['ours_fps']:.2f}x)"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        _serve()
    else:
        main()
