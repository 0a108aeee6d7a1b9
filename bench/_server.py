"""A chat emulator in its own process, so server CPU never competes with the client's.

``python -m bench._server TOOL_TURNS [LATENCY]`` serves a script of TOOL_TURNS ``get_weather`` calls
then an answer, prints ``base_url`` and ``api_key`` on one line, and serves until stdin
closes. :func:`serve` wraps that as a context manager.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from managedloop.testing import (
    ChatEmulator,
    ChatFaults,
    Fail,
    Grade,
    ModelRequest,
    Reply,
    ScriptedAgent,
    Step,
    call,
    say,
)


class _LeanAgent(ScriptedAgent):
    """Does not keep every request (1,000 sessions would pile them up in the server)."""

    def next_step(self, request: ModelRequest) -> Reply | Fail | Grade:
        self.requests.clear()
        return super().next_step(request)


class _Discard(list[Any]):
    """A ``received`` that keeps nothing: 10,000 sessions x 3 bodies kept in the server
    made every later run slower (its garbage collector walks all of them)."""

    def append(self, item: Any) -> None:
        pass


def script(tool_turns: int) -> list[Step]:
    return [call("get_weather", {"city": f"city{i}"}) for i in range(tool_turns)] + [
        say("All done.")
    ]


@contextlib.contextmanager
def serve(tool_turns: int, latency: float = 0.0) -> Iterator[tuple[str, str]]:
    """Serve in a child process; ``latency`` seconds of simulated model time per request."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench._server", str(tool_turns), str(latency)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        base_url, key = proc.stdout.readline().split()
        yield base_url, key
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _main() -> None:
    tool_turns = int(sys.argv[1])
    latency = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    faults = ChatFaults(slow=1 << 62, delay=latency) if latency else None
    with ChatEmulator(agent=_LeanAgent(script(tool_turns)), faults=faults) as emu:
        emu.received = _Discard()
        print(emu.base_url, emu.api_key, flush=True)
        sys.stdin.read()  # until the parent closes our stdin


if __name__ == "__main__":
    _main()
