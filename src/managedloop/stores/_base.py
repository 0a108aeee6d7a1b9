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

**The atomic update** (``update(key, fn)``) is how every read-modify-write in the library
is done (tags, the webhook ledger): ``get`` then ``put`` loses the other writer's change
when two processes interleave, ``update`` never does. Its contract, which a third-party
store must keep too:

* ``fn(current)`` gets the value of ``key`` (a fresh copy, ``None`` when absent) and
  returns the new value, or ``None`` to delete the key (or leave it absent); ``update``
  returns what is now stored (a fresh copy, ``None`` when absent);
* no other write to ``key`` lands between the read ``fn`` saw and the write of its result,
  in this process or any other sharing the store (a lock, a file lock held across the read
  and the write, a ``BEGIN IMMEDIATE`` transaction, or Redis ``WATCH``/``MULTI``);
* ``fn`` runs under the store's own lock or transaction and **may be called more than
  once** (Redis retries it when another client wrote the key in between), so it must be
  pure: no I/O, no side effects, no calls on the store (which would deadlock on most
  backends), and quick (other writers wait for it);
* an exception from ``fn`` aborts the update and propagates unchanged (the same object):
  nothing is written; a result that is not a JSON object is ``not_json``, nothing written;
* a result equal to the current value need not be written again.

:func:`managedloop.testing.stores.check_store` runs this whole contract against any store
(the suite runs it against the four backends): a store written to the protocol can run it
in its own tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast, runtime_checkable

from managedloop.errors import InvalidOptionsError, StoreError

__all__ = [
    "MAX_KEY_LENGTH",
    "Store",
    "UpdateAborted",
    "Updater",
    "call_updater",
    "check_key",
    "check_updater",
    "decode_value",
    "encode_value",
]

MAX_KEY_LENGTH = 1024
"""Long enough for ``<kind>:<host>:<account>:<base>:<digest>``; short enough for any index."""

Updater = Callable[[dict[str, Any] | None], dict[str, Any] | None]
"""What :meth:`Store.update` applies: the current value (``None``: absent) to the new one
(``None``: delete)."""


@runtime_checkable
class Store(Protocol):
    """A durable map from string keys to JSON objects (see the module docstring)."""

    def get(self, key: str) -> dict[str, Any] | None:
        """The value stored under ``key``, or ``None``."""
        ...

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        """Store ``value`` under ``key``, replacing any previous value atomically."""
        ...

    def update(self, key: str, fn: Updater) -> dict[str, Any] | None:
        """Atomically replace the value of ``key`` with ``fn(current)`` (current is ``None``
        when absent; ``fn`` returning ``None`` deletes the key / leaves it absent) and return
        the new value. ``fn`` runs under the store's own lock/transaction; it may be called
        more than once (Redis retries on conflict), so it must be pure. An exception from
        ``fn`` aborts the update and propagates unchanged; nothing is written."""
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


def check_updater(fn: object) -> Updater:
    """``fn`` if it can be an update function (checked before any I/O)."""
    if not callable(fn):
        raise InvalidOptionsError(
            f"update needs a function of the current value, got {fn!r}", option="fn"
        )
    return cast(Updater, fn)  # callable() cannot narrow to the signature


class UpdateAborted(Exception):  # noqa: N818 - a carrier, not an error of its own
    """Carries what an update function raised through a backend's own error mapping (a
    backend turns ``OSError`` or ``sqlite3.Error`` into ``StoreError``; an ``fn`` that raised
    one must still see it unchanged): ``call_updater`` wraps it, ``update`` unwraps it."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error


def call_updater(fn: Updater, current: dict[str, Any] | None) -> str | None:
    """The JSON text of ``fn(current)`` (``None``: delete); what ``fn`` raises comes out as
    :class:`UpdateAborted`, a result that is not plain JSON as ``not_json``."""
    try:
        new = fn(current)
    except BaseException as exc:
        raise UpdateAborted(exc) from None
    return None if new is None else encode_value(new)
