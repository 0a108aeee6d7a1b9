"""Provisioning: agent and environment specs, content digests, provision/teardown."""

from managedloop.provisioning.facade import clear_cache, provision, teardown
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec

__all__ = ["AgentSpec", "EnvironmentSpec", "clear_cache", "provision", "teardown"]
