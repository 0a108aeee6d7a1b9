"""Instructions per in-process tool call (bench (b)'s loops) and per typed-output run
(``bench.output``'s), counted by callgrind.

``python -m bench.instructions [LOOP ...]`` runs each loop under ``valgrind
--tool=callgrind`` twice, with 5 warm-up rounds and with 5 + 40, and prints
(Ir(45) - Ir(5)) / (40 x the round's units): a figure load does not move, unlike wall
time on a shared machine. ``PYTHONHASHSEED=0`` keeps it repeatable. Loops (:data:`LOOPS`,
default ``inline``):

* per tool call (a round is one 20-call conversation): ``inline``, ``async``, ``default``
  (``ml.run`` with that kind of tool) and (b)'s floors ``bare``, ``bare_async``,
  ``bare_to_thread``, plus ``bare_hop`` (the bare loop hopping the way a default tool
  does, ``managedloop._threads``) and ``bare_anyio`` (the way it did before, anyio's
  ``to_thread.run_sync``); and parts of ``inline``, each alone: ``scripted_model`` (the
  scripted model answering the conversation's requests), ``tool_call`` (``run_one_call`` on the
  ``Toolset``: validation, the call, the result) and ``tool_input`` (the validation alone);
* per run (a round is 10 runs or calls; issue 24's measure, load-independent):
  ``output_plain`` (``bench.output``'s plain one-turn run), ``output_typed`` (the same
  with ``output=Weather``, text strategy), ``validate_python`` and ``validate_json``
  (``TypeAdapter(Weather)`` on the same payload and its text: the validation itself),
  ``check_tool`` and ``check_text`` (the driver's validation step alone,
  ``OutputPlan.validated``, of the output tool's input and of the answer's text).

``python -m bench.instructions --opcodes [LOOP ...]`` counts, without valgrind, the
Python opcodes, calls and event-loop iterations per unit and the functions with the most
opcodes (:func:`opcodes`). Callgrind counts user-space instructions in every thread;
what a thread hop costs in the kernel and the scheduler it does not see. Not part of
``python -m bench`` (each loop takes a minute or two under valgrind).
"""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bench.local import (
    TOOL_CALLS,
    bare_anyio_run,
    bare_async_run,
    bare_hop_run,
    bare_inprocess_run,
    bare_to_thread_run,
    ours_runner,
)

WARM_UP = 5
RUNS = 40
OUTPUT_BATCH = 10  # runs (or validations) per round of the output loops


def _output_loop(kind: str) -> Callable[[], Awaitable[None]]:
    import pydantic

    import managedloop as ml
    from bench.output import AGENT, PAYLOAD, Weather
    from managedloop.providers import Local
    from managedloop.testing import ScriptedChatModel, say

    text = json.dumps(PAYLOAD)
    provider = Local(model="m", chat=ScriptedChatModel([say(text)]))
    adapter = pydantic.TypeAdapter(Weather)
    options: dict[str, Any] = (
        {"output": Weather, "output_strategy": "text"} if kind == "typed" else {"max_turns": 50}
    )

    async def runs() -> None:
        for _ in range(OUTPUT_BATCH):
            await ml.run(provider, agent=AGENT, prompt="x", **options)

    async def validations() -> None:
        validate = adapter.validate_json if kind == "json" else adapter.validate_python
        payload: Any = text if kind == "json" else PAYLOAD
        for _ in range(OUTPUT_BATCH):
            validate(payload)

    if kind.startswith("check_"):  # the driver's validation step alone, as it calls it
        from managedloop.session.output import plan

        strategy = kind.removeprefix("check_")
        checked = plan(
            Weather,
            strategy=strategy,
            retries=2,
            validators=None,
            provider=provider,
            spec=AGENT,
            tools=[],
        )
        payload = PAYLOAD if strategy == "tool" else text

        async def checks() -> None:
            for _ in range(OUTPUT_BATCH):
                checked.validated(payload)

        return checks
    return runs if kind in ("typed", "plain") else validations


def _without_gc() -> Callable[[], Awaitable[None]]:
    """``inline`` with the garbage collector off: what the collector costs it."""
    gc.disable()
    return ours_runner("inline")


def _scripted_model() -> Callable[[], Awaitable[None]]:
    """The scripted model alone (a part of ``inline``): a fresh ``ScriptedChatModel``
    answering the 20-call conversation's requests, the history growing as Local's does."""
    from bench.local import SCRIPT_B, TOOLS_WIRE
    from managedloop.providers.local import ChatRequest, History
    from managedloop.testing import ScriptedChatModel

    async def run() -> None:
        model = ScriptedChatModel(SCRIPT_B)
        history = History([{"role": "user", "content": "Weather?"}])
        request = ChatRequest(model="m", messages=history, tools=TOOLS_WIRE)
        for _ in range(TOOL_CALLS):
            message = (await model(request)).message
            history.append(message)
            call_id = message["tool_calls"][0]["id"]
            history.append({"role": "tool", "tool_call_id": call_id, "content": "Sunny"})

    return run


def _tool_calls(validate_only: bool) -> Callable[[], Awaitable[None]]:
    """The tool-call dispatch alone (a part of ``inline``): ``run_one_call`` on the inline
    tool's ``Toolset`` for 20 decoded calls; ``validate_only``: the tool's input
    validation alone (``Tool.bind``, pydantic)."""
    import managedloop as ml
    from bench.local import TOOL
    from managedloop.handler import run_one_call
    from managedloop.results import SessionInfo, make_tool_use

    toolset, info = ml.Toolset([TOOL]), SessionInfo(session_id="s", provider="local")
    names = [(f"c{i}", f"city{i}") for i in range(TOOL_CALLS)]

    async def run() -> None:
        for uid, city in names:
            await run_one_call(
                toolset, make_tool_use("get_weather", uid, {"city": city}), info, None, None
            )

    async def bind() -> None:
        for _, city in names:
            TOOL.bind({"city": city}, info)

    return bind if validate_only else run


