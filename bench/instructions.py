"""Instructions per in-process tool call (bench (b)'s loops), counted by callgrind.

``python -m bench.instructions [LOOP ...]`` runs each loop under ``valgrind
--tool=callgrind`` twice, with 5 warm-up conversations and with 5 + 40, and prints
(Ir(45) - Ir(5)) / (40 x 20 tool calls): a figure load does not move, unlike wall time on a
shared machine. ``PYTHONHASHSEED=0`` keeps it repeatable. Loops (:data:`LOOPS`, default
``inline``): ``inline``, ``async``, ``default`` (``ml.run`` with that kind of tool) and
(b)'s floors ``bare``, ``bare_async``, ``bare_to_thread``, plus ``bare_anyio`` (the bare
loop hopping the way a default tool does). Callgrind counts user-space instructions in
every thread; what a thread hop costs in the kernel and the scheduler it does not see.
Not part of ``python -m bench`` (each loop takes a minute or two under valgrind).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable

from bench.local import (
    TOOL_CALLS,
    bare_anyio_run,
    bare_async_run,
    bare_inprocess_run,
    bare_to_thread_run,
    ours_runner,
)

WARM_UP = 5
RUNS = 40

LOOPS: dict[str, Callable[[], Callable[[], Awaitable[None]]]] = {
    "inline": lambda: ours_runner("inline"),
    "async": lambda: ours_runner("async"),
    "default": lambda: ours_runner("default"),
    "bare": lambda: bare_inprocess_run,
    "bare_async": lambda: bare_async_run,
    "bare_to_thread": lambda: bare_to_thread_run,
    "bare_anyio": lambda: bare_anyio_run,
}


async def _conversations(loop: str, n: int) -> None:
    run = LOOPS[loop]()
    for _ in range(WARM_UP + n):
        await run()


def _instructions(loop: str, n: int) -> int:
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-m",
            "bench.instructions",
            "--child",
            loop,
            str(n),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = re.search(r"Collected : (\d+)", out.stderr)
    assert found, out.stderr[-500:]
    return int(found.group(1))


def main(loops: list[str]) -> None:
    for loop in loops or ["inline"]:
        if loop not in LOOPS:
            raise SystemExit(f"unknown loop {loop!r}; known: {', '.join(LOOPS)}")
    for loop in loops or ["inline"]:
        base, more = _instructions(loop, 0), _instructions(loop, RUNS)
        per_call = (more - base) / (RUNS * TOOL_CALLS)
        print(f"in process, {loop}: {per_call:,.0f} instructions per tool call (callgrind)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(_conversations(sys.argv[2], int(sys.argv[3])))
    else:
        main(sys.argv[1:])
