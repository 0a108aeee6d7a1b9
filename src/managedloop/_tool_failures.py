"""The tool-call failures the library names itself: an unknown tool, a timeout bound.

They are raised where they happen (a :class:`~managedloop.Toolset` asked for a tool it does
not have, or whose tool overran its own ``timeout``; the call runner's ``tool_timeout``)
and answered by :func:`managedloop.handler.run_tool_calls` as error results carrying their
message. They never reach the caller, so they are outside the public exception tree; this
module is below both ``tools`` and ``handler`` so that each imports them by their own name.
"""

from __future__ import annotations

__all__ = ["ToolTimeoutError", "UnknownToolError"]


class UnknownToolError(Exception):
    """A toolset was asked for a tool it does not have (becomes an error result)."""


class ToolTimeoutError(TimeoutError):
    """A timeout bound fired for one call; carries the bound so the result can name it."""

    def __init__(self, tool: str, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"tool {tool!r} timed out after {seconds:g}s")
