"""Session artifacts: files an agent writes, name-keyed and session-scoped.

:class:`Artifacts` is one vocabulary (``list``, ``fetch``, ``put``, ``delete``) over a
provider-native :class:`ArtifactStore`: the Claude Files API, or an AgentCore
session-storage mount reached through shell commands. Names are checked here, once, before
any store sees them (:func:`validate_name`), and refused with
``ArtifactError(code="invalid_name")`` when they could escape their scope or mislead:

* ``..``/``.``/empty segments, an absolute path, ``~``, a drive letter or a backslash;
* any Unicode control or format character (categories ``Cc``, ``Cf``, ``Cs``, ``Zl``,
  ``Zp``): NUL and newlines, but also ``\x85``, ``\u2028``/``\u2029`` (line breaks to
  every log viewer and to JavaScript), bidi overrides and isolates (``\u202a``-``\u202e``,
  ``\u2066``-``\u2069``: ``report\u202etxt.exe`` *displays* as ``reportexe.txt``),
  zero-width characters and lone surrogates (which cannot even be encoded to UTF-8);
* a segment that is only whitespace, or that starts or ends with whitespace: ``" a.txt"``
  and ``"a.txt "`` look the same as ``"a.txt"`` in every listing and log, tools and
  shells strip them (so a later ``fetch`` of what the user sees misses), and Windows
  cannot store a trailing space at all. Whitespace *inside* a segment is fine;
* a name longer (in UTF-8 bytes) than the store's limit: a store declares
  ``max_name_bytes`` (default :data:`MAX_NAME_BYTES`, the usual filesystem NAME_MAX), and
  :class:`Artifacts` applies it before any request.
"""

from __future__ import annotations

import unicodedata
from typing import Any, Protocol, runtime_checkable

from managedloop.errors import ArtifactError
from managedloop.results import Artifact

__all__ = ["MAX_NAME_BYTES", "ArtifactStore", "Artifacts", "validate_name"]

MAX_NAME_BYTES = 255  # the common filesystem NAME_MAX; a store may declare less
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _problem(name: Any, max_bytes: int) -> str | None:
    if not isinstance(name, str) or not name:  # callers may pass anything at runtime
        return "must be a non-empty string"
    if any(unicodedata.category(c) in _UNSAFE_CATEGORIES for c in name):
        # Checked before the length: a lone surrogate cannot be encoded to count bytes.
        return "contains a control or format character (line break, bidi override, ...)"
    if len(name.encode()) > max_bytes:
        return f"is longer than {max_bytes} bytes (this store's limit)"
    if name.startswith(("/", "~")) or "\\" in name or (len(name) > 1 and name[1] == ":"):
        return "must be relative (no leading '/', '~', drive letter or backslash)"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "must not contain '.', '..' or empty path segments"
    if any(part != part.strip() for part in parts):
        return "must not start or end (or a segment start or end) with whitespace"
    return None


def validate_name(name: str, *, max_bytes: int = MAX_NAME_BYTES) -> str:
    """Return ``name`` if it is a safe relative artifact name, else raise ``invalid_name``."""
    problem = _problem(name, max_bytes)
    if problem is not None:
        raise ArtifactError(f"artifact name {name!r} {problem}", code="invalid_name", name=name)
    return name


@runtime_checkable
class ArtifactStore(Protocol):
    """A provider-native store; names reaching it are already validated.

    A store may also declare ``max_name_bytes: int`` (its host's name limit);
    :class:`Artifacts` then refuses longer names before the store sees them.
    """

    async def list(self) -> list[Artifact]: ...

    async def fetch(self, name: str) -> bytes: ...

    async def put(self, name: str, data: bytes) -> Artifact: ...

    async def delete(self, name: str) -> None: ...


class Artifacts:
    """Name-keyed, session-scoped artifact verbs over a store.

    ``Artifacts.for_session(provider, session_id)`` builds the store a host offers.
    """

    __slots__ = ("_max_name_bytes", "store")

    def __init__(self, store: ArtifactStore) -> None:
        self.store = store
        limit = getattr(store, "max_name_bytes", MAX_NAME_BYTES)
        self._max_name_bytes = limit if isinstance(limit, int) else MAX_NAME_BYTES

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

    def _check(self, name: str) -> str:
        return validate_name(name, max_bytes=self._max_name_bytes)

    async def fetch(self, name: str) -> bytes:
        return await self.store.fetch(self._check(name))

    async def put(self, name: str, data: bytes | str) -> Artifact:
        name = self._check(name)
        payload = data.encode() if isinstance(data, str) else data
        return await self.store.put(name, payload)

    async def delete(self, name: str) -> None:
        await self.store.delete(self._check(name))
