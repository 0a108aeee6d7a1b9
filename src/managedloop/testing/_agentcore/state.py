"""What the emulated service holds: harnesses with their endpoints, and runtime sessions.

Statuses move with time (the emulator's clock): ``CREATING`` → ``READY`` (or the
configured outcome), ``DELETING`` → gone. The views are what GetHarness, ListHarnesses
and the endpoint calls answer, with every member botocore's output shapes require.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACCOUNT",
    "Account",
    "Endpoint",
    "Harness",
    "Session",
    "endpoint_view",
    "environment_view",
]

ACCOUNT = "123456789012"


@dataclass(slots=True)
class Endpoint:
    name: str
    created: float
    absent_for: float
    ready_after: float
    outcome: str
    fixed: str | None = None
    created_at: float = field(default_factory=time.time)  # epoch seconds, for the wire
    target_version: str | None = None
    """The version this endpoint serves; ``None``: the harness's latest (``DEFAULT``)."""
    description: str | None = None

    def status(self, now: float) -> str | None:
        if self.fixed is not None:
            return self.fixed
        age = now - self.created
        if age < self.absent_for:
            return None
        return self.outcome if age >= self.absent_for + self.ready_after else "CREATING"


@dataclass(slots=True)
class Harness:
    id: str
    name: str
    arn: str
    body: dict[str, Any]
    created: float
    ready_after: float
    outcome: str
    delete_after: float | None
    delete_outcome: str | None
    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    deleting_since: float | None = None
    fixed: str | None = None
    created_at: float = field(default_factory=time.time)  # epoch seconds, for the wire
    versions: list[dict[str, Any]] = field(default_factory=list)
    """Earlier versions' bodies (version ``i + 1`` at index ``i``); ``body`` is the latest."""
    updating_until: float | None = None
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def version(self) -> str:
        return str(len(self.versions) + 1)

    def body_of(self, version: str | None) -> dict[str, Any] | None:
        if version is None or version == self.version:
            return self.body
        n = int(version) if version.isdigit() else 0
        return self.versions[n - 1] if 1 <= n <= len(self.versions) else None

    def status(self, now: float) -> str | None:
        """``None`` once it is gone."""
        if self.deleting_since is not None:
            if self.delete_after is not None and now - self.deleting_since >= self.delete_after:
                return self.delete_outcome
            return "DELETING"
        if self.fixed is not None:
            return self.fixed
        if self.updating_until is not None and now < self.updating_until:
            return "UPDATING"
        return self.outcome if now - self.created >= self.ready_after else "CREATING"

    def view(self, now: float, version: str | None = None) -> dict[str, Any]:
        b = self.body_of(version) or self.body
        env = environment_view(self, b.get("environment"))
        return {
            "harnessId": self.id,
            "harnessName": self.name,
            "arn": self.arn,
            "status": self.status(now),
            "executionRoleArn": b.get("executionRoleArn", ""),
            "createdAt": self.created_at,
            "updatedAt": self.created_at,
            "model": b.get("model")
            or {"bedrockModelConfig": {"modelId": "us.anthropic.claude-sonnet-4-6"}},
            "systemPrompt": b.get("systemPrompt") or [{"text": "You are a helpful agent."}],
            "tools": b.get("tools") or [],
            "skills": b.get("skills") or [],
            "allowedTools": b.get("allowedTools") or ["*"],
            "truncation": b.get("truncation") or {"strategy": "sliding_window"},
            "environment": env,
            "harnessVersion": version or self.version,
            # Optional members the create request set are echoed back (botocore's Harness
            # output shape has both).
            **{
                k: b[k]
                for k in (
                    "environmentVariables",
                    "timeoutSeconds",
                    "maxIterations",
                    "maxTokens",
                    "hooks",
                    "memory",
                    "environmentArtifact",
                )
                if b.get(k)
            },
        }


@dataclass(slots=True)
class Session:
    pending: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    replay_key: str | None = None
    replay_frames: list[bytes] | None = None


def environment_view(harness: Harness, requested: Any) -> dict[str, Any]:
    """The harness's runtime environment as GetHarness shows it: the requested settings
    plus what the service fills in (the runtime it made; public network and lifecycle
    defaults), all required by botocore's ``HarnessAgentCoreRuntimeEnvironment``."""
    runtime = dict((requested or {}).get("agentCoreRuntimeEnvironment") or {})
    runtime_id = f"{harness.name}_runtime-{harness.id.rsplit('-', 1)[-1]}"
    region = harness.arn.split(":")[3]
    return {
        "agentCoreRuntimeEnvironment": {
            "agentRuntimeArn": f"arn:aws:bedrock-agentcore:{region}:{ACCOUNT}:runtime/{runtime_id}",
            "agentRuntimeName": f"{harness.name}_runtime",
            "agentRuntimeId": runtime_id,
            "lifecycleConfiguration": {"idleRuntimeSessionTimeout": 900, "maxLifetime": 28800},
            "networkConfiguration": {"networkMode": "PUBLIC"},
            **runtime,
        }
    }


def endpoint_view(harness: Harness, ep: Endpoint, now: float) -> dict[str, Any]:
    version = ep.target_version or harness.version
    view = {
        "harnessId": harness.id,
        "harnessName": harness.name,
        "endpointName": ep.name,
        "arn": f"{harness.arn}/harness-endpoint/{ep.name}",
        "status": ep.status(now),
        "createdAt": ep.created_at,
        "updatedAt": ep.created_at,
        "liveVersion": version,
        "targetVersion": version,
    }
    if ep.description:
        view["description"] = ep.description
    return view


class Account:
    """The emulated account's harnesses and runtime sessions.

    ``lock`` is the emulator's own (one lock guards everything it shares between the
    server thread and the caller's).
    """

    def __init__(self, *, region: str, lock: threading.Lock) -> None:
        self.region = region
        self.lock = lock
        self.harnesses: dict[str, Harness] = {}
        self.sessions: dict[str, Session] = {}

    def new_harness_id(self, name: str) -> str:
        return f"{name}-{secrets.token_hex(5)}"

    def harness_arn(self, harness_id: str) -> str:
        return f"arn:aws:bedrock-agentcore:{self.region}:{ACCOUNT}:harness/{harness_id}"
