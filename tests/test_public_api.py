"""The public surface is deliberate: this golden list changes only on purpose."""

from __future__ import annotations

import subprocess
import sys

import pytest

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
    "untag",  # issue 25: the atomic inverse of tag
    "untag_sync",  # issue 25
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
    "ModelRetry",  # issue 24 typed results
    "Outcome",
    "OutputFailure",  # issue 24 typed results
    "Pending",
    "ProviderError",
    "ProvisioningError",
    "Secret",
    "SessionInfo",
    "SessionRecord",  # issue 28 session record
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
    "output_tool",  # issue 24 typed results
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
    "ToolInputDelta",
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


NOT_ON_IMPORT = (
    # provider SDKs: each provider loads its own on first use
    "anthropic",
    "botocore",
    "boto3",
    "httpx",
    "aiohttp",
    "opentelemetry",
    # pydantic: the first @tool loads it (schemas, validation)
    "pydantic",
    "pydantic_core",
    # the session loop and the host contract: the first run/start
    "managedloop.session",
    "managedloop.session.driver",
    "managedloop.session.live",
    "managedloop.hosts",
    # the provisioning lifecycle and the stores it keeps handles in: first use
    "managedloop.provisioning.lifecycle",
    "managedloop.provisioning.facade",
    "managedloop.provisioning.handles",
    "managedloop.provisioning.names",
    "managedloop.provisioning.runtimes",
    "managedloop.stores",
    "sqlite3",
    "filelock",
    # OpenSSL's hashes (the first spec digest) and anyio's streams (the first session)
    "hashlib",
    "anyio.streams.memory",
)
"""Modules ``import managedloop`` (and the test kit, and the providers package) must not
load: each costs import time (issue 9: ``import managedloop`` <= 100 ms,
``bench/imports.py``) that a program which never uses it should not pay."""


def test_import_does_not_load_provider_sdks_or_what_loads_on_first_use() -> None:
    code = (
        "import sys, managedloop, managedloop.testing, managedloop.providers;"
        f"bad = [m for m in {NOT_ON_IMPORT!r} if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


SESSION = {
    "GuardInput": "managedloop.session.machine",
    "LiveSession": "managedloop.session.live",
    "run": "managedloop.session.driver",
    "run_sync": "managedloop.session.driver",
    "start": "managedloop.session.live",
    "output_tool": "managedloop.session.output",
}
LIFECYCLE = {
    "AgentHandle": "managedloop.provisioning.handles",
    "EnvironmentHandle": "managedloop.provisioning.handles",
    "HarnessHandle": "managedloop.provisioning.handles",
    "Bootstrap": "managedloop.provisioning.runtimes",
    "PruneReport": "managedloop.provisioning.lifecycle",
    "ensure_agent": "managedloop.provisioning.lifecycle",
    "ensure_environment": "managedloop.provisioning.lifecycle",
    "prune_agents": "managedloop.provisioning.lifecycle",
    "prune_environments": "managedloop.provisioning.lifecycle",
    "resolve": "managedloop.provisioning.lifecycle",
    "tag": "managedloop.provisioning.lifecycle",
    "untag": "managedloop.provisioning.lifecycle",
    "provision": "managedloop.provisioning.facade",
    "teardown": "managedloop.provisioning.facade",
}
"""The package root's names that load on first use, and the modules defining them."""


def test_names_that_load_on_first_use_are_the_defining_modules_objects() -> None:
    import importlib

    import managedloop.provisioning as provisioning

    for name, where in {**SESSION, **LIFECYCLE}.items():
        defined = getattr(importlib.import_module(where), name)
        assert getattr(ml, name) is defined, name
        assert name in dir(ml), name
    for name in LIFECYCLE:
        assert getattr(provisioning, name) is getattr(ml, name), name
        if not isinstance(getattr(ml, name), type):  # each verb's blocking twin
            twin = getattr(ml, f"{name}_sync")
            assert twin.__name__ == f"{name}_sync"
            assert twin.__wrapped__ is getattr(ml, name)  # syncify's functools.wraps
            assert getattr(ml, f"{name}_sync") is twin  # made once
    assert ml.run_sync.__wrapped__ is ml.run
    assert provisioning.AgentSpec is ml.AgentSpec
    assert provisioning.clear_cache is importlib.import_module(LIFECYCLE["provision"]).clear_cache
    assert set(provisioning.__all__) <= set(dir(provisioning))
    assert set(ml.__all__) <= set(dir(ml))
    for module, missing in ((ml, "PruneReport_sync"), (ml, "nope"), (provisioning, "nope")):
        with pytest.raises(AttributeError, match=missing):
            getattr(module, missing)


def test_from_imports_of_names_that_load_on_first_use() -> None:
    code = (
        "from managedloop import ensure_agent_sync, HarnessHandle, provision, run_sync;"
        "from managedloop.provisioning import lifecycle, tag;"
        "from managedloop import *;"
        "assert tag is lifecycle.tag and ensure_agent_sync.__wrapped__ is lifecycle.ensure_agent;"
        "from managedloop.session.driver import run_sync as defined; assert run_sync is defined;"
        "print(sorted(n for n in __import__('managedloop').__all__ if n not in globals()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"  # `import *` binds every name of __all__
