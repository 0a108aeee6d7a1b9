"""Instructions per in-process tool call (bench (b)'s loop), counted by callgrind.

``python -m bench.instructions`` runs the loop under ``valgrind --tool=callgrind`` twice,
with 5 warm-up conversations and with 5 + 40, and prints
(Ir(45) - Ir(5)) / (40 x 20 tool calls): a figure load does not move, unlike wall time on a
shared machine. ``PYTHONHASHSEED=0`` keeps it repeatable. Not part of ``python -m bench``
(it takes a minute or two under valgrind).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

from bench.local import TOOL_CALLS, ours_inprocess_run

WARM_UP = 5
RUNS = 40


async def _conversations(n: int) -> None:
    for _ in range(WARM_UP + n):
        await ours_inprocess_run()


def _instructions(n: int) -> int:
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-m",
            "bench.instructions",
            "--child",
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


def main() -> None:
    base, more = _instructions(0), _instructions(RUNS)
    per_call = (more - base) / (RUNS * TOOL_CALLS)
    print(f"in process: {per_call:,.0f} instructions per tool call (callgrind)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        asyncio.run(_conversations(int(sys.argv[2])))
    else:
        main()
