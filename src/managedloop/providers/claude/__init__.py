"""Claude Managed Agents: the managed loop host on the official ``anthropic`` SDK.

>>> from managedloop.providers import ClaudeManagedAgents
>>> client = anthropic.AsyncAnthropic()
>>> provider = ClaudeManagedAgents(client=client, agent=handle, environment=handle)

Importing this package imports ``anthropic`` lazily (only when a client is built or a call
is made), so ``managedloop.providers.ClaudeManagedAgents`` is cheap to reach.
"""

from managedloop.providers.claude._artifacts import (
    OUTPUTS_DIR,
    ClaudeArtifactStore,
    output_path,
    outputs_dir,
)
from managedloop.providers.claude._permissions import agent_toolset, mcp_toolset
from managedloop.providers.claude._provider import ClaudeManagedAgents
from managedloop.providers.claude._provision import (
    DEFAULT_ENVIRONMENT_CONFIG,
    DEFAULT_MODEL,
    ClaudeHandle,
    normalize_model_id,
)
from managedloop.providers.claude._wire import interrupt_event, tool_confirmation

__all__ = [
    "DEFAULT_ENVIRONMENT_CONFIG",
    "DEFAULT_MODEL",
    "OUTPUTS_DIR",
    "ClaudeArtifactStore",
    "ClaudeHandle",
    "ClaudeManagedAgents",
    "agent_toolset",
    "interrupt_event",
    "mcp_toolset",
    "normalize_model_id",
    "output_path",
    "outputs_dir",
    "tool_confirmation",
]
