"""Worker threads for sync tools: the hop from the event loop to a thread and back.

A default (not ``inline``) sync tool runs in a worker thread. On asyncio the hop is this
module's; on any other event loop (trio) it is ``anyio.to_thread.run_sync(...,
abandon_on_cancel=True)``. Written by hand because neither library hop fits:
anyio's costs ~272k instructions per call in a bare loop (``python -m bench.instructions
bare_anyio``: a ``CapacityLimiter`` acquire and release with their checkpoints, a
``CancelScope``, a copied context, ``find_root_task``, a ``queue.Queue``, two more
event-loop iterations), and ``asyncio.to_thread`` (~172k: a ``concurrent.futures`` future
chained to an asyncio one through the executor's queue) loses what the points below keep.
Here a call is a copied context, an asyncio future, a worker woken through its own lock,
and one ``call_soon_threadsafe`` back that completes the future (``bench/README.md``, "The
tool-call floor", has the figures). What it keeps of anyio's hop (``tests/test_threads.py``):

* **anyio from the tool's thread**: the tool may call ``anyio.from_thread.run(...)``,
  ``anyio.from_thread.run_sync(...)`` and ``anyio.from_thread.check_cancelled()``. anyio
  has no public way to make a thread its worker, so the worker sets the two thread-locals
  anyio's own workers set (``anyio._core._eventloop.threadlocals``: the loop's token, the
  calling task's cancel scope from ``anyio._backends._asyncio._task_states``). Those are
  the only anyio internals used; with an anyio that lacks them every call takes anyio's
  hop instead.
* **a bounded count**: at most :data:`LIMIT` calls per event loop run at once (anyio's
  default thread limiter has 40 tokens too; tools no longer share it with the hosts' own
  thread work), the others wait in arrival order. A call abandoned by a cancellation or a
  timeout gives its slot back at once (so stuck tools cannot starve later calls); its
  thread keeps running the function, outside the count, and its late result is dropped.
* **contextvars**: the function runs in a copy of the caller's context, with sniffio's
  "current async library" cleared (as anyio clears it: the thread runs no event loop).
* **the threads**: named :data:`THREAD_NAME` (the CLI finds abandoned ones by it) and not
  daemons, like anyio's: one still running a function keeps the interpreter from exiting.
  An idle worker waits for its next call for :data:`IDLE` seconds, then ends; idle
  workers are shared by every event loop of the process (each ``run_sync`` call has a
  fresh loop), end when the interpreter shuts down, and are forgotten in a forked child.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.lowlevel
import anyio.to_thread

__all__ = ["IDLE", "LIMIT", "THREAD_NAME", "run_sync"]

T = TypeVar("T")

LIMIT = 40
"""Sync tool calls running in threads at once, per event loop."""
IDLE = 10.0
"""Seconds an idle worker waits for a call before it ends."""
THREAD_NAME = "managedloop tool thread"

_idle: list[_Worker] = []  # every loop's idle workers (list.pop/append: atomic)
_closing = False  # the interpreter is shutting down: no worker goes idle again


class _Loop:
    """One event loop's side: the slots in use and the callers waiting for one (it holds
    no reference to its loop: ``_loops`` is keyed by the loop weakly)."""

    __slots__ = ("busy", "waiters")

    def __init__(self) -> None:
        self.busy = 0
        self.waiters: deque[asyncio.Future[None]] = deque()

    def release(self) -> None:
        waiters = self.waiters
        while waiters:
            turn = waiters.popleft()
            if not turn.done():  # a cancelled waiter is skipped
                turn.set_result(None)
                return
        self.busy -= 1


_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Loop] = weakref.WeakKeyDictionary()
_last: tuple[Any, _Loop | None] = (None, None)  # the last loop (weakly) and its side


def _loop_side(loop: asyncio.AbstractEventLoop) -> _Loop:
    global _last
    ref, side = _last
    if side is not None and ref() is loop:
        return side
    side = _loops.get(loop)
    if side is None:
        side = _loops[loop] = _Loop()
    _last = weakref.ref(loop), side
    return side


# anyio's worker-thread markers (see the module docstring), loaded by the first call on
# asyncio: its thread-locals, its task states (None: not loaded yet; with an anyio < 4.11,
# whose markers differ, they stay None and every call takes anyio's own hop).
_locals: Any = None
_states: Any = None
_token: Any = None  # anyio.lowlevel.EventLoopToken
_backend: Any = None  # anyio's asyncio backend class


def _load_anyio() -> bool:
    global _locals, _states, _token, _backend
    try:
        from anyio._backends._asyncio import _task_states
        from anyio._core._eventloop import threadlocals
        from anyio.lowlevel import EventLoopToken, current_token
    except ImportError:  # pragma: no cover
        return False
    _locals, _token, _backend = threadlocals, EventLoopToken, current_token().backend_class
    _states = _task_states
    return True


try:
    import sniffio

    _clear_library: Callable[[None], object] | None = sniffio.current_async_library_cvar.set
except ImportError:  # pragma: no cover - anyio works without sniffio
    _clear_library = None


class _Worker:
    __slots__ = ("job", "lock", "token")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()  # held while there is no job: release() hands one over
        self.job: tuple[Any, ...] | None = None
        self.token: Any = None  # anyio's token of the loop of the last call
        threading.Thread(target=self._serve, name=THREAD_NAME, daemon=_at_exit is None).start()

    def start(self, job: tuple[Any, ...] | None) -> None:
        self.job = job
        self.lock.release()

    def _serve(self) -> None:
        acquire = self.lock.acquire
        local = _locals
        while True:
            if not acquire(timeout=IDLE):
                try:
                    _idle.remove(self)
                except ValueError:  # a caller took this worker just now: its job comes
                    acquire()
                else:
                    return
            job, self.job = self.job, None
            if job is None:  # the interpreter is shutting down
                return
            context, fn, kwargs, future, loop, scope = job
            del job
            if _clear_library is not None:
                context.run(_clear_library, None)
            token = self.token
            if token is None or token.native_token is not loop:
                token = self.token = local.current_token = _token(_backend, loop)
            local.current_cancel_scope = scope
            try:
                result, error = context.run(fn, **kwargs), None
            except BaseException as exc:
                result, error = None, exc
            local.current_cancel_scope = None
            del context, fn, kwargs, scope
            # Idle before reporting, so the caller the report wakes finds this worker idle
            # (a job handed over meanwhile waits in self.job until the report is sent);
            # none goes idle once the interpreter is shutting down.
            closing = _closing
            if not closing:
                _idle.append(self)
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for it
                loop.call_soon_threadsafe(_settle, future, result, error)
            del future, loop, result, error
            if closing:
                return


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # abandoned: the late result is dropped
        return
    if error is None:
        future.set_result(result)
    elif isinstance(error, StopIteration):  # a future cannot hold one (as anyio does)
        wrapped = RuntimeError("coroutine raised StopIteration")
        wrapped.__cause__ = error
        future.set_exception(wrapped)
    else:
        future.set_exception(error)


async def run_sync(fn: Callable[..., T], kwargs: dict[str, Any]) -> T:
    """``fn(**kwargs)`` in a worker thread; a cancellation abandons the thread at once (it
    runs on, its result dropped) and frees the call's slot."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: anyio's hop
        return await _anyio_hop(fn, kwargs)
    if _states is None and not _load_anyio():  # pragma: no cover
        return await _anyio_hop(fn, kwargs)
    side = _loop_side(loop)
    if side.busy < LIMIT:
        side.busy += 1
    else:  # wait for a slot: a releasing call hands its own over
        turn = loop.create_future()
        side.waiters.append(turn)
        try:
            await turn
        except BaseException:
            if not turn.cancelled():  # handed a slot, then cancelled
                side.release()
            raise
    try:
        state = _states.get(asyncio.current_task())
        future: asyncio.Future[T] = loop.create_future()
        job = (
            contextvars.copy_context(),
            fn,
            kwargs,
            future,
            loop,
            None if state is None else state.cancel_scope,
        )
        try:
            worker = _idle.pop()
        except IndexError:
            worker = _Worker()
        worker.start(job)
        del job
        return await future
    finally:
        side.release()


async def _anyio_hop(fn: Callable[..., T], kwargs: dict[str, Any]) -> T:
    return await anyio.to_thread.run_sync(functools.partial(fn, **kwargs), abandon_on_cancel=True)


def _stop_idle() -> None:
    """Before the interpreter joins its threads: end the idle workers."""
    global _closing
    _closing = True
    while _idle:
        try:
            worker = _idle.pop()
        except IndexError:
            break
        worker.start(None)


def _forget_after_fork() -> None:  # the parent's threads do not exist in a forked child
    global _last
    _idle.clear()
    _loops.clear()
    _last = (None, None)


# CPython's hook run before the interpreter joins its threads (concurrent.futures ends its
# idle workers through it too); without it (not CPython) the threads are daemons.
_at_exit = getattr(threading, "_register_atexit", None)
if _at_exit is not None:
    with contextlib.suppress(RuntimeError):  # pragma: no cover - imported at shutdown
        _at_exit(_stop_idle)
os.register_at_fork(after_in_child=_forget_after_fork)
