"""Session artifacts: files an agent writes, name-keyed and session-scoped.

:class:`Artifacts` is one vocabulary (``list``, ``fetch``, ``put``, ``delete``) over a
provider-native :class:`ArtifactStore`: the Claude Files API, or an AgentCore
session-storage mount reached through shell commands. Names are checked here, once, before
any store sees them: a name that could escape its scope (``..``, an absolute path, a NUL or
other control character, a backslash) is refused with ``ArtifactError(code="invalid_name")``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from managedloop.errors import ArtifactError
from managedloop.results import Artifact

__all__ = ["ArtifactStore", "Artifacts", "validate_name"]

_MAX_NAME = 255


def validate_name(name: str) -> str:
    """Return ``name`` if it is a safe relative artifact name, else raise ``invalid_name``."""
    problem: str | None = None
    if not isinstance(name, str) or not name:  # callers may pass anything at runtime
        problem = "must be a non-empty string"
    elif len(name.encode()) > _MAX_NAME:
        problem = f"is longer than {_MAX_NAME} bytes"
    elif any(ord(c) < 32 or ord(c) == 127 for c in name):
        problem = "contains a NUL or control character"
    elif name.startswith(("/", "~")) or "\\" in name or (len(name) > 1 and name[1] == ":"):
        problem = "must be relative (no leading '/', '~', drive letter or backslash)"
    elif any(part in ("", ".", "..") for part in name.split("/")):
        problem = "must not contain '.', '..' or empty path segments"
    if problem is not None:
        raise ArtifactError(f"artifact name {name!r} {problem}", code="invalid_name", name=name)
    return name


@runtime_checkable
class ArtifactStore(Protocol):
    """A provider-native store; names reaching it are already validated."""

    async def list(self) -> list[Artifact]: ...

    async def fetch(self, name: str) -> bytes: ...

    async def put(self, name: str, data: bytes) -> Artifact: ...

    async def delete(self, name: str) -> None: ...


class Artifacts:
    """Name-keyed, session-scoped artifact verbs over a store.

    ``Artifacts.for_session(provider, session_id)`` builds the store a host offers.
    """

    __slots__ = ("store",)

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store

    @classmethod
    def for_session(cls, provider: Any, session_id: str, **options: Any) -> Artifacts:
        factory = getattr(provider, "artifact_store", None)
        if factory is None:
            raise ArtifactError(
                f"the {getattr(provider, 'name', provider)!r} host has no artifact store",
                code="not_supported",
            )
        return cls(factory(session_id, **options))

    async def list(self) -> list[Artifact]:
        return await self.store.list()

    async def fetch(self, name: str) -> bytes:
        return await self.store.fetch(validate_name(name))

    async def put(self, name: str, data: bytes | str) -> Artifact:
        payload = data.encode() if isinstance(data, str) else data
        return await self.store.put(validate_name(name), payload)

    async def delete(self, name: str) -> None:
        await self.store.delete(validate_name(name))
