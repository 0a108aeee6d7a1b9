"""Bedrock AgentCore harness host (extra ``managedloop[agentcore]``).

``import managedloop.providers.agentcore`` does not import botocore: the clients are built
on first use, and a missing extra raises ``ConfigError(code="missing_dependency")``.
"""

from managedloop.providers.agentcore._converse import (
    REASONS,
    HookDecision,
    hook_decisions,
    server_tool_results,
)
from managedloop.providers.agentcore._harness_config import (
    browser,
    code_interpreter,
    gateway,
    remote_mcp,
)
from managedloop.providers.agentcore._ids import (
    AgentCoreHandle,
    new_runtime_session_id,
    validate_runtime_session_id,
)
from managedloop.providers.agentcore._provider import BedrockAgentCore

__all__ = [
    "REASONS",
    "AgentCoreHandle",
    "BedrockAgentCore",
    "HookDecision",
    "browser",
    "code_interpreter",
    "gateway",
    "hook_decisions",
    "new_runtime_session_id",
    "remote_mcp",
    "server_tool_results",
    "validate_runtime_session_id",
]
