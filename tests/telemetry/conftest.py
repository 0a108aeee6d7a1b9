"""Shared pieces of the telemetry tests: a recorder, two tools, and the host fixtures."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

import managedloop as ml
from managedloop import telemetry
from weather import get_time, get_weather

from .otel_kit import otel  # noqa: F401  (a fixture for the OTel tests)

# Caller tags: one of our own, and values under library keys that must lose.
LOSES = "caller value loses"
CALLER = {
    "tenant": "acme",
    "turn": LOSES,
    "tool": LOSES,
    "path": LOSES,
    "session_id": LOSES,
    "type": LOSES,
    "provider": LOSES,
    "terminal": LOSES,
}


TWO_TOOLS = ml.AgentSpec(
    name="weather",
    system_prompt="Use tools.",
    tools=[get_weather, get_time],
    model="claude-haiku-4-5",
)


class Recorder:
    """Every telemetry event, as (name without prefix, measurements, metadata)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    def __call__(self, name: str, m: Mapping[str, Any], md: Mapping[str, Any]) -> None:
        self.events.append((name.removeprefix(telemetry.PREFIX), dict(m), dict(md)))

    def names(self) -> set[str]:
        return {n for n, _, _ in self.events}

    def of(self, name: str) -> list[dict[str, Any]]:
        return [md for n, _, md in self.events if n == name]


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    handle = telemetry.attach(rec)
    try:
        yield rec
    finally:
        telemetry.detach(handle)


def check_against_table(rec: Recorder, expected: set[str], *, tagged: set[str]) -> None:
    """Every expected event fired; each has its table's measurements and metadata keys;
    the caller's tags are on every event in ``tagged`` and lose to the library's keys."""
    assert expected <= rec.names(), sorted(expected - rec.names())
    for name, measurements, meta in rec.events:
        want_m, want_md = telemetry.TABLE[name]
        assert set(want_m) <= set(measurements), (name, measurements)
        assert set(want_md) <= set(meta), (name, sorted(set(want_md) - set(meta)))
        if name in tagged:
            assert meta.get("tenant") == "acme", (name, meta)
            losers = [k for k in want_md if meta.get(k) == LOSES]
            assert not losers, (name, losers)
