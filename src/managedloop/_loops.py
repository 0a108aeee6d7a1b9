"""Which event loops are throwaway.

``run_sync`` and the other ``*_sync`` faces run each call on a fresh event loop that ends
with the call. A host whose client binds connection pools to a loop (the ``anthropic`` SDK
does) must not park a caller's long-lived client on such a loop: its pooled sockets could
be neither reused nor closed afterwards. Hosts read :data:`ephemeral_loop` to know.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["ephemeral_loop"]

ephemeral_loop: ContextVar[bool] = ContextVar("managedloop_ephemeral_loop", default=False)
"""True inside a ``*_sync`` call: the running loop ends when the call returns."""
