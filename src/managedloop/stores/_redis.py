"""``RedisStore``: one store for many machines (the ``redis`` package: ``managedloop[redis]``).

Guarantees, and what they rest on:

* **Many processes on many machines**, all talking to one Redis server (or its primary):
  Redis runs commands one at a time, and each ``put`` and ``delete`` is one
  ``MULTI … EXEC`` transaction (the value and the index entry together), so a reader
  never sees a value without its index entry or half a value. A client killed before
  ``EXEC`` (pinned by ``tests/stores/test_crash.py``) leaves nothing of its write: Redis
  discards a transaction whose connection closed. ``update`` is optimistic: it ``WATCH``-es
  the value, reads it, runs its function and sends the write as ``MULTI … EXEC``, which
  Redis refuses if any other client wrote the key since the ``WATCH``; it then reads and
  runs the function again (so the function may run more than once), up to
  :data:`MAX_CONFLICTS` times.
* **Durability is the server's**: a write that returned is in the server's memory; whether
  it survives a restart of the server is its persistence configuration (``appendonly yes``
  with ``appendfsync everysec`` loses at most a second; RDB snapshots alone lose what came
  after the last one). Configure the server for what the handles are worth.
* **Scans use a sorted-set index** (``<namespace>index``, every member at score 0, so
  ordered by bytes): a prefix becomes the range ``[prefix, successor(prefix))`` —
  ``ZRANGEBYLEX``, no ``KEYS``, no ``SCAN MATCH`` globbing (where ``*``, ``?`` and ``[`` in a
  prefix would be patterns) and no walk over the rest of the database. A key deleted
  between the index read and the value read is left out of that scan.
* Values live at ``<namespace>v:<key>``; ``namespace`` keeps several applications (or
  test runs) apart on one database. Redis Cluster is not supported (the two keys of a
  write must be in one slot).
* A password in the URL never appears in a ``repr``, an error message or its context
  (``managedloop._urls.redact_url``). A server that cannot be reached, or does not answer
  within ``socket_timeout``, is ``StoreError(code="store_unavailable")``; a value that is
  not this store's JSON is ``store_corrupt``, naming the key.

``redis`` is imported when a ``RedisStore`` is made, so ``import managedloop.stores`` never
needs it; without it, making one is ``ConfigError(code="missing_dependency")`` naming the
extra to install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

from managedloop import _validate
from managedloop._urls import redact_url
from managedloop.errors import ConfigError, InvalidOptionsError, StoreError
from managedloop.stores._base import (
    UpdateAborted,
    Updater,
    call_updater,
    check_key,
    check_updater,
    decode_value,
    encode_value,
)
from managedloop.stores._sqlite import prefix_successor

__all__ = ["RedisStore"]

_INSTALL_HINT = "RedisStore needs the redis package: pip install 'managedloop[redis]'"

SOCKET_TIMEOUT = 10.0
"""Seconds to connect or to wait for one answer: a store command answers in
milliseconds, so a silence this long is a server that is gone, reported rather than waited
on forever (redis-py's default)."""

MAX_CONFLICTS = 1000
"""Tries of one ``update`` before it gives up: each failed try means another client's write
to the same key landed (the store as a whole made progress), so a thousand in a row is a
key far hotter than anything this store is for, reported rather than retried forever."""

_MGET_BATCH = 500
"""Values fetched per ``MGET`` in a scan: bounded replies, few round trips."""


class RedisStore:
    """A Redis database (see the module docstring for the guarantees).

    ``url`` is a redis-py URL (``redis://[[user]:password@]host[:port][/db]``,
    ``rediss://`` for TLS, ``unix:///path.sock``); ``namespace`` prefixes every key this
    store writes; ``socket_timeout`` bounds connecting and each command.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "managedloop:",
        socket_timeout: float = SOCKET_TIMEOUT,
    ) -> None:
        try:
            import redis
        except ImportError as exc:
            raise ConfigError(
                _INSTALL_HINT, code="missing_dependency", package="redis", extra="redis"
            ) from exc
        _validate.text("url", url)
        _validate.text("namespace", namespace)
        try:
            check_key(namespace)
        except StoreError as exc:
            raise InvalidOptionsError(str(exc), option="namespace") from None
        timeout = _validate.duration("socket_timeout", socket_timeout, allow_none=False)
        self._url = redact_url(url)
        self._password = _password(url)
        self._namespace = namespace
        self._index = namespace + "index"
        self._errors: tuple[type[Exception], ...] = (redis.RedisError,)
        self._conflict: type[Exception] = redis.WatchError
        try:
            self._client: Any = redis.Redis.from_url(
                url, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        except ValueError as exc:
            raise InvalidOptionsError(
                f"url is not a Redis URL ({self._scrub(str(exc))}): {self._url}",
                option="url",
            ) from None
        # Test seams: called with the transaction queued, right before EXEC is sent, and
        # right after its answer came back, so a test can kill the process on either side.
        self._before_execute: Callable[[], None] | None = None
        self._after_execute: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"RedisStore({self._url!r}, namespace={self._namespace!r})"

    def get(self, key: str) -> dict[str, Any] | None:
        check_key(key)
        with self._talking():
            raw = self._client.get(self._value_key(key))
        return None if raw is None else self._decode(key, raw)

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        check_key(key)
        text = encode_value(value)
        with self._talking():
            pipe = self._client.pipeline(transaction=True)
            pipe.set(self._value_key(key), text.encode("utf-8"))
            pipe.zadd(self._index, {key.encode("utf-8"): 0})
            self._execute(pipe)

    def update(self, key: str, fn: Updater) -> dict[str, Any] | None:
        check_key(key)
        check_updater(fn)
        value_key, member = self._value_key(key), key.encode("utf-8")
        try:
            for _ in range(MAX_CONFLICTS):
                with self._talking(), self._client.pipeline(transaction=True) as pipe:
                    pipe.watch(value_key)  # immediate mode until multi(): GET answers now
                    raw = pipe.get(value_key)
                    old = None if raw is None else _bytes(raw)
                    new = call_updater(fn, None if old is None else self._decode(key, old))
                    if (new.encode("utf-8") if new is not None else None) == old:
                        return None if new is None else self._decode(key, new)
                    pipe.multi()
                    if new is None:
                        pipe.delete(value_key)
                        pipe.zrem(self._index, member)
                    else:
                        pipe.set(value_key, new.encode("utf-8"))
                        pipe.zadd(self._index, {member: 0})
                    try:
                        self._execute(pipe)
                    except self._conflict:
                        continue  # another client wrote the key since WATCH: read again
                    return None if new is None else self._decode(key, new)
        except UpdateAborted as aborted:
            error = aborted.error
        else:
            raise StoreError(
                f"{self._url}: gave up updating {key!r} after {MAX_CONFLICTS} tries, each "
                "beaten by another client's write to it",
                code="store_unavailable",
                url=self._url,
            )
        raise error

    def delete(self, key: str) -> bool:
        check_key(key)
        with self._talking():
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(self._value_key(key))
            pipe.zrem(self._index, key.encode("utf-8"))
            removed, _ = self._execute(pipe)
        return bool(removed)

    def scan(self, prefix: str) -> dict[str, dict[str, Any]]:
        check_key(prefix, prefix=True)
        upper = prefix_successor(prefix)
        low = b"[" + prefix.encode("utf-8") if prefix else b"-"
        high = b"+" if upper is None else b"(" + upper.encode("utf-8")
        found: dict[str, dict[str, Any]] = {}
        with self._talking():
            members = self._client.zrangebylex(self._index, low, high)
            for start in range(0, len(members), _MGET_BATCH):
                batch = [_text(m) for m in members[start : start + _MGET_BATCH]]
                values = self._client.mget([self._value_key(k) for k in batch])
                for key, raw in zip(batch, values, strict=True):
                    if raw is not None:  # deleted since the index was read
                        found[key] = self._decode(key, raw)
        return found

    def close(self) -> None:
        self._client.close()

    # -- the server ---------------------------------------------------------------------

    def _value_key(self, key: str) -> bytes:
        return (self._namespace + "v:" + key).encode("utf-8")

    def _execute(self, pipe: Any) -> list[Any]:
        if self._before_execute is not None:
            self._before_execute()
        result: list[Any] = pipe.execute()
        if self._after_execute is not None:
            self._after_execute()
        return result

    def _decode(self, key: str, raw: Any) -> dict[str, Any]:
        return decode_value(raw, where=f"{self._url} [{key!r}]")

    def _scrub(self, text: str) -> str:
        for secret in self._password:
            text = text.replace(secret, "***")
        return text

    @contextmanager
    def _talking(self) -> Iterator[None]:
        try:
            yield
        except self._errors as exc:
            message = self._scrub(f"{type(exc).__name__}: {exc}")
            code = "store_corrupt" if "WRONGTYPE" in message else "store_unavailable"
            raise StoreError(f"{self._url}: {message}", code=code, url=self._url) from None


def _bytes(raw: bytes | str) -> bytes:
    """A value as bytes (``str`` already with ``?decode_responses=True``)."""
    return raw.encode("utf-8") if isinstance(raw, str) else raw


def _text(member: bytes | str) -> str:
    """A member of the index as text (``str`` already with ``?decode_responses=True``)."""
    return member if isinstance(member, str) else member.decode("utf-8")


def _password(url: str) -> tuple[str, ...]:
    """The URL's password as written and as redis-py unquotes it (both must be scrubbed)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return ()
    return tuple({password, unquote(password)}) if password else ()
