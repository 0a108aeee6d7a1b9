"""Claude Managed Agents: the managed loop host on the official ``anthropic`` SDK.

>>> import anthropic
>>> from managedloop.providers import ClaudeManagedAgents
>>> client = anthropic.AsyncAnthropic(api_key="sk-ant-...")  # or from ANTHROPIC_API_KEY
>>> provider = ClaudeManagedAgents(client=client, agent="agent_011", environment="env_011")
>>> provider.agent_id
'agent_011'

``agent=`` and ``environment=`` take ids or the handle :func:`managedloop.provision` returns.

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
from managedloop.providers.claude._selfhosted import SandboxWorker, SelfHostedEnvironment
from managedloop.providers.claude._wire import interrupt_event, tool_confirmation

__all__ = [
    "DEFAULT_ENVIRONMENT_CONFIG",
    "DEFAULT_MODEL",
    "OUTPUTS_DIR",
    "ClaudeArtifactStore",
    "ClaudeHandle",
    "ClaudeManagedAgents",
    "SandboxWorker",
    "SelfHostedEnvironment",
    "agent_toolset",
    "interrupt_event",
    "mcp_toolset",
    "normalize_model_id",
    "output_path",
    "outputs_dir",
    "tool_confirmation",
]
