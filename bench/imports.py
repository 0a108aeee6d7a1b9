"""``import managedloop`` in a fresh interpreter: wall time of the import alone.

Target (issue 9 item 6): <= 100 ms. Each run is a new ``python -c`` process timing the
import with ``perf_counter`` (interpreter start-up excluded); runs interleave with a
baseline process that imports only ``asyncio``, the floor any async library pays.
``python -X importtime -c "import managedloop"`` shows where the time goes.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

RUNS = 15
_TIMED = "import time; t = time.perf_counter(); import {}; print(time.perf_counter() - t)"


def _once(module: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _TIMED.format(module)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout) * 1000


def main() -> None:
    times: dict[str, list[float]] = {"managedloop": [], "asyncio": []}
    for _ in range(RUNS):
        for module, row in times.items():
            row.append(_once(module))
    ours, floor = times["managedloop"], times["asyncio"]
    one, five, _ = os.getloadavg()
    print(
        f"import managedloop: min {min(ours):.0f} ms, median {statistics.median(ours):.0f} ms "
        f"over {RUNS} fresh interpreters (import asyncio alone: min {min(floor):.0f} ms, "
        f"median {statistics.median(floor):.0f} ms); target <= 100 ms; "
        f"load average {one:.1f} (5 min: {five:.1f}) on {os.cpu_count()} cores"
    )
