"""managedloop: one agent session loop over any loop host.

>>> import managedloop as ml
>>> from managedloop.providers import Local

The curated public API. Provider SDKs (``anthropic``, ``botocore``) are not imported here;
each provider loads its SDK on first use.
"""

from managedloop._loops import syncify
from managedloop.artifacts import Artifacts, ArtifactStore
from managedloop.config import Secret, configure
from managedloop.errors import (
    APIStatusError,
    ArtifactError,
    AuthenticationError,
    ConfigError,
    HostStreamError,
    InvalidOptionsError,
    MalformedResponseError,
    ManagedLoopError,
    McpError,
    ProviderError,
    ProvisioningError,
    SessionTimeoutError,
    StoreError,
    ToolDefinitionError,
    ToolError,
    TransportError,
    UnsupportedError,
    WebhookVerificationError,
)
from managedloop.handler import Handler
from managedloop.outcome import Outcome
from managedloop.provisioning.facade import provision, teardown
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
from managedloop.results import (
    ApprovalRequest,
    Approve,
    Artifact,
    CommandResult,
    Deny,
    Pending,
    SessionInfo,
    SessionResult,
    Terminal,
    ToolResult,
    ToolUse,
    TurnResult,
    Usage,
)
from managedloop.session import GuardInput, LiveSession, run, run_sync, start
from managedloop.tools import Tool, ToolDefinition, Toolset, tool

provision_sync = syncify(provision)
teardown_sync = syncify(teardown)
ensure_agent_sync = syncify(ensure_agent)
ensure_environment_sync = syncify(ensure_environment)
tag_sync = syncify(tag)
resolve_sync = syncify(resolve)
prune_agents_sync = syncify(prune_agents)
prune_environments_sync = syncify(prune_environments)

__version__ = "0.1.0.dev0"

__all__ = [
    "APIStatusError",
    "AgentHandle",
    "AgentSpec",
    "ApprovalRequest",
    "Approve",
    "Artifact",
    "ArtifactError",
    "ArtifactStore",
    "Artifacts",
    "AuthenticationError",
    "Bootstrap",
    "CommandResult",
    "ConfigError",
    "Deny",
    "EnvironmentHandle",
    "EnvironmentSpec",
    "GuardInput",
    "Handler",
    "HarnessHandle",
    "HostStreamError",
    "InvalidOptionsError",
    "LiveSession",
    "MalformedResponseError",
    "ManagedLoopError",
    "McpError",
    "Outcome",
    "Pending",
    "ProviderError",
    "ProvisioningError",
    "PruneReport",
    "Runtime",
    "Secret",
    "SessionInfo",
    "SessionResult",
    "SessionTimeoutError",
    "StoreError",
    "Terminal",
    "Tool",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolError",
    "ToolResult",
    "ToolUse",
    "Toolset",
    "TransportError",
    "TurnResult",
    "UnsupportedError",
    "Usage",
    "WebhookVerificationError",
    "__version__",
    "configure",
    "ensure_agent",
    "ensure_agent_sync",
    "ensure_environment",
    "ensure_environment_sync",
    "provision",
    "provision_sync",
    "prune_agents",
    "prune_agents_sync",
    "prune_environments",
    "prune_environments_sync",
    "resolve",
    "resolve_sync",
    "run",
    "run_sync",
    "start",
    "tag",
    "tag_sync",
    "teardown",
    "teardown_sync",
    "tool",
]
