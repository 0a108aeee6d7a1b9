"""Event loops: the blocking ``*_sync`` faces, and which loops are throwaway.

``run_sync`` and the other ``*_sync`` faces are :func:`syncify` of their async function:
each call runs on a fresh event loop that ends with the call. A host whose client binds
connection pools to a loop (the ``anthropic`` SDK does) must not park a caller's
long-lived client on such a loop: its pooled sockets could be neither reused nor closed
afterwards. Hosts read :data:`ephemeral_loop` to know.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import ParamSpec, TypeVar

import anyio

from managedloop.errors import ManagedLoopError

__all__ = ["ephemeral_loop", "syncify"]

P = ParamSpec("P")
R = TypeVar("R")

ephemeral_loop: ContextVar[bool] = ContextVar("managedloop_ephemeral_loop", default=False)
"""True inside a ``*_sync`` call: the running loop ends when the call returns."""


def syncify(fn: Callable[P, Awaitable[R]]) -> Callable[P, R]:
    """The blocking face of an async API function: the same call, run on a fresh loop."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise ManagedLoopError(
                f"{fn.__name__}_sync cannot run inside an event loop; await {fn.__name__}(...)",
                code="sync_in_event_loop",
            )

        async def call() -> R:
            return await fn(*args, **kwargs)

        token = ephemeral_loop.set(True)  # hosts must not bind a caller's client to this loop
        try:
            return anyio.run(call)
        finally:
            ephemeral_loop.reset(token)

    wrapper.__name__ = f"{fn.__name__}_sync"
    wrapper.__qualname__ = wrapper.__name__
    return wrapper
