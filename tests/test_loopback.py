"""The emulators' shared server lifecycle (``managedloop.testing._loopback``).

Each emulator starts and stops from sync and from async code; ``async with`` never blocks
the running loop; a failed start is one named error (a busy port names the port, a start
that does not finish within ``START_TIMEOUT`` says so) and leaves nothing running. The
waits are injected (``_wait_started``), so no test depends on how fast anything is.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import pytest
from aiohttp import web

from managedloop.errors import ManagedLoopError
from managedloop.testing import (
    AgentCoreEmulator,
    ChatEmulator,
    ClaudeEmulator,
    EmulatorStartError,
)
from managedloop.testing._loopback import START_TIMEOUT, LoopbackServer

Make = Callable[..., LoopbackServer]

EMULATORS: dict[str, Make] = {
    "chat": ChatEmulator,
    "claude": ClaudeEmulator,
    "agentcore": lambda **kw: AgentCoreEmulator(commands=None, **kw),
}
_IO_TIMEOUT = 10.0  # seconds for a loopback request; only reached if the server is broken


@pytest.fixture(params=sorted(EMULATORS))
def make(request: pytest.FixtureRequest) -> Make:
    return EMULATORS[request.param]


def _http_status(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=_IO_TIMEOUT)
    try:
        conn.request("GET", "/")
        return conn.getresponse().status
    finally:
        conn.close()


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=_IO_TIMEOUT).close()
    except ConnectionRefusedError:
        return True
    return False


def _never_started(emu: LoopbackServer, seen: list[tuple[float, threading.Thread | None]]) -> None:
    """Make ``emu``'s wait for the bind report a timeout, recording what it was given."""

    def wait(timeout: float) -> bool:
        seen.append((timeout, emu._thread))
        return False

    emu._wait_started = wait  # type: ignore[method-assign]


# -- start and stop ---------------------------------------------------------------------


def test_sync_start_serves_and_stop_frees_the_port(make: Make) -> None:
    emu = make()
    with emu as entered:
        assert entered is emu
        assert emu.running
        assert emu.port != 0
        assert 100 <= _http_status(emu.port) < 600  # a real HTTP server answers
        assert emu.start() is emu  # starting a running emulator is a no-op
    assert not emu.running
    assert _refused(emu.port)
    emu.stop()  # stopping twice is a no-op


def test_start_and_stop_as_calls_and_again(make: Make) -> None:
    emu = make()
    assert emu.start() is emu
    first = emu.port
    emu.stop()
    assert _refused(first)
    emu.start()  # a stopped emulator starts again
    try:
        assert emu.running
        assert 100 <= _http_status(emu.port) < 600
    finally:
        emu.stop()


@pytest.mark.anyio
async def test_async_start_serves_and_stop_frees_the_port(make: Make) -> None:
    emu = make()
    async with emu as entered:
        assert entered is emu
        assert emu.running
        reader, writer = await asyncio.open_connection("127.0.0.1", emu.port)
        writer.write(b"GET / HTTP/1.1\r\nHost: emulator\r\nConnection: close\r\n\r\n")
        status_line = await reader.readline()
        writer.close()
        await writer.wait_closed()
        assert status_line.startswith(b"HTTP/1.1 ")
        assert await emu.__aenter__() is emu  # entering a running emulator is a no-op
    assert not emu.running
    assert _refused(emu.port)


@pytest.mark.anyio
async def test_async_start_leaves_the_running_loop_free(make: Make) -> None:
    emu = make()
    returned = False
    ran_while_starting: list[bool] = []
    other_ran = threading.Event()
    real_wait = emu._wait_started

    def gated_wait(timeout: float) -> bool:
        # The bind is reported only once another task of the test's loop has run: a start
        # that blocked the loop would never see that happen.
        return other_ran.wait(timeout) and real_wait(timeout)

    emu._wait_started = gated_wait  # type: ignore[method-assign]

    async def other() -> None:
        ran_while_starting.append(not returned)
        other_ran.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        async with emu:
            returned = True
            assert emu.running
    assert ran_while_starting == [True]


