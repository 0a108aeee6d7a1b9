"""The public surface is deliberate: this golden list changes only on purpose."""

from __future__ import annotations

import subprocess
import sys

import managedloop as ml

PUBLIC = [
    "AgentHandle",  # issue 10 lifecycle
    "Bootstrap",  # issue 10 lifecycle
    "EnvironmentHandle",  # issue 10 lifecycle
    "HarnessHandle",  # issue 10 lifecycle
    "PruneReport",  # issue 10 lifecycle
    "Runtime",  # issue 10 lifecycle
    "ensure_agent",  # issue 10 lifecycle
    "ensure_agent_sync",  # issue 10 lifecycle
    "ensure_environment",  # issue 10 lifecycle
    "ensure_environment_sync",  # issue 10 lifecycle
    "prune_agents",  # issue 10 lifecycle
    "prune_agents_sync",  # issue 10 lifecycle
    "prune_environments",  # issue 10 lifecycle
    "prune_environments_sync",  # issue 10 lifecycle
    "resolve",  # issue 10 lifecycle
    "resolve_sync",  # issue 10 lifecycle
    "tag",  # issue 10 lifecycle
    "tag_sync",  # issue 10 lifecycle
    "APIStatusError",
    "AgentSpec",
    "ApprovalRequest",
    "Approve",
    "Artifact",
    "ArtifactError",
    "ArtifactStore",
    "Artifacts",
    "AuthenticationError",
    "CommandResult",
    "ConfigError",
    "Deny",
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
    "Pending",
    "ProviderError",
    "ProvisioningError",
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
    "provision",
    "provision_sync",
    "run",
    "run_sync",
    "start",
    "teardown",
    "teardown_sync",
    "tool",
]


def test_public_names_are_exactly_these() -> None:
    assert sorted(ml.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert hasattr(ml, name), name


HOSTS = [
    "RESTART",
    "Connection",
    "ConnectionBase",
    "DefineOutcome",
    "OpenRequest",
    "Provider",
    "RawEvent",
    "RawInput",
    "Terminal",
    "TextDelta",
    "ToolResult",
    "ToolResults",
    "ToolUse",
    "TurnInput",
    "TurnItem",
    "TurnRestart",
    "TurnResult",
    "Usage",
    "UserMessage",
]
"""The host contract (``managedloop.hosts``): what a fourth host implements and uses."""


def test_the_host_contract_names_are_exactly_these() -> None:
    import managedloop.hosts as hosts

    assert sorted(hosts.__all__) == sorted(HOSTS)
    for name in HOSTS:
        assert hasattr(hosts, name), name
    for shared in ("Terminal", "ToolResult", "ToolUse", "TurnResult", "Usage"):
        assert getattr(hosts, shared) is getattr(ml, shared), shared  # one vocabulary


def test_import_of_the_host_contract_does_not_load_provider_sdks() -> None:
    code = (
        "import sys, managedloop.hosts;"
        "bad = [m for m in ('anthropic', 'botocore', 'boto3', 'httpx', 'aiohttp')"
        " if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_error_derives_from_the_root_and_has_a_code() -> None:
    for name in PUBLIC:
        value = getattr(ml, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, ml.ManagedLoopError), name
            assert value().code, name


def test_import_does_not_load_provider_sdks() -> None:
    code = (
        "import sys, managedloop, managedloop.testing, managedloop.providers;"
        "bad = [m for m in ('anthropic', 'botocore', 'boto3', 'httpx', 'opentelemetry')"
        " if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
