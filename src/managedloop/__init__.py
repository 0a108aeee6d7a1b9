"""managedloop: one agent session loop over any loop host.

>>> import managedloop as ml
>>> from managedloop.providers import Local

The curated public API. Provider SDKs (``anthropic``, ``botocore``) are not imported here;
each provider loads its SDK on first use. For ``import managedloop`` to stay cheap (issue 9:
<= 100 ms, ``bench/imports.py``) three more things load on first use: pydantic (with the
first ``@tool``), the session loop (the first ``run``, ``run_sync``, ``start``,
``LiveSession`` or ``GuardInput``) and the provisioning lifecycle (the first
``ensure_agent``, ``provision``, a handle...). ``tests/test_public_api.py`` pins which
modules the import leaves unloaded.
"""

from typing import TYPE_CHECKING

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
    ModelRetry,
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
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec, Runtime
from managedloop.results import (
    ApprovalRequest,
    Approve,
    Artifact,
    CommandResult,
    Deny,
    OutputFailure,
    Pending,
    SessionInfo,
    SessionResult,
    Terminal,
    ToolResult,
    ToolUse,
    TurnResult,
    Usage,
)
from managedloop.tools import Tool, ToolDefinition, Toolset, tool

if TYPE_CHECKING:  # what type checkers see; at run time these load on first use (below)
    from managedloop._loops import syncify
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
        untag,
    )
    from managedloop.provisioning.runtimes import Bootstrap
    from managedloop.session import GuardInput, LiveSession, run, run_sync, start
    from managedloop.session.output import output_tool
    from managedloop.session.record import SessionRecord

    provision_sync = syncify(provision)
    teardown_sync = syncify(teardown)
    ensure_agent_sync = syncify(ensure_agent)
    ensure_environment_sync = syncify(ensure_environment)
    tag_sync = syncify(tag)
    untag_sync = syncify(untag)
    resolve_sync = syncify(resolve)
    prune_agents_sync = syncify(prune_agents)
    prune_environments_sync = syncify(prune_environments)
else:
    # The session loop and the lifecycle (ensure/tag/resolve/prune, provision/teardown,
    # the handles) load on first use, as in PEP 562. A program that runs a session pays
    # for the loop then (~10 ms: the driver, the machine, the host contract); one that only
    # defines tools, builds specs or provisions never does; most never provision. Defined
    # only at run time so that type checkers see the precise names above, not a catch-all
    # `__getattr__`; tests/test_lazy.py checks both name the same things.
    from managedloop import _lazy

    _LAZY = {
        "managedloop.session": ("GuardInput", "LiveSession", "run", "run_sync", "start"),
        "managedloop.session.record": ("SessionRecord",),
        "managedloop.session.output": ("output_tool",),
        "managedloop.provisioning.handles": ("AgentHandle", "EnvironmentHandle", "HarnessHandle"),
        "managedloop.provisioning.runtimes": ("Bootstrap",),
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
        "managedloop.provisioning.facade": ("provision", "teardown"),
    }

    def _blocking(name: str) -> object:
        """``{verb}_sync``: the async verb's blocking face, `syncify` of it."""
        import sys

        from managedloop._loops import syncify

        return syncify(getattr(sys.modules[__name__], name.removesuffix("_sync")))

    _SYNC = dict.fromkeys(
        (
            "provision_sync",
            "teardown_sync",
            "ensure_agent_sync",
            "ensure_environment_sync",
            "tag_sync",
            "untag_sync",
            "resolve_sync",
            "prune_agents_sync",
            "prune_environments_sync",
        ),
        _blocking,
    )
    __getattr__, __dir__ = _lazy.on_first_use(globals(), _LAZY, _SYNC)


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
    "ModelRetry",
    "Outcome",
    "OutputFailure",
    "Pending",
    "ProviderError",
    "ProvisioningError",
    "PruneReport",
    "Runtime",
    "Secret",
    "SessionInfo",
    "SessionRecord",
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
    "output_tool",
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
    "untag",
    "untag_sync",
]
