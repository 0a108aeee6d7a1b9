"""``module:attr`` references to tools: the one loader behind ``managedloop run --tools``
and a spec file's ``agent.tools``.

A reference names a tool, a plain function, or a list, tuple or
:class:`~managedloop.Toolset` of them. Modules are importable from the folders given (the
current directory, and for a spec file its own directory), as with ``python -m``: the
``managedloop`` console script's ``sys.path`` starts with its own bin folder instead, so
``mytools:TOOLS`` next to ``mytools.py`` would not be found otherwise.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

from managedloop.tools import Toolset

__all__ = ["ToolRefError", "load_tools"]


class ToolRefError(ValueError):
    """A reference that names no tool; the message starts with the reference. Callers say
    where it came from (``--tools``, ``agent.tools``)."""


def load_tools(refs: Sequence[str], *, folders: Sequence[str] = ()) -> list[Any]:
    """The tools ``refs`` name, in order (see the module docstring)."""
    if refs:
        for folder in folders:
            if folder not in sys.path:
                sys.path.insert(0, folder)
    tools: list[Any] = []
    for ref in refs:
        module_name, _, attr = ref.partition(":")
        if not module_name or not attr:
            raise ToolRefError(f"{ref!r} is not module:attr")
        try:
            value: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                value = getattr(value, part)
        except (ImportError, AttributeError) as exc:
            raise ToolRefError(f"{ref}: {exc}") from None
        if isinstance(value, Toolset | list | tuple):
            items = list(value)
            bad = [x for x in items if not _is_tool(x)]
            if bad:
                raise ToolRefError(f"{ref}: {bad[0]!r} in it is not a tool or a function")
            tools.extend(items)
        elif _is_tool(value):
            tools.append(value)  # a Tool or a plain function
        else:
            raise ToolRefError(
                f"{ref} is {type(value).__name__}: not a tool, a function, "
                "a Toolset or a list of them"
            )
    return tools


def _is_tool(value: Any) -> bool:
    return callable(value) and not isinstance(value, type)
