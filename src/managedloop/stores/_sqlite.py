"""``SQLiteStore``: the embedded store for the command line and cron jobs (stdlib ``sqlite3``).

Guarantees, and what they rest on:

* **Many processes and threads on one machine.** The database runs in WAL mode: readers
  never block the writer nor each other, and writers take turns, each waiting up to
  ``busy_timeout`` seconds for the one before (SQLite's own busy handler). Every write is
  one ``BEGIN IMMEDIATE … COMMIT`` transaction, so a write never fails half-way through a
  lock upgrade; ``update`` reads, runs its function and writes inside one such transaction,
  so no other writer's change lands in between (and it runs its function once). Within a
  process the connection is shared under a lock (``sqlite3`` connections are not safe to
  use from two threads at once); a process that forked after opening the store gets a
  fresh connection of its own on first use, as SQLite requires. WAL needs shared memory
  between the processes, so this is one machine and a local filesystem, never a network
  share: use :class:`~managedloop.stores.RedisStore` across machines.
* **Opening is safe under contention.** Switching a new database to WAL needs a lock SQLite
  does not wait for (the busy handler does not run for it): the switch is retried until it
  takes or ``busy_timeout`` has passed, and the error then says how long it waited and for
  what.
* **Atomic and durable.** ``synchronous=FULL``: a ``put`` or ``delete`` that returned is
  on disk, a power cut included. A process killed at any point, mid-transaction included
  (pinned right before ``COMMIT`` by ``tests/stores/test_crash.py``), leaves every
  committed value readable and nothing of the uncommitted one: SQLite rolls it back when
  the next connection opens the database.
* **Scans use the primary-key index**: a prefix becomes the half-open range
  ``[prefix, successor(prefix))`` (never ``LIKE``, where ``_`` and ``%`` in a prefix such as
  ``tag:data_`` would match other keys).
* A file that is not an SQLite database, or a database without this store's table layout,
  is ``StoreError(code="store_corrupt")`` naming the path; a lock not had within
  ``busy_timeout`` and any other operational failure is ``store_unavailable``.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from managedloop import _validate
from managedloop.errors import StoreError
from managedloop.stores._base import (
    UpdateAborted,
    Updater,
    call_updater,
    check_key,
    check_updater,
    decode_value,
    encode_value,
)

__all__ = ["SQLiteStore", "default_store_path", "prefix_successor"]

BUSY_TIMEOUT = 30.0
"""Seconds a write waits for other writers: each holds the lock for milliseconds, so a
wait this long means a stuck process, which is better reported than waited on."""

WAL_RETRY_FIRST = 0.001
WAL_RETRY_MAX = 0.05
"""Seconds between two tries of the WAL switch (doubling from the first to the most): the
other opener holds its lock for milliseconds, so the first retries come quickly and a
long wait polls twenty times a second."""

SCHEMA_VERSION = 1
"""``PRAGMA user_version`` of this layout; a database with another is not ours."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) WITHOUT ROWID
"""


def default_store_path() -> Path:
    """Where the command line keeps its store by default: ``store.sqlite3`` in the user's
    cache directory for ``managedloop``.

    ``$XDG_CACHE_HOME/managedloop`` (when set to an absolute path) or
    ``~/.cache/managedloop`` on Linux and other POSIX systems,
    ``~/Library/Caches/managedloop`` on macOS, ``%LOCALAPPDATA%\\managedloop\\Cache`` on
    Windows — the ``platformdirs`` rules, without the dependency. Nothing is created here.
    """
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "managedloop" / "Cache" / "store.sqlite3"
    if sys.platform == "darwin":  # pragma: no cover - exercised on macOS only
        return Path.home() / "Library" / "Caches" / "managedloop" / "store.sqlite3"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base_dir = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base_dir / "managedloop" / "store.sqlite3"


def prefix_successor(prefix: str) -> str | None:
    """The least string greater than every string that starts with ``prefix`` (``None``:
    no upper bound). Code-point order, which is also UTF-8 byte order (SQLite's ``BINARY``
    collation, Redis's lexicographic ranges)."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            following = last + 1
            if 0xD800 <= following <= 0xDFFF:  # surrogates are never in a key: skip them
                following = 0xE000
            return "".join(chars) + chr(following)
    return None


class SQLiteStore:
    """An SQLite database file in WAL mode (see the module docstring for the guarantees).

    ``path`` is the database file (its directory is created if missing); ``busy_timeout``
    is how long an operation waits for another writer (``0``: do not wait).
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = BUSY_TIMEOUT) -> None:
        timeout = _validate.duration(
            "busy_timeout", busy_timeout, allow_none=False, allow_zero=True
        )
        self._path = Path(path).absolute()
        self._busy_timeout = timeout or 0.0
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._inherited: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        # Test seams: called inside a write transaction right before COMMIT, and right
        # after it, so a test can kill the process on either side of the commit.
        self._before_commit: Callable[[], None] | None = None
        self._after_commit: Callable[[], None] | None = None
        with self._locked():  # open now: a bad path or a foreign file fails here, not later
            pass

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self._path)!r})"

    def get(self, key: str) -> dict[str, Any] | None:
        check_key(key)
        with self._locked() as db:
            row = db.execute("SELECT value FROM entries WHERE key = ?", (key,)).fetchone()
        return None if row is None else self._decode(key, row[0])

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        check_key(key)
        text = encode_value(value)
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO entries (key, value) VALUES (?, ?)", (key, text))

    def update(self, key: str, fn: Updater) -> dict[str, Any] | None:
        check_key(key)
        check_updater(fn)
        try:
            with self._transaction() as db:
                row = db.execute("SELECT value FROM entries WHERE key = ?", (key,)).fetchone()
                old = None if row is None else self._decode(key, row[0])
                new = call_updater(fn, old)
                if new is None:
                    if row is not None:
                        db.execute("DELETE FROM entries WHERE key = ?", (key,))
                elif row is None or new != row[0]:
                    db.execute(
                        "INSERT OR REPLACE INTO entries (key, value) VALUES (?, ?)", (key, new)
                    )
        except UpdateAborted as aborted:
            error = aborted.error
        else:
            return None if new is None else self._decode(key, new)
        raise error

    def delete(self, key: str) -> bool:
        check_key(key)
        with self._transaction() as db:
            return db.execute("DELETE FROM entries WHERE key = ?", (key,)).rowcount > 0

    def scan(self, prefix: str) -> dict[str, dict[str, Any]]:
        check_key(prefix, prefix=True)
        upper = prefix_successor(prefix)
        with self._locked() as db:
            if upper is None:
                rows = db.execute(
                    "SELECT key, value FROM entries WHERE key >= ? ORDER BY key", (prefix,)
                ).fetchall()
            else:
                rows = db.execute(
                    "SELECT key, value FROM entries WHERE key >= ? AND key < ? ORDER BY key",
                    (prefix, upper),
                ).fetchall()
        return {key: self._decode(key, text) for key, text in rows}

    def close(self) -> None:
        """Close the connection (a later operation would open a new one)."""
        with self._lock:
            if self._connection is not None and self._pid == os.getpid():
                self._connection.close()
            self._connection = None

    # -- the database -------------------------------------------------------------------

    def _decode(self, key: str, text: Any) -> dict[str, Any]:
        if not isinstance(text, str):
            raise StoreError(
                f"{self._path}: the value of {key!r} is not text",
                code="store_corrupt",
                path=str(self._path),
            )
        return decode_value(text, where=f"{self._path} [{key!r}]")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._locked() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                if self._before_commit is not None:
                    self._before_commit()
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            if self._after_commit is not None:
                self._after_commit()

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            started = time.monotonic()
            try:
                yield self._connect()
            except sqlite3.DatabaseError as exc:
                raise self._error(exc, time.monotonic() - started) from None

    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None and self._pid == os.getpid():
            return self._connection
        if self._connection is not None:
            # Forked: the parent's connection must not be used, nor even closed (closing it
            # may checkpoint and unlock the parent's files), so it is kept, untouched,
            # until this process ends.
            self._inherited.append(self._connection)
        self._connection, self._pid = None, os.getpid()
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"{self._path}: {exc.strerror or exc}",
                code="store_unavailable",
                path=str(self._path),
            ) from None
        # isolation_level=None: no implicit transactions; each write is our own
        # BEGIN IMMEDIATE ... COMMIT, each read one statement (its own snapshot).
        db = sqlite3.connect(
            self._path,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,  # shared across threads under self._lock
        )
        try:
            self._enable_wal(db)
            db.execute("PRAGMA synchronous=FULL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:  # new (or not ours): decide under the write lock, once
                db.execute("BEGIN IMMEDIATE")
                try:
                    version = self._create(db)
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
            if version != SCHEMA_VERSION:
                raise StoreError(
                    f"{self._path}: an SQLite database of another layout "
                    f"(user_version {version}); move it aside",
                    code="store_corrupt",
                    path=str(self._path),
                )
        except BaseException:
            db.close()
            raise
        self._connection = db
        return db

    def _enable_wal(self, db: sqlite3.Connection) -> None:
        """Switch to WAL, retried within ``busy_timeout``: the switch needs the database to
        itself, and SQLite answers ``SQLITE_BUSY`` (or keeps the old mode) at once, without
        its busy handler, while another connection holds a lock — which is what two
        processes opening a new store together do to each other."""
        started = time.monotonic()
        pause = WAL_RETRY_FIRST
        while True:
            try:
                mode = str(db.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                mode = "busy"
            if mode == "wal":
                return
            waited = time.monotonic() - started
            if waited >= self._busy_timeout:
                held = "was locked" if mode == "busy" else f"stayed in {mode!r} journal mode"
                raise StoreError(
                    f"{self._path}: could not switch the database to WAL mode: it {held} by "
                    f"another connection for the whole busy_timeout (retried for {waited:.2f} s "
                    f"of {self._busy_timeout:g} s)",
                    code="store_unavailable",
                    path=str(self._path),
                    waited=round(waited, 3),
                )
            time.sleep(min(pause, max(self._busy_timeout - waited, 0.0)))
            pause = min(pause * 2, WAL_RETRY_MAX)

    def _create(self, db: sqlite3.Connection) -> int:
        """Lay out a new database (inside a write transaction); the schema version."""
        version: int = db.execute("PRAGMA user_version").fetchone()[0]
        if version != 0:  # another process laid it out first
            return version
        if db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise StoreError(
                f"{self._path}: an SQLite database that is not a managedloop store; move it aside",
                code="store_corrupt",
                path=str(self._path),
            )
        db.execute(_SCHEMA)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return SCHEMA_VERSION

    def _error(self, exc: sqlite3.DatabaseError, waited: float) -> StoreError:
        """``exc`` as a ``StoreError``; ``waited``: seconds the failed operation took."""
        where = str(self._path)
        name = getattr(exc, "sqlite_errorname", "")
        if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or "not a database" in str(exc):
            return StoreError(
                f"{where}: not an SQLite database, or a damaged one ({exc}); move it aside",
                code="store_corrupt",
                path=where,
            )
        if _busy(exc):
            return StoreError(
                f"{where}: the store is locked by another process (gave up after "
                f"{waited:.2f} s; busy_timeout {self._busy_timeout:g} s)",
                code="store_unavailable",
                path=where,
                waited=round(waited, 3),
            )
        return StoreError(f"{where}: {exc}", code="store_unavailable", path=where)


def _busy(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "")
    return name in ("SQLITE_BUSY", "SQLITE_LOCKED") or "locked" in str(exc)
