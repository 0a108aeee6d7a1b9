"""The built-in toolset a self-hosted worker runs: the SDK's own tools, with our limits.

The six tools (``bash``, ``read``, ``write``, ``edit``, ``glob``, ``grep``) and their input
schemas are the SDK's ``anthropic.lib.tools.agent_toolset.beta_agent_toolset_20260401``,
bound to the SDK's per-session ``AgentToolContext``; re-writing them would only drift from
what the service expects. The SDK already confines every file tool to the work directory
(a path resolving outside it, through ``..`` or any symlink, dangling leaf included, is an
error result: ``<tool>: path "<p>" is outside the session's working directory``) and caps
the output of ``bash`` (30,000 characters), ``read`` and ``grep``.

What this module adds, each for a reason:

* **A per-call timeout** (:class:`LimitedTool`): a call that outlives ``timeout`` seconds is
  cancelled and answered with an error result naming the timeout, so a hung tool cannot
  hold a session (the SDK's own cap is 325 s for every call). For ``bash`` the limit goes
  in as its ``timeout_ms`` (the smaller of the model's and ours), so the SDK's bash times
  out by itself and kills the shell and what it started; an outside cancellation would
  leave the command running.
* **An output cap** on every tool's text (``max_output`` characters; the SDK caps some
  tools only), marked where it cut.
* **A scrubbed subprocess environment** (:func:`scrubbed_environment`): the ``bash``
  subprocess gets the process environment minus every ``ANTHROPIC_*`` and
  ``MANAGEDLOOP_*`` variable and minus any variable whose value is one of the secrets we
  hold (the organisation API key, the environment key), whatever it is named: a
  model-issued ``env`` must never print a credential into the transcript.
* **In-flight accounting** (:class:`InFlight`), so a draining worker can wait for running
  calls to finish before it lets its items go.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from anthropic.lib.tools import BetaAsyncBuiltinFunctionTool
    from anthropic.lib.tools.agent_toolset import AgentToolContext

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_TOOL_TIMEOUT",
    "InFlight",
    "builtin_tools",
    "scrubbed_environment",
]

BUILTIN_TOOL_NAMES = frozenset({"bash", "read", "write", "edit", "glob", "grep"})
DEFAULT_TOOL_TIMEOUT = 300.0
"""Seconds per call: above the SDK bash tool's own 295 s limit, so bash reports its own
timeout first, and below the SDK runner's 325 s, so ours (the clearer message) wins."""
BASH_KILL_GRACE = 10.0
"""Seconds past its own timeout before a bash call is cut from outside (it kills its shell
on its own timeout first, which takes a moment)."""
DEFAULT_MAX_OUTPUT = 100_000
"""Characters of one result's text; the SDK's largest own cap (grep, 100 KiB) fits."""
_SCRUBBED_PREFIXES = ("ANTHROPIC_", "MANAGEDLOOP_")


def scrubbed_environment(
    secrets: Collection[str], base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``base`` (default ``os.environ``) without credentials: no ``ANTHROPIC_*`` or
    ``MANAGEDLOOP_*`` variable, and no variable whose value contains one of ``secrets``."""
    source = os.environ if base is None else base
    held = [s for s in secrets if s]
    return {
        k: v
        for k, v in source.items()
        if not k.upper().startswith(_SCRUBBED_PREFIXES) and not any(s in v for s in held)
    }


class InFlight:
    """How many tool calls are running, and an event set whenever none is."""

    def __init__(self) -> None:
        self.count = 0
        self.idle = anyio.Event()
        self.idle.set()

    def enter(self) -> None:
        self.count += 1
        if self.count == 1:
            self.idle = anyio.Event()

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0:
            self.idle.set()


def _limited_class() -> Any:
    """The wrapper class (defined on first use: ``anthropic`` is imported lazily)."""
    from anthropic.lib.tools import BetaAsyncBuiltinFunctionTool, ToolError

    class LimitedTool(BetaAsyncBuiltinFunctionTool):
        """One SDK tool with a per-call timeout, an output cap and in-flight accounting."""

        def __init__(
            self, inner: Any, *, timeout: float, max_output: int, inflight: InFlight
        ) -> None:
            self._inner = inner
            self._timeout = timeout
            self._max_output = max_output
            self._inflight = inflight

        def to_dict(self) -> Any:
            return self._inner.to_dict()

        @property
        def name(self) -> str:
            return str(self._inner.name)

        async def call(self, input: object) -> Any:
            limit = self._timeout
            if self.name == "bash" and isinstance(input, dict):
                # bash times out by itself and then kills its shell and everything the
                # command started; a cancellation from outside would leave them running.
                asked = input.get("timeout_ms")
                ms = int(limit * 1000)
                if isinstance(asked, int) and not isinstance(asked, bool) and 0 < asked < ms:
                    ms = asked
                input = {**input, "timeout_ms": max(1, ms)}
                limit += BASH_KILL_GRACE  # the backstop, should its own timeout not fire
            self._inflight.enter()
            try:
                with anyio.move_on_after(limit) as scope:
                    result = await self._inner.call(input)
                if scope.cancelled_caught:
                    raise ToolError(f"{self.name}: timed out after {self._timeout:g} s")
            finally:
                self._inflight.leave()
            return _capped(result, self._max_output)

        async def aclose(self) -> None:
            # The SDK's tools are context managers entered lazily (bash keeps a shell):
            # the runner's cleanup reaches them through this wrapper.
            from anthropic.lib.tools._beta_functions import aclose_runnable_tool

            await aclose_runnable_tool(self._inner)

    return LimitedTool


def _capped(result: Any, limit: int) -> Any:
    if isinstance(result, str) and len(result) > limit:
        return result[:limit] + f"\n[output cut at {limit} characters]"
    return result


def builtin_tools(
    ctx: AgentToolContext,
    *,
    timeout: float,
    max_output: int,
    inflight: InFlight,
    env: Mapping[str, str],
) -> Sequence[BetaAsyncBuiltinFunctionTool]:
    """The SDK's ``agent_toolset_20260401`` bound to ``ctx``, each with our limits; the
    bash subprocess gets ``env`` (see :func:`scrubbed_environment`)."""
    from anthropic.lib.tools.agent_toolset import beta_agent_toolset_20260401

    # The SDK's bash starts its shell from ``ctx.env`` at the first call, after this factory
    # ran; an explicit mapping replaces the SDK's default (which strips only ANTHROPIC_*).
    ctx.env = dict(env)
    limited = _limited_class()
    return [
        limited(tool, timeout=timeout, max_output=max_output, inflight=inflight)
        for tool in beta_agent_toolset_20260401(ctx)
    ]
