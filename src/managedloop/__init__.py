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
    ToolDefinitionError,
    ToolError,
    TransportError,
    UnsupportedError,
)
from managedloop.handler import Handler
from managedloop.outcome import Outcome
from managedloop.provisioning.facade import provision, teardown
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec
from managedloop.results import (
    Artifact,
    CommandResult,
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

__version__ = "0.1.0.dev0"

__all__ = [
    "APIStatusError",
    "AgentSpec",
    "Artifact",
    "ArtifactError",
    "ArtifactStore",
    "Artifacts",
    "AuthenticationError",
    "CommandResult",
    "ConfigError",
    "EnvironmentSpec",
    "GuardInput",
    "Handler",
    "HostStreamError",
    "InvalidOptionsError",
    "LiveSession",
    "MalformedResponseError",
    "ManagedLoopError",
    "McpError",
    "Outcome",
    "ProviderError",
    "ProvisioningError",
    "Secret",
    "SessionInfo",
    "SessionResult",
    "SessionTimeoutError",
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
    "__version__",
    "configure",
    "provision",
    "provision_sync",
    "run",
    "run_sync",
    "start",
    "teardown",
    "teardown_sync",
    "tool",
]
