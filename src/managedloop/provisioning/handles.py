"""The typed handles the lifecycle verbs return: JSON round-trippable identity only.

* :class:`AgentHandle` — a Claude agent (``agent_id``, ``name``, ``digest``);
* :class:`EnvironmentHandle` — a Claude environment (``environment_id``, ``name``,
  ``digest``) plus ``bootstrap``, which is recomputed from the spec and never serialised;
* :class:`HarnessHandle` — an AgentCore harness (``harness_arn``, ``harness_id``, ``name``,
  ``digest``), and ``harness_version`` for a version of one harness named for its base
  (``ensure_agent(..., update=True)``).

``digest`` is the spec's full 64-hex digest; ``name`` ends in its first 8 (a versioned
harness: ``name`` is the base alone and ``harness_version`` says which version is the
spec). Each passes straight into ``ml.run(provider, agent=handle)`` (and an environment
handle into ``ClaudeManagedAgents(environment=handle)``): the hosts read ``agent_id`` /
``environment_id`` / ``harness_arn`` off it.

``from_dict`` is strict (exactly the identity keys, each a non-empty string, the digest
64 lowercase hex; an optional key such as ``harness_version`` may be absent, and
``to_dict`` leaves it out when unset, so entries stored before it existed still read): a
store entry of any other shape is not a handle, and the verbs treat it as a miss rather
than trusting it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self

from managedloop.errors import InvalidOptionsError
from managedloop.provisioning.runtimes import Bootstrap

__all__ = ["AgentHandle", "EnvironmentHandle", "Handle", "HarnessHandle", "handle_from_dict"]

_DIGEST = re.compile(r"[0-9a-f]{64}")


class _Identity:
    kind: ClassVar[str]
    id_field: ClassVar[str]
    optional: ClassVar[frozenset[str]] = frozenset()
    """Identity fields that may be ``None`` (left out of ``to_dict`` then)."""
    name: str
    digest: str

    def _check(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            if f.name == "bootstrap":
                continue
            value = getattr(self, f.name)
            if value is None and f.name in self.optional:
                continue
            if not isinstance(value, str) or not value:
                raise InvalidOptionsError(
                    f"{type(self).__name__}.{f.name} must be a non-empty string",
                    code="invalid_handle",
                    option=f.name,
                )
        if _DIGEST.fullmatch(self.digest) is None:
            raise InvalidOptionsError(
                f"{type(self).__name__}.digest must be 64 lowercase hex characters",
                code="invalid_handle",
                option="digest",
            )

    @property
    def digest8(self) -> str:
        return self.digest[:8]

    @property
    def id(self) -> str:
        """The host-side id (``agent_id`` / ``environment_id`` / ``harness_arn``)."""
        return str(getattr(self, self.id_field))

    def to_dict(self) -> dict[str, Any]:
        """Exactly the identity fields (``bootstrap`` is never serialised, an unset
        optional field is left out)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)  # type: ignore[arg-type]
            if f.name != "bootstrap"
            and not (f.name in self.optional and getattr(self, f.name) is None)
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        names = [f.name for f in fields(cls) if f.name != "bootstrap"]  # type: ignore[arg-type]
        required = set(names) - cls.optional
        if not isinstance(data, Mapping) or not required <= set(data) <= set(names):
            got = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise InvalidOptionsError(
                f"a {cls.__name__} has the keys {names} ({sorted(cls.optional)} optional), "
                f"got {got}",
                code="invalid_handle",
            )
        return cls(**{n: data[n] for n in names if n in data})


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentHandle(_Identity):
    """A content-addressed Claude agent."""

    kind: ClassVar[str] = "agent"
    id_field: ClassVar[str] = "agent_id"
    agent_id: str
    name: str
    digest: str

    def __post_init__(self) -> None:
        self._check()


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvironmentHandle(_Identity):
    """A content-addressed Claude environment; ``bootstrap`` is set when the spec declares
    runtimes (see :mod:`managedloop.provisioning.runtimes`). Equality ignores it."""

    kind: ClassVar[str] = "environment"
    id_field: ClassVar[str] = "environment_id"
    environment_id: str
    name: str
    digest: str
    bootstrap: Bootstrap | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self._check()


@dataclass(frozen=True, kw_only=True, slots=True)
class HarnessHandle(_Identity):
    """A content-addressed AgentCore harness (it folds model, tools and environment).

    ``harness_version`` is set for a version of a harness named for its base
    (``ensure_agent(..., update=True)``): the version whose configuration is the spec.
    InvokeHarness has no version parameter, so a run reaches that version through an
    endpoint pinned to it (``DEFAULT`` serves the latest); see docs/agentcore.md."""

    kind: ClassVar[str] = "harness"
    id_field: ClassVar[str] = "harness_arn"
    optional: ClassVar[frozenset[str]] = frozenset({"harness_version"})
    harness_arn: str
    harness_id: str
    name: str
    digest: str
    harness_version: str | None = None

    def __post_init__(self) -> None:
        self._check()


Handle = AgentHandle | EnvironmentHandle | HarnessHandle
KINDS: dict[str, type[AgentHandle] | type[EnvironmentHandle] | type[HarnessHandle]] = {
    "agent": AgentHandle,
    "environment": EnvironmentHandle,
    "harness": HarnessHandle,
}


def handle_from_dict(kind: str, data: Mapping[str, Any]) -> Handle:
    """The handle of ``kind`` (``agent`` / ``environment`` / ``harness``) from its dict."""
    return KINDS[kind].from_dict(data)
