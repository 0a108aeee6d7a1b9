"""Run every benchmark suite in one process run: ``python -m bench`` (or ``make bench``).

A suite is a module listed in :data:`SUITES` with a ``main()`` that prints its figures
(ratios against baselines it measures in the same run). A listed module that does not exist
yet is skipped with a note, so each host adds ``bench/<host>.py`` and nothing else.
Run a subset with ``python -m bench local claude``.
"""

from __future__ import annotations

import importlib
import sys
import time

SUITES: list[str] = [
    "bench.imports",
    "bench.local",
    "bench.local_transports",
    "bench.claude",
    "bench.agentcore",
    "bench.selfhosted",
    "bench.otel",
    "bench.temporal",
    "bench.console",
    "bench.output",
]


def main(argv: list[str]) -> int:
    wanted = {f"bench.{name}" for name in argv}
    for name in SUITES:
        if wanted and name not in wanted:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            print(f"\n== {name}: not present, skipped")
            continue
        suite = getattr(module, "main", None)
        if suite is None:
            print(f"\n== {name}: no main(), skipped")
            continue
        print(f"\n== {name}")
        start = time.perf_counter()
        suite()
        print(f"-- {name} took {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
