"""The ``Store`` protocol every backend implements, and the checks they share.

A store is a small durable map from string keys to JSON objects. It holds what must
outlive a process: provisioned handles (keyed by host, base name and digest), tags
(``base:tag`` → digest) and, for durable sessions, transcripts stored by reference. The
protocol is synchronous on purpose: every backend (a dict, a JSON file under a lock,
SQLite, Redis) is naturally blocking, and the async verbs that use a store call it
through ``anyio.to_thread`` so a waiting file lock never stalls the event loop.

Invariants every backend keeps (pinned by ``tests/stores/test_contract.py``, which runs
against each one):

* a key is a non-empty ``str`` of at most :data:`MAX_KEY_LENGTH` characters with no
  control characters and no lone surrogates (it must be UTF-8 text, as every persistent
  backend stores it); anything else is ``StoreError(code="invalid_key")`` before any I/O;
* a value is a JSON object (a ``dict`` with ``str`` keys); anything that does not survive a
  JSON round trip unchanged (a tuple, a float NaN, a non-str key, a set, text with a lone
  surrogate) is ``StoreError(code="not_json")`` — what ``get`` returns is exactly what
  ``put`` stored, never a shared reference to it;
* ``put`` replaces the whole value of its key atomically: a reader sees the old value or
  the new one, never a mix, also across processes for the persistent backends;
* ``delete`` of a missing key is not an error (it returns ``False``);
* ``scan(prefix)`` returns every key that starts with ``prefix`` with its value, in key
  order (code points, which is also UTF-8 byte order) — the index the provisioning verbs
  need (all versions of a base, all tags of a base). A prefix is text, never a pattern.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from managedloop.errors import StoreError

__all__ = ["MAX_KEY_LENGTH", "Store", "check_key", "decode_value", "encode_value"]

MAX_KEY_LENGTH = 1024
"""Long enough for ``<kind>:<host>:<account>:<base>:<digest>``; short enough for any index."""


@runtime_checkable
class Store(Protocol):
    """A durable map from string keys to JSON objects (see the module docstring)."""

    def get(self, key: str) -> dict[str, Any] | None:
        """The value stored under ``key``, or ``None``."""
        ...

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        """Store ``value`` under ``key``, replacing any previous value atomically."""
        ...

    def delete(self, key: str) -> bool:
        """Remove ``key``; ``True`` if it was there."""
        ...

    def scan(self, prefix: str) -> dict[str, dict[str, Any]]:
        """Every key starting with ``prefix`` (``""``: all), with its value."""
        ...

    def close(self) -> None:
        """Release files and connections; the store is not used afterwards."""
        ...


def check_key(key: object, *, prefix: bool = False) -> str:
    """``key`` if it is a valid key (or, with ``prefix``, a valid prefix, which may be empty)."""
    if not isinstance(key, str) or (not key and not prefix):
        raise StoreError(f"a store key must be a non-empty str, got {key!r}", code="invalid_key")
    if len(key) > MAX_KEY_LENGTH:
        raise StoreError(
            f"a store key is at most {MAX_KEY_LENGTH} characters, got {len(key)}",
            code="invalid_key",
        )
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in key):
        raise StoreError(f"a store key has a control character: {key!r}", code="invalid_key")
    if not _is_utf8(key):
        raise StoreError(f"a store key has a lone surrogate: {key!r}", code="invalid_key")
    return key


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_value(value: object) -> str:
    """The JSON text of ``value``, refusing anything that would not come back unchanged."""
    if not isinstance(value, Mapping):
        raise StoreError(
            f"a store value must be a JSON object, got {type(value).__name__}", code="not_json"
        )
    try:
        text = json.dumps(dict(value), ensure_ascii=False, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"a store value must be plain JSON: {exc}", code="not_json") from None
    if json.loads(text) != value:  # tuples, non-str keys, subclasses
        raise StoreError(
            "a store value must survive a JSON round trip unchanged (lists, not tuples; str keys)",
            code="not_json",
        )
    if not _is_utf8(text):  # a lone surrogate: no file, database or Redis stores it as text
        raise StoreError("a store value must be valid Unicode (a lone surrogate)", code="not_json")
    return text


def decode_value(text: str | bytes, *, where: str) -> dict[str, Any]:
    """A stored value back; a damaged one is ``store_corrupt``, naming ``where`` it was read."""
    try:
        value = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreError(
            f"{where}: stored value is not JSON: {exc}", code="store_corrupt"
        ) from None
    if not isinstance(value, dict):
        raise StoreError(f"{where}: stored value is not a JSON object", code="store_corrupt")
    return value