@pytest.mark.anyio
async def test_a_cancelled_async_start_stops_the_server(make: Make) -> None:
    emu = make()
    waiting, release = threading.Event(), threading.Event()
    threads: list[threading.Thread | None] = []
    entered: list[bool] = []

    def slow_wait(timeout: float) -> bool:
        threads.append(emu._thread)
        waiting.set()
        return release.wait(timeout)

    emu._wait_started = slow_wait  # type: ignore[method-assign]

    async def enter() -> None:
        async with emu:
            entered.append(True)

    try:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(enter)
                await anyio.to_thread.run_sync(waiting.wait, _IO_TIMEOUT)
                scope.cancel()
    finally:
        release.set()  # lets the abandoned wait end
    assert entered == []
    assert not emu.running
    (thread,) = threads
    assert thread is not None
    assert not thread.is_alive()


# -- failed starts ----------------------------------------------------------------------


async def _start(emu: LoopbackServer, how: str) -> None:
    if how == "sync":
        emu.start()
    else:
        await emu.__aenter__()


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["sync", "async"])
async def test_a_busy_port_is_a_named_error_naming_the_port(make: Make, how: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        emu = make(port=port)
        with pytest.raises(EmulatorStartError) as info:
            await _start(emu, how)
    error = info.value
    assert isinstance(error, ManagedLoopError)
    assert error.code == "port_in_use"
    assert str(error) == (
        f"the {emu.label} cannot listen on 127.0.0.1:{port}: port {port} is already in use "
        "(pass another port, or 0 for a free one)"
    )
    assert error.context == {"emulator": emu.label, "host": "127.0.0.1", "port": port}
    assert error.__cause__ is None  # the message is the whole story, not a traceback
    assert not emu.running


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["sync", "async"])
async def test_a_start_past_the_timeout_is_a_named_error(make: Make, how: str) -> None:
    emu = make()
    seen: list[tuple[float, threading.Thread | None]] = []
    _never_started(emu, seen)
    with pytest.raises(EmulatorStartError) as info:
        await _start(emu, how)
    assert info.value.code == "emulator_start_timeout"
    assert str(info.value) == (
        f"the {emu.label} was not listening on 127.0.0.1:0 within {START_TIMEOUT:g} s"
    )
    ((timeout, thread),) = seen
    assert timeout == START_TIMEOUT
    assert thread is not None
    assert not thread.is_alive()  # the half-started server was stopped
    assert not emu.running
    del emu._wait_started  # the real wait again: a failed emulator can still start
    with emu:
        assert 100 <= _http_status(emu.port) < 600


def test_a_failed_agentcore_start_removes_its_scratch_directory() -> None:
    emu = AgentCoreEmulator(commands=None)
    scratch: list[str | None] = []

    def wait(timeout: float) -> bool:
        scratch.append(emu._scratch)
        return False

    emu._wait_started = wait  # type: ignore[method-assign]
    with pytest.raises(EmulatorStartError):
        emu.start()
    (made,) = scratch
    assert made is not None
    assert not os.path.exists(made)


class _Broken(LoopbackServer):
    label = "broken emulator"

    def _app(self) -> web.Application:
        raise ValueError("no application today")


class _Plain(LoopbackServer):
    label = "plain emulator"

    def _app(self) -> web.Application:
        app = web.Application()

        async def hello(request: web.Request) -> web.Response:
            return web.Response(text="hello")

        app.router.add_get("/", hello)
        return app


def test_any_other_start_failure_is_a_named_error_with_its_cause() -> None:
    emu = _Broken()
    with pytest.raises(EmulatorStartError) as info:
        emu.start()
    assert info.value.code == "emulator_start_failed"
    assert str(info.value) == (
        "the broken emulator failed to start on 127.0.0.1:0: ValueError: no application today"
    )
    assert isinstance(info.value.__cause__, ValueError)
    assert not emu.running


def test_the_base_serves_a_subclass_app_on_the_bound_port() -> None:
    with _Plain() as emu:
        conn = http.client.HTTPConnection(emu.host, emu.port, timeout=_IO_TIMEOUT)
        try:
            conn.request("GET", "/")
            answer = conn.getresponse()
            assert (answer.status, answer.read()) == (200, b"hello")
        finally:
            conn.close()


def test_serve_forever_stops_when_interrupted() -> None:
    emu = _Plain()
    ports: list[int] = []
    real_join = threading.Thread.join

    def interrupted(self: threading.Thread, timeout: Any = None) -> None:
        if self.name == emu.label and timeout == 0.5:  # serve_forever's idle wait
            ports.append(emu.port)
            raise KeyboardInterrupt
        real_join(self, timeout)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(threading.Thread, "join", interrupted)
        with pytest.raises(KeyboardInterrupt):
            emu.serve_forever()
    assert not emu.running
    (port,) = ports
    assert _refused(port)
