"""Shared pytest configuration: async tests run on asyncio through anyio's plugin."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

# Several tests stop a child process (`managedloop emulate`, `managedloop run`) with SIGINT,
# as Ctrl-C would. A process started as a background job (`cmd &` without job control,
# `nohup`) inherits SIGINT ignored, and so would every child: Python keeps an ignored
# SIGINT ignored, the child never stops, and the test fails on how it was launched. The
# suite runs with Python's own SIGINT handler, which a child gets as the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Property tests (marked ``fuzz``): 1,000 examples each in `make test` (the "ci" profile),
# 10,000 in `make fuzz`. No deadline: a loaded two-core CI machine must not fail a property
# on time. The session ends with the count each property really ran (see below).
CI_EXAMPLES = 1_000
settings.register_profile(
    "ci", max_examples=CI_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# `make test-oldest` reruns the whole suite on the SDK floors to catch an API that moved, not
# to fuzz again: the properties there run as many examples as hypothesis's default.
settings.register_profile(
    "floors", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "fuzz", max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck)
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)

FUZZ_TIMEOUT = 600
"""Seconds a property may run before pytest-timeout calls it hung (the suite's 60 s is
for one example's worth of work): 1,000 examples of the slowest properties take over a
minute on a loaded two-core machine. A property that sets its own timeout keeps it, and
`make fuzz` (10,000 examples) runs with no timeout at all."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if PROFILE != "ci":
        return
    for item in items:
        if item.get_closest_marker("fuzz") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(FUZZ_TIMEOUT))


_PASSING = re.compile(r"(\d+) passing, (\d+) failing, and (\d+) invalid")
_examples: dict[str, int] = {}
"""Per property (pytest node id): the examples it ran, from Hypothesis's own statistics."""


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    stats = getattr(item, "hypothesis_statistics", None)  # set by Hypothesis's plugin
    if call.when == "call" and call.excinfo is None and isinstance(stats, str):
        _examples[item.nodeid] = sum(int(passing) for passing, _, _ in _PASSING.findall(stats))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line for the whole run: how many examples every passing property ran, at the
    fewest; any below the target is listed with its count (Hypothesis stops early when it
    has run out of distinct inputs, or when most of the rest are rejected)."""
    if not _examples:
        return
    target = settings.default.max_examples
    fewest = min(_examples.values())
    terminalreporter.write_sep(
        "-",
        f"hypothesis profile {PROFILE!r}: {len(_examples)} properties, "
        f"{sum(_examples.values())} examples, at least {fewest} each (target {target})",
    )
    for nodeid, count in sorted(_examples.items(), key=lambda kv: kv[1]):
        if count < target:
            terminalreporter.write_line(f"  {count:>6} examples: {nodeid} (stopped early)")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _reset_config() -> Iterator[None]:
    """Each test starts with no process-wide configuration and an empty provision cache."""
    from managedloop import configure
    from managedloop.provisioning import clear_cache

    configure()
    clear_cache()
    yield
    configure()
    clear_cache()
