"""Session artifacts over the Claude Files API (name-keyed, session-scoped).

* ``list`` returns the files scoped to the session (``scope_id=<session_id>``): what the
  agent wrote under :func:`outputs_dir` (``/mnt/session/outputs``). Only files written
  there become session artifacts; anything elsewhere in the sandbox is not listed.
* ``fetch`` / ``delete`` act on the newest file with that name (re-runs accumulate
  duplicates; ``list`` returns them all).
* ``put`` uploads the bytes and mounts them into the session at ``<mount_dir>/<name>``
  (default ``/data``). An uploaded file is an *input*: the API does not make it
  downloadable, so a ``put`` artifact is for the agent to read, not for ``fetch``.
* Names are validated by :func:`managedloop.artifacts.validate_name` before any request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from managedloop.artifacts import validate_name
from managedloop.errors import ArtifactError, ManagedLoopError
from managedloop.providers.claude._ids import ID_PATTERN
from managedloop.results import Artifact

if TYPE_CHECKING:
    from managedloop.providers.claude._provider import ClaudeManagedAgents

__all__ = ["OUTPUTS_DIR", "ClaudeArtifactStore", "output_path", "outputs_dir"]

OUTPUTS_DIR = "/mnt/session/outputs"


def outputs_dir() -> str:
    """Where an agent must write a deliverable for it to become a session artifact."""
    return OUTPUTS_DIR


def output_path(name: str) -> str:
    """``/mnt/session/outputs/<name>`` (interpolate it into the system prompt)."""
    return f"{OUTPUTS_DIR}/{validate_name(name)}"


class ClaudeArtifactStore:
    """An :class:`~managedloop.ArtifactStore` over one session's Files API scope."""

    max_name_bytes = 255  # the sandbox writes /mnt/session/outputs/<name>: NAME_MAX

    def __init__(
        self, provider: ClaudeManagedAgents, session_id: str, *, mount_dir: str = "/data"
    ) -> None:
        if not isinstance(session_id, str) or ID_PATTERN.fullmatch(session_id) is None:
            # The id reaches the Files API query and session URL paths (see _ids).
            raise ArtifactError(
                f"an artifact store needs a well-formed session id, got {session_id!r}",
                code="invalid_session_id",
            )
        self.provider = provider
        self.session_id = session_id
        self.mount_dir = mount_dir.rstrip("/") or "/data"

    def __repr__(self) -> str:
        return f"ClaudeArtifactStore(session_id={self.session_id!r})"

    async def _files(self) -> list[dict[str, Any]]:
        try:
            return await self.provider.list_files(self.session_id)
        except ManagedLoopError as exc:
            if exc.code == "unexpected_response":
                raise ArtifactError(
                    "the files list answer is not a list",
                    code="unexpected_response",
                    body=exc.context.get("body"),
                ) from exc
            raise

    async def list(self) -> list[Artifact]:
        return [
            Artifact(
                name=str(f.get("filename")),
                size=f.get("size_bytes") if isinstance(f.get("size_bytes"), int) else None,
                ref=f.get("id"),
                raw=f,
            )
            for f in await self._files()
        ]

    async def _newest(self, name: str) -> dict[str, Any]:
        matches = [f for f in await self._files() if f.get("filename") == name]
        if not matches:
            raise ArtifactError(
                f"no artifact named {name!r} in session {self.session_id}",
                code="not_found",
                name=name,
            )
        return max(matches, key=lambda f: str(f.get("created_at") or ""))

    async def fetch(self, name: str) -> bytes:
        newest = await self._newest(validate_name(name))
        return await self.provider.download_file(str(newest["id"]))

    async def put(self, name: str, data: bytes) -> Artifact:
        validate_name(name)
        meta = await self.provider.upload_file((name.rsplit("/", 1)[-1], data))
        mount = f"{self.mount_dir}/{name}"
        await self.provider.attach_file(self.session_id, str(meta["id"]), mount_path=mount)
        return Artifact(name=name, size=len(data), ref=str(meta["id"]), raw=meta)

    async def delete(self, name: str) -> None:
        newest = await self._newest(validate_name(name))
        await self.provider.delete_file(str(newest["id"]))
