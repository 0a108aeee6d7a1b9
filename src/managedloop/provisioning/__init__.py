"""Provisioning: specs and digests, host-side names, handles, the lifecycle verbs
(ensure, tag, untag, resolve, prune) and provision/teardown.

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
        untag,
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
    "untag",
]

if not TYPE_CHECKING:  # type checkers see the names above, not a catch-all __getattr__
    from managedloop import _lazy

    _LAZY = {
        "managedloop.provisioning.facade": ("clear_cache", "provision", "teardown"),
        "managedloop.provisioning.handles": ("AgentHandle", "EnvironmentHandle", "HarnessHandle"),
        "managedloop.provisioning.lifecycle": (
            "PruneReport",
            "ensure_agent",
            "ensure_environment",
            "prune_agents",
            "prune_environments",
            "resolve",
            "tag",
            "untag",
        ),
        "managedloop.provisioning.runtimes": ("Bootstrap",),
        "managedloop.provisioning.specs": ("AgentSpec", "EnvironmentSpec", "Runtime"),
    }
    __getattr__, __dir__ = _lazy.on_first_use(globals(), _LAZY)
