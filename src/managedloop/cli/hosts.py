"""The hosts the ``managedloop`` command knows, and each one's command-line module."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["HOSTS", "host_module"]

HOSTS: tuple[str, ...] = ("local", "claude", "agentcore")


def host_module(host: str) -> ModuleType | str:
    """The host's command-line module (``managedloop.cli.<host>``), or why it cannot be used."""
    try:
        return importlib.import_module(f"managedloop.cli.{host}")
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        return f"skipped: {missing} is not available"
