"""A manual monotonic clock for the AgentCore emulator and the code under test."""

from __future__ import annotations

import asyncio
import threading

__all__ = ["ManualClock"]


class ManualClock:
    """A monotonic clock that moves only when told to, or when something sleeps on it.

    Share one between the emulator (``AgentCoreEmulator(clock=...)``: harness and endpoint
    status timings and ``control_latency`` run on it) and the code under test (e.g.
    ``provider.provision(..., clock=clock, sleep=clock.sleep)``), and every deadline,
    poll and latency is exact: no test depends on how fast the machine is. ``sleep``
    advances the clock at once and yields to the event loop (asyncio or anyio).
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()  # the emulator reads it from its own thread

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += max(0.0, seconds)

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"ManualClock(now={self():.3f})"
