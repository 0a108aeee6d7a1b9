"""Provisioning: specs and digests, host-side names, handles, the lifecycle verbs
(ensure, tag, resolve, prune) and provision/teardown."""

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
