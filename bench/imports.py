"""``import managedloop`` in a fresh interpreter: wall time of the import alone.

Target (issue 9 item 6): <= 100 ms. Each run is a new ``python -c`` process timing the
import with ``perf_counter`` (interpreter start-up excluded); runs interleave with a
baseline process that imports only ``asyncio``, the floor any async library pays.

Two conditions, because bytecode caching moves the figure by a quarter:

* **cached**: with ``.pyc`` files, as a wheel installed by pip (which compiles at install)
  or any second run of a source tree loads. The caches live under a temporary
  ``PYTHONPYCACHEPREFIX``, written by one warm-up run, so the source tree is untouched.
* **uncached**: managedloop's own modules compiled from source on every import, as under
  ``PYTHONDONTWRITEBYTECODE=1`` with a source checkout that has no ``__pycache__`` yet
  (this sandbox sets it; a test run that starts subprocesses without it leaves caches in
  ``src/``, which is why plain ``python -c "import managedloop"`` figures drift here). A
  copy of the warm cache without managedloop's files makes the condition exact: the
  standard library and the dependencies keep their ``.pyc`` files, ``src/`` is ignored.

``python -X importtime -c "import managedloop"`` shows where the time goes; the
``self`` line below sums its self times over managedloop's modules (median of the runs),
a figure that moves less with the machine's load than the wall time does.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RUNS = 15
_TIMED = "import time\nt = time.perf_counter()\n{}\nprint(time.perf_counter() - t)"
IMPORT = "import managedloop"
FLOOR = "import asyncio"
FIRST_USE = """import managedloop as ml

@ml.tool
def f(x: int) -> str:
    return str(x)

ml.run_sync, ml.AgentSpec(name="a", tools=[f])"""
"""What the import leaves for later, paid by a program that runs a session with a tool:
pydantic (the first ``@tool``) and the session loop (the first ``ml.run_sync``)."""


def _env(cache: Path, *, write: bool) -> dict[str, str]:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(cache))
    if write:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _package_dir(env: dict[str, str]) -> Path:
    code = "import managedloop, os; print(os.path.dirname(os.path.abspath(managedloop.__file__)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return Path(out.stdout.strip())


def _once(statement: str, env: dict[str, str]) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _TIMED.format(statement)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return float(out.stdout) * 1000


def _own_self_ms(env: dict[str, str]) -> float:
    """Sum of ``-X importtime`` self times over managedloop's own modules, in ms."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import managedloop"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    total = 0
    for line in out.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[2].strip().split(".")[0] == "managedloop":
            total += int(parts[0])
    return total / 1000


def _line(label: str, row: list[float]) -> str:
    return f"{label} min {min(row):.0f} ms, median {statistics.median(row):.0f} ms"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ml-pycache-") as tmp:
        warm, cold = Path(tmp, "warm"), Path(tmp, "cold")
        for statement in (FLOOR, FIRST_USE):  # warm-up: writes the .pyc files
            _once(statement, _env(warm, write=True))
        cached = _env(warm, write=False)
        # The same caches minus managedloop's own (the prefix mirrors absolute paths).
        shutil.copytree(warm, cold)
        shutil.rmtree(cold / _package_dir(cached).relative_to("/"))
        uncached = _env(cold, write=False)
        times: dict[str, list[float]] = {"asyncio": [], "cached": [], "uncached": [], "use": []}
        own: dict[str, list[float]] = {"cached": [], "uncached": []}
        for _ in range(RUNS):
            times["asyncio"].append(_once(FLOOR, cached))
            times["cached"].append(_once(IMPORT, cached))
            times["uncached"].append(_once(IMPORT, uncached))
            times["use"].append(_once(FIRST_USE, cached))
        for _ in range(5):
            own["cached"].append(_own_self_ms(cached))
            own["uncached"].append(_own_self_ms(uncached))
    one, five, _ = os.getloadavg()
    print(
        f"import managedloop over {RUNS} fresh interpreters: "
        f"{_line('cached', times['cached'])}; {_line('uncached', times['uncached'])} "
        f"({_line('import asyncio alone:', times['asyncio'])}); target <= 100 ms; "
        f"load average {one:.1f} (5 min: {five:.1f}) on {os.cpu_count()} cores"
    )
    print(
        f"  {_line('then one @tool and ml.run_sync (cached):', times['use'])}, what a program"
        " that runs a session pays before its first request (pydantic, the session loop)"
    )
    print(
        "  -X importtime self, managedloop's modules (median of 5): "
        f"cached {statistics.median(own['cached']):.1f} ms, "
        f"uncached {statistics.median(own['uncached']):.1f} ms"
    )
