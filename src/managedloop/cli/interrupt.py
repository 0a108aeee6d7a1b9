"""Ctrl-C for the ``managedloop`` command: the first one cancels, the second one exits.

:func:`run_interruptibly` runs a coroutine function on a fresh event loop inside one
cancel scope, with its own SIGINT handler in place of Python's (asyncio's runner then
installs none of its own). The first Ctrl-C cancels that scope: the session's in-flight
request is cancelled and its connection closed, an async tool gets ``CancelledError``, a
sync tool's worker thread is abandoned (a sync tool that polls
``anyio.from_thread.check_cancelled()`` sees the cancellation). The call then reports
``interrupted=True``; the caller prints one line and exits 130. The second Ctrl-C exits at
once (``os._exit(130)``), whatever is still running.

A worker thread Python cannot stop would keep the interpreter alive at exit (it joins
every non-daemon thread), so :func:`exit_now_if_threads_remain` gives the abandoned
threads a short grace to return, then ends the process without waiting for them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import TypeVar

import anyio

from managedloop._threads import THREAD_NAME

__all__ = ["GRACE", "exit_now_if_threads_remain", "run_interruptibly", "tool_threads"]

T = TypeVar("T")
# Seconds an abandoned tool thread gets to return after Ctrl-C before the process exits
# without it: long enough for a tool that checks for cancellation, short enough that the
# person who pressed Ctrl-C does not wait.
GRACE = 0.5
# The names of the threads a sync tool runs in: managedloop's own on asyncio, anyio's
# to_thread workers on another event loop (trio).
_WORKERS = frozenset({THREAD_NAME, "AnyIO worker thread"})
EXIT_INTERRUPTED = 130


class _Interrupt:
    def __init__(self) -> None:
        self.count = 0
        self.cancel: Callable[[], None] | None = None

    def handler(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        self.count += 1
        if self.count > 1:  # the second Ctrl-C: now, whatever still runs
            sys.stderr.write("managedloop: interrupted again: exiting now\n")
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        if self.cancel is not None:
            self.cancel()


def run_interruptibly(fn: Callable[[], Awaitable[T]]) -> tuple[T | None, bool]:
    """``(fn's value, False)``, or ``(None, True)`` when Ctrl-C cancelled it."""
    interrupt = _Interrupt()

    async def main() -> T | None:
        with anyio.CancelScope() as scope:
            loop = asyncio.get_running_loop()  # anyio.run's default backend is asyncio

            def cancel() -> None:  # from the signal handler: wake the loop to cancel
                loop.call_soon_threadsafe(scope.cancel)

            interrupt.cancel = cancel
            if interrupt.count:  # pressed before the loop ran
                scope.cancel()
            return await fn()
        return None

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, interrupt.handler) if main_thread else None
    try:
        value = anyio.run(main)
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
    return value, interrupt.count > 0


def tool_threads() -> list[threading.Thread]:
    """The worker threads still running a sync tool."""
    return [t for t in threading.enumerate() if t.name in _WORKERS and t.is_alive()]


def exit_now_if_threads_remain(code: int, grace: float = GRACE) -> int:
    """At the process's end: wait up to ``grace`` seconds for abandoned tool threads (after
    Ctrl-C or a timeout), then, if one still runs, end the process with ``code`` at once
    (the interpreter would join it); else return ``code``."""
    if not tool_threads():
        return code
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, lambda s, f: os._exit(code)) if main_thread else None
    try:  # a Ctrl-C while waiting: at once
        deadline = time.monotonic() + grace
        for thread in tool_threads():
            thread.join(max(0.0, deadline - time.monotonic()))
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
    if tool_threads():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
