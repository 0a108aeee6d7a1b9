"""One loopback server base for the emulators: an aiohttp app in its own thread and loop.

:class:`ChatEmulator`, :class:`ClaudeEmulator` and :class:`AgentCoreEmulator` each build an
``aiohttp`` application; this base serves it on ``127.0.0.1`` (a free port by default) in
a daemon thread with its own event loop, so the client under test talks to a real socket
while the test (sync or async) runs on its own loop. It gives all three the same
lifecycle:

* ``with emu:`` or ``emu.start()`` / ``emu.stop()`` from sync code; ``async with emu:``
  from async code, which starts the server thread, then waits for the bind (and later for
  the stop) in a worker thread, so a running event loop keeps serving its other tasks
  meanwhile; a task cancelled while starting stops the server it started;
* :meth:`~LoopbackServer.start` returns once the port is bound, or raises
  :class:`EmulatorStartError`: ``port_in_use`` (the message names the port),
  ``emulator_start_timeout`` (not bound within :data:`START_TIMEOUT`) or
  ``emulator_start_failed`` (anything else; the cause is chained). A failed start leaves
  no thread or socket behind;
* the bound port comes from aiohttp's public ``AppRunner.addresses``.

Why a thread and not the caller's loop: a sync test has no loop, and an async test must
not share its loop with the server (a test that blocks its loop would stall the server it
is waiting for, and the server must outlive a ``run_sync`` call's ephemeral loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import threading
from typing import Any, ClassVar, Self

import anyio
import anyio.to_thread
from aiohttp import web

from managedloop.errors import ManagedLoopError

__all__ = [
    "BACKLOG",
    "MAX_BODY",
    "SHUTDOWN_GRACE",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "EmulatorStartError",
    "LoopbackServer",
]

# A loopback bind takes milliseconds; 10 s is only reached on a broken or starved machine,
# and then a test should fail with a named error rather than hang.
START_TIMEOUT = 10.0
# Seconds stop() waits for the server thread: in-flight handlers get SHUTDOWN_GRACE, then
# the cleanup (closing sockets, cancelling tasks) is quick.
STOP_TIMEOUT = 10.0
SHUTDOWN_GRACE = 0.5  # seconds in-flight handlers get when the emulator stops
# Accept queue: sessions connecting at once must not overflow it (each overflow is a SYN
# dropped and retried after 1 s, 3 s, 7 s...). 4096 is Linux's default net.core.somaxconn
# since 5.4, which caps it; 10,000 sessions at once overflowed 2,048 thousands of times.
BACKLOG = 4096
MAX_BODY = 64 * 1024 * 1024  # bytes; aiohttp's 1 MiB default refuses long resumed histories


class EmulatorStartError(ManagedLoopError):
    """An emulator could not start serving.

    ``code``: ``port_in_use`` (another socket holds the port), ``emulator_start_timeout``
    (not listening within :data:`START_TIMEOUT`) or ``emulator_start_failed``. ``context``
    holds ``emulator``, ``host`` and ``port`` (the port asked for; ``0`` is any free one).
    """

    default_code = "emulator_start_failed"


class LoopbackServer:
    """The shared lifecycle of the emulators (see the module docs).

    A subclass builds its application in :meth:`_app`; the hooks run around the server:
    :meth:`_before_start` (caller's thread, before the thread starts),
    :meth:`_before_cleanup` (on the server loop once stopping, before the sockets close),
    :meth:`_after_stop` (caller's thread, once the server thread is done) and
    :meth:`_on_exit` (after a ``with`` / ``async with`` block has stopped the server).

    ``host`` and ``port`` are where it listens: the port asked for until started, then the
    bound one.
    """

    label: ClassVar[str] = "emulator"
    """How messages and the thread name call it, e.g. ``"chat emulator"``."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._requested_port = port
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    # -- what a subclass provides ----------------------------------------------------------

    def _app(self) -> web.Application:
        raise NotImplementedError

    def _before_start(self) -> None:
        """Prepare what the server needs before it starts (runs in the caller's thread)."""

    async def _before_cleanup(self) -> None:
        """End long-lived handlers (streams, stalls) so the shutdown does not wait on them."""

    def _after_stop(self) -> None:
        """Release what :meth:`_before_start` prepared (runs in the caller's thread)."""

    def _on_exit(self, kind: type[BaseException] | None) -> None:
        """After a ``with`` block stopped the server; ``kind`` is the block's exception type."""

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the server thread is serving (between a start and a stop)."""
        return self._thread is not None

    def start(self) -> Self:
        """Start serving; returns once the port is bound (:class:`EmulatorStartError` if not).

        Blocking: from async code use ``async with``, which waits without blocking the loop.
        """
        if self._thread is None:
            self._launch()
            error = self._start_error(self._wait_started(START_TIMEOUT))
            if error is not None:
                self.stop()
                raise error
        return self

    def _launch(self) -> None:
        """Start the server thread (returns at once: waiting for the bind is the caller's)."""
        self._before_start()
        self._ready.clear()
        self._failure = None
        loop = asyncio.new_event_loop()
        # Made here, not in the thread, so that stop() can always reach the loop: a callback
        # sent before the loop runs waits in its queue.
        self._loop, self._stop = loop, asyncio.Event()
        self._thread = threading.Thread(
            target=self._main, args=(loop, self._stop), name=self.label, daemon=True
        )
        self._thread.start()

    def _wait_started(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the bind (or its failure); False on timeout."""
        return self._ready.wait(timeout)

    def stop(self) -> None:
        """Stop serving and wait for the server thread (up to :data:`STOP_TIMEOUT`)."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        self._thread = None
        if loop is not None and stop is not None:
            # A closed loop (RuntimeError) means the thread already ended on its own.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        thread.join(STOP_TIMEOUT)
        self._loop = self._stop = None
        self._after_stop()

    def serve_forever(self) -> None:
        """Serve until interrupted (``KeyboardInterrupt``), then stop."""
        self.start()
        try:
            while (thread := self._thread) is not None and thread.is_alive():
                thread.join(0.5)
        finally:
            self.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        self.stop()
        self._on_exit(kind)

    async def __aenter__(self) -> Self:
        if self._thread is not None:
            return self
        self._launch()
        try:
            # A worker thread waits, so the running loop goes on serving its other tasks; if
            # this task is cancelled, the wait is left to end by itself and the server stops.
            started = await anyio.to_thread.run_sync(
                self._wait_started, START_TIMEOUT, abandon_on_cancel=True
            )
        except BaseException:
            await self._stop_in_thread()
            raise
        error = self._start_error(started)
        if error is not None:
            await self._stop_in_thread()
            raise error
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        await self._stop_in_thread()
        self._on_exit(kind)

    async def _stop_in_thread(self) -> None:
        with anyio.CancelScope(shield=True):  # a cancelled task still stops its server
            await anyio.to_thread.run_sync(self.stop)

    # -- the server thread -----------------------------------------------------------------

    def _main(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        try:
            # The runner cancels what is left and closes the loop, as asyncio.run does.
            with asyncio.Runner(loop_factory=lambda: loop) as runner:
                runner.run(self._serve(stop))
        except BaseException as exc:  # reported by start(); the thread must not die silently
            self._failure = exc
        finally:
            self._ready.set()  # a failed start wakes start() at once

    async def _serve(self, stop: asyncio.Event) -> None:
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=SHUTDOWN_GRACE)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self._requested_port, backlog=BACKLOG)
            await site.start()
            self.port = _bound_port(runner)
            self._ready.set()
            await stop.wait()
            await self._before_cleanup()
        finally:
            await runner.cleanup()

    def _start_error(self, started: bool) -> EmulatorStartError | None:
        """None when the server is listening, else the error to raise (after a stop)."""
        failure = self._failure
        if started and failure is None:
            return None
        where = f"{self.host}:{self._requested_port}"
        context: dict[str, Any] = {
            "emulator": self.label,
            "host": self.host,
            "port": self._requested_port,
        }
        if not started or failure is None:
            return EmulatorStartError(
                f"the {self.label} was not listening on {where} within {START_TIMEOUT:g} s",
                code="emulator_start_timeout",
                **context,
            )
        if isinstance(failure, OSError) and failure.errno == errno.EADDRINUSE:
            return EmulatorStartError(  # the message says it all: no chained traceback
                f"the {self.label} cannot listen on {where}: port {self._requested_port} is "
                "already in use (pass another port, or 0 for a free one)",
                code="port_in_use",
                **context,
            )
        error = EmulatorStartError(
            f"the {self.label} failed to start on {where}: {type(failure).__name__}: {failure}",
            **context,
        )
        error.__cause__ = failure  # as ``raise ... from failure``: the traceback is the cause's
        return error


def _bound_port(runner: web.AppRunner) -> int:
    """The port the runner's first site listens on (``(host, port, ...)`` socket names)."""
    port = runner.addresses[0][1]
    assert isinstance(port, int)
    return port