# name: (the round's maker, units per round, the unit)
LOOPS: dict[str, tuple[Callable[[], Callable[[], Awaitable[None]]], int, str]] = {
    "inline": (lambda: ours_runner("inline"), TOOL_CALLS, "tool call"),
    "async": (lambda: ours_runner("async"), TOOL_CALLS, "tool call"),
    "default": (lambda: ours_runner("default"), TOOL_CALLS, "tool call"),
    "bare": (lambda: bare_inprocess_run, TOOL_CALLS, "tool call"),
    "bare_async": (lambda: bare_async_run, TOOL_CALLS, "tool call"),
    "bare_to_thread": (lambda: bare_to_thread_run, TOOL_CALLS, "tool call"),
    "bare_anyio": (lambda: bare_anyio_run, TOOL_CALLS, "tool call"),
    "bare_hop": (lambda: bare_hop_run, TOOL_CALLS, "tool call"),
    "inline_nogc": (_without_gc, TOOL_CALLS, "tool call"),
    "scripted_model": (_scripted_model, TOOL_CALLS, "tool call"),
    "tool_call": (lambda: _tool_calls(False), TOOL_CALLS, "tool call"),
    "tool_input": (lambda: _tool_calls(True), TOOL_CALLS, "tool call"),
    "output_plain": (lambda: _output_loop("plain"), OUTPUT_BATCH, "run"),
    "output_typed": (lambda: _output_loop("typed"), OUTPUT_BATCH, "run"),
    "validate_python": (lambda: _output_loop("python"), OUTPUT_BATCH, "call"),
    "validate_json": (lambda: _output_loop("json"), OUTPUT_BATCH, "call"),
    "check_tool": (lambda: _output_loop("check_tool"), OUTPUT_BATCH, "call"),
    "check_text": (lambda: _output_loop("check_text"), OUTPUT_BATCH, "call"),
}


async def _rounds(loop: str, n: int) -> None:
    run = LOOPS[loop][0]()
    for _ in range(WARM_UP + n):
        await run()


def callgrind(module: str, args: Sequence[str], options: Sequence[str] = ()) -> int:
    """The instructions callgrind counts in ``python -m module args`` (``options``: more
    callgrind flags, e.g. what to collect), with a fixed hash seed."""
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            *options,
            sys.executable,
            "-m",
            module,
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = re.search(r"Collected : (\d+)", out.stderr)
    assert found, out.stderr[-500:]
    return int(found.group(1))


def _instructions(loop: str, n: int) -> int:
    return callgrind("bench.instructions", ["--child", loop, str(n)])


def opcodes(loop: str, rounds: int = 5, top: int = 12) -> None:
    """``--opcodes LOOP``: the Python opcodes and calls per unit (``sys.settrace``, after
    the warm-up), the event loop's iterations per unit, and the functions with the most
    opcodes: where the interpreter's work goes, without callgrind (the C work inside each
    opcode is not counted)."""
    import asyncio.base_events

    make, units, unit = LOOPS[loop]
    ops: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    iterations = [0]
    run_once = asyncio.base_events.BaseEventLoop._run_once  # type: ignore[attr-defined]

    def counted(self: Any) -> None:
        iterations[0] += 1
        run_once(self)

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        key = f"{frame.f_code.co_filename.rsplit('/src/', 1)[-1]}:{frame.f_code.co_name}"
        calls[key] += event == "call"

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "opcode":
                ops[key] += 1
            return local

        return local

    async def main() -> None:
        run = make()
        for _ in range(WARM_UP):
            await run()
        iterations[0] = 0
        sys.settrace(tracer)
        try:
            for _ in range(rounds):
                await run()
        finally:
            sys.settrace(None)

    asyncio.base_events.BaseEventLoop._run_once = counted  # type: ignore[attr-defined]
    try:
        asyncio.run(main())
    finally:
        asyncio.base_events.BaseEventLoop._run_once = run_once  # type: ignore[attr-defined]
    n = rounds * units
    print(
        f"{loop}: {sum(ops.values()) / n:,.0f} opcodes, {sum(calls.values()) / n:.1f} Python "
        f"calls and {iterations[0] / n:.2f} event-loop iterations per {unit} (sys.settrace)"
    )
    for key, count in ops.most_common(top):
        print(f"  {count / n:7.1f} opcodes {calls[key] / n:5.2f} calls  {key}")


def main(loops: list[str]) -> None:
    for loop in loops or ["inline"]:
        if loop not in LOOPS:
            raise SystemExit(f"unknown loop {loop!r}; known: {', '.join(LOOPS)}")
    for loop in loops or ["inline"]:
        _, units, unit = LOOPS[loop]
        base, more = _instructions(loop, 0), _instructions(loop, RUNS)
        per_unit = (more - base) / (RUNS * units)
        where = "in process" if unit == "tool call" else "output"
        print(f"{where}, {loop}: {per_unit:,.0f} instructions per {unit} (callgrind)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(_rounds(sys.argv[2], int(sys.argv[3])))
    elif sys.argv[1:2] == ["--opcodes"]:
        for name in sys.argv[2:] or ["inline"]:
            opcodes(name)
    else:
        main(sys.argv[1:])
