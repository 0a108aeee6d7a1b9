"""Provisioning: specs and digests, host-side names, handles, the lifecycle verbs
(ensure, tag, resolve, prune) and provision/teardown.

The submodules load on first use: ``managedloop.provisioning.specs`` (``AgentSpec``, which
every session uses) must not pull in the lifecycle, its handles and its stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from managedloop.provisioning.facade import clear_cache, provision, teardown
    from managedloop.provisioning.handles import AgentHandle, EnvironmentHandle, HarnessHandle
    from managedloop.provisioning.lifecycle import (
        PruneReport,
        ensure_agent,
        ensure_environment,
        prune_agents,
        prune_environments,
        resolve,
        tag,
    )
    from managedloop.provisioning.runtimes import Bootstrap
    from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec, Runtime

__all__ = [
    "AgentHandle",
    "AgentSpec",
    "Bootstrap",
    "EnvironmentHandle",
    "EnvironmentSpec",
    "HarnessHandle",
    "PruneReport",
    "Runtime",
    "clear_cache",
    "ensure_agent",
    "ensure_environment",
    "provision",
    "prune_agents",
    "prune_environments",
    "resolve",
    "tag",
    "teardown",
]

if not TYPE_CHECKING:  # type checkers see the names above, not a catch-all __getattr__
    _WHERE = {
        "AgentHandle": "handles",
        "EnvironmentHandle": "handles",
        "HarnessHandle": "handles",
        "AgentSpec": "specs",
        "EnvironmentSpec": "specs",
        "Runtime": "specs",
        "Bootstrap": "runtimes",
        "PruneReport": "lifecycle",
        "ensure_agent": "lifecycle",
        "ensure_environment": "lifecycle",
        "prune_agents": "lifecycle",
        "prune_environments": "lifecycle",
        "resolve": "lifecycle",
        "tag": "lifecycle",
        "clear_cache": "facade",
        "provision": "facade",
        "teardown": "facade",
    }

    def __getattr__(name: str) -> object:
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module 'managedloop.provisioning' has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"managedloop.provisioning.{where}"), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
