"""Runtime session ids, endpoint names, harness ARNs and the provisioned-harness handle.

The values the service checks server-side are checked here first, with the same rules,
so a bad one is an ``InvalidOptionsError`` before any request rather than a 400 after a
round trip. Every pattern is applied with ``re.fullmatch`` (``_validate.matches``):
``re.match`` with ``$`` accepts a trailing newline, and ``qualifier=DEFAULT%0A`` then
reached the wire.

Pure values and checks, no I/O and no import of the rest of the package, so that the
provider, the connection, provisioning and the commands can all share them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from managedloop import _validate
from managedloop.errors import InvalidOptionsError

__all__ = [
    "AgentCoreHandle",
    "arn_of",
    "harness_id_of",
    "new_runtime_session_id",
    "validate_endpoint_name",
    "validate_runtime_session_id",
]

_SESSION_ID_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_-]*")
_PREFIX_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_-]{0,59}")
_ENDPOINT_RE = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,47}")
# The harness id is what the control plane takes in a path: no '/', no whitespace/controls.
_HARNESS_ARN_RE = re.compile(r"arn:aws[a-z-]*:bedrock-agentcore:[a-z0-9-]*:\d*:harness/([^/\s]+)")


def validate_runtime_session_id(value: Any, *, option: str = "runtime_session_id") -> str:
    """Return ``value`` if the service would accept it as a runtime session id.

    33-100 characters matching ``[a-zA-Z0-9][a-zA-Z0-9-_]*``; else
    ``InvalidOptionsError(code="invalid_session_id")``. (botocore only checks the minimum
    length locally; the rest would be a server-side 400 after a round trip.)
    """
    if (
        not isinstance(value, str)
        or not 33 <= len(value) <= 100
        or _SESSION_ID_RE.fullmatch(value) is None
    ):
        shown = value if isinstance(value, str) and len(value) <= 120 else type(value).__name__
        raise InvalidOptionsError(
            f"{option} must be 33-100 characters of [a-zA-Z0-9_-] starting with a letter or "
            f"digit, got {shown!r} (use new_runtime_session_id())",
            code="invalid_session_id",
            option=option,
        )
    return value


def new_runtime_session_id(prefix: str = "ml") -> str:
    """A fresh, valid runtime session id: ``<prefix>-<32 hex>`` (prefix: up to 60 chars)."""
    _validate.matches(
        "prefix",
        prefix,
        _PREFIX_RE,
        "1-60 characters of [a-zA-Z0-9_-] starting with a letter or digit",
    )
    return validate_runtime_session_id(f"{prefix}-{uuid.uuid4().hex}")


def validate_endpoint_name(value: Any) -> str:
    return _validate.matches(
        "endpoint_name", value, _ENDPOINT_RE, "a name matching [a-zA-Z][a-zA-Z0-9_]{0,47}"
    )


def harness_id_of(arn: str) -> str:
    """The control plane's harness id (the text after ``harness/``) of a harness ARN."""
    match = _HARNESS_ARN_RE.fullmatch(arn) if isinstance(arn, str) else None
    if match is None:
        raise InvalidOptionsError(f"not a harness ARN: {arn!r}", option="harness_arn")
    return match.group(1)


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentCoreHandle:
    """What ``provision`` made: a harness. Pass it as ``agent=`` or its ARN to the provider.

    The endpoint is deliberately not part of it: it is a call-time routing choice
    (``endpoint_name=``), and one harness has many endpoints.
    """

    harness_arn: str
    harness_id: str
    harness_name: str | None = None
    harness_version: str | None = None
    """The version provisioning made or found (``provision(update=True)``), else ``None``."""

    def to_dict(self) -> dict[str, Any]:
        out = {
            "harness_arn": self.harness_arn,
            "harness_id": self.harness_id,
            "harness_name": self.harness_name,
        }
        if self.harness_version is not None:
            out["harness_version"] = self.harness_version
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentCoreHandle:
        return cls(
            harness_arn=data["harness_arn"],
            harness_id=data["harness_id"],
            harness_name=data.get("harness_name"),
            harness_version=data.get("harness_version"),
        )


def arn_of(agent: Any) -> str | None:
    """The harness ARN of ``agent`` (a handle, a mapping, an ARN, or anything with
    ``harness_arn``), or ``None``."""
    if isinstance(agent, AgentCoreHandle):
        return agent.harness_arn
    if isinstance(agent, Mapping) and isinstance(agent.get("harness_arn"), str):
        return str(agent["harness_arn"])
    if isinstance(agent, str) and agent.startswith("arn:"):
        return agent
    arn = getattr(agent, "harness_arn", None)
    return arn if isinstance(arn, str) else None
