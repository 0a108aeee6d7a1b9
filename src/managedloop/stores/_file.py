"""``FileStore``: one JSON file, safe for many processes and threads on one machine.

Guarantees, and what they rest on:

* **Many processes on one machine.** Every operation, reads included, runs under an
  exclusive cross-process lock on ``<path>.lock`` (the ``filelock`` package: ``flock`` on
  POSIX, ``LockFileEx`` on Windows), so a read-modify-write never races another
  process's: ``update`` reads, runs its function and writes with the lock held throughout,
  so no other writer's change is lost. The lock is the kernel's: a process that dies, even
  by SIGKILL, releases it.
  It is *not* safe on a network filesystem whose locks are advisory or absent (NFS
  without a lock manager, some FUSE mounts): use :class:`~managedloop.stores.SQLiteStore`
  on one machine or :class:`~managedloop.stores.RedisStore` across machines.
* **Atomic and durable writes.** A write goes to a temporary file in the same directory,
  is flushed and ``fsync``-ed, moved over the store with ``os.replace`` (atomic on POSIX
  and Windows), and then the directory is ``fsync``-ed so the rename itself survives a
  power cut. A reader therefore sees the whole old file or the whole new one, never a
  partial file; a process killed at any point (pinned at the worst one, right before the
  replace, by ``tests/stores/test_crash.py``) leaves the previous state readable, plus a
  stale temporary file, which the first write of the next ``FileStore`` opened on that
  path removes.
* **Never silently reset.** A store file that is not what this class writes (not JSON, not
  the expected shape, truncated by hand) is ``StoreError(code="store_corrupt")`` naming the
  path, on every operation, until someone moves it aside: a provisioning store that
  quietly became empty would re-create every agent.
* A lock not acquired within ``lock_timeout`` seconds is
  ``StoreError(code="store_unavailable")`` naming the path; any other I/O failure (a
  permission, a full disk) is ``store_unavailable`` too, and leaves the store as it was.

Cost: every write rewrites the whole file (two ``fsync`` calls), so this store suits
what it is for — hundreds of handles and tags — not a large or hot data set.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import filelock

from managedloop import _validate
from managedloop.errors import StoreError
from managedloop.stores._base import (
    UpdateAborted,
    Updater,
    call_updater,
    check_key,
    check_updater,
    encode_value,
)

__all__ = ["FileStore"]

FORMAT = 1
"""The ``"managedloop_store"`` marker of the file layout ``{"managedloop_store": 1,
"entries": {key: value}}``: a file without it is not ours and is never overwritten."""

LOCK_TIMEOUT = 30.0
"""Seconds to wait for the lock: an operation holds it for milliseconds, so a wait this
long means a stuck holder (or a hung filesystem), which is better reported than waited on."""

LOCK_POLL = 0.002
"""Seconds between tries for a held lock (``filelock`` polls a non-blocking ``flock``):
a holder keeps it for about a millisecond, so its default 50 ms would leave the lock idle
most of the time while several processes queue for it."""


class FileStore:
    """A JSON file under a cross-process lock (see the module docstring for the guarantees).

    ``path`` is the store file; its directory is created if missing. ``lock_timeout`` is
    how long an operation waits for another process's lock (``0``: do not wait).
    """

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout: float = LOCK_TIMEOUT) -> None:
        timeout = _validate.duration(
            "lock_timeout", lock_timeout, allow_none=False, allow_zero=True
        )
        self._path = Path(path).absolute()
        self._lock_path = self._path.with_name(self._path.name + ".lock")
        self._temp_prefix = f".{self._path.name}."
        self._lock = filelock.FileLock(self._lock_path, timeout=timeout or 0.0)
        # Test seams: called after the new file is written and fsync-ed, right before it
        # replaces the store, and right after the replace is durable (the directory
        # fsync-ed), so a test can kill the process on either side of the commit.
        self._before_replace: Callable[[], None] | None = None
        self._after_replace: Callable[[], None] | None = None
        self._swept = False

    @property
    def path(self) -> Path:
        """The store file."""
        return self._path

    def __repr__(self) -> str:
        return f"FileStore({str(self._path)!r})"

    def get(self, key: str) -> dict[str, Any] | None:
        check_key(key)
        with self._locked():
            entries = self._read()
        return entries.get(key)  # parsed afresh by every read: never shared

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        check_key(key)
        text = encode_value(value)
        with self._locked():
            entries = self._read()
            entries[key] = json.loads(text)
            self._write(entries)

    def update(self, key: str, fn: Updater) -> dict[str, Any] | None:
        check_key(key)
        check_updater(fn)
        try:
            with self._locked():
                entries = self._read()
                old = entries.get(key)
                before = None if old is None else encode_value(old)
                new = call_updater(fn, None if before is None else json.loads(before))
                if new == before:  # unchanged (absent and deleted, or the same value)
                    return None if new is None else json.loads(new)
                if new is None:
                    del entries[key]
                else:
                    entries[key] = json.loads(new)
                self._write(entries)
        except UpdateAborted as aborted:
            error = aborted.error
        else:
            return None if new is None else json.loads(new)
        raise error

    def delete(self, key: str) -> bool:
        check_key(key)
        with self._locked():
            entries = self._read()
            if entries.pop(key, None) is None:
                return False
            self._write(entries)
            return True

    def scan(self, prefix: str) -> dict[str, dict[str, Any]]:
        check_key(prefix, prefix=True)
        with self._locked():
            entries = self._read()
        return {k: v for k, v in sorted(entries.items()) if k.startswith(prefix)}

    def close(self) -> None:
        """Nothing is held between operations; kept for the protocol."""

    # -- the file -----------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock.acquire(poll_interval=LOCK_POLL):
                yield
        except filelock.Timeout:
            raise StoreError(
                f"{self._path}: the store is locked by another process (waited "
                f"{self._lock.timeout} s for {self._lock_path})",
                code="store_unavailable",
                path=str(self._path),
            ) from None
        except OSError as exc:
            raise StoreError(
                f"{self._path}: {exc.strerror or exc}",
                code="store_unavailable",
                path=str(self._path),
                errno=exc.errno,
            ) from None

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return {}
        where = str(self._path)
        try:
            document = json.loads(raw)
        except ValueError as exc:  # UnicodeDecodeError included
            raise StoreError(
                f"{where}: the store file is not JSON ({exc}); move it aside",
                code="store_corrupt",
                path=where,
            ) from None
        entries = document.get("entries") if isinstance(document, dict) else None
        if (
            not isinstance(document, dict)
            or document.get("managedloop_store") != FORMAT
            or not isinstance(entries, dict)
        ):
            raise StoreError(
                f"{where}: not a managedloop store file (expected "
                f'{{"managedloop_store": {FORMAT}, "entries": {{...}}}}); move it aside',
                code="store_corrupt",
                path=where,
            )
        for key, value in entries.items():
            if not isinstance(value, dict):
                raise StoreError(
                    f"{where}: the value of {key!r} is not a JSON object",
                    code="store_corrupt",
                    path=where,
                )
        return entries

    def _write(self, entries: dict[str, dict[str, Any]]) -> None:
        data = json.dumps(
            {"managedloop_store": FORMAT, "entries": entries},
            ensure_ascii=False,
            sort_keys=True,
            separators=(",", ":"),
        ).encode("utf-8")
        directory = self._path.parent
        if not self._swept:  # once per instance: listing a big directory on every write
            self._remove_stale_temps()  # would cost more than the write
            self._swept = True
        fd, temp = tempfile.mkstemp(dir=directory, prefix=self._temp_prefix, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                self._keep_mode(file.fileno())
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            if self._before_replace is not None:
                self._before_replace()
            os.replace(temp, self._path)
        except BaseException:
            _unlink(temp)
            raise
        _fsync_directory(directory)
        if self._after_replace is not None:
            self._after_replace()

    def _keep_mode(self, fd: int) -> None:
        """The new file gets the old one's permissions (``mkstemp`` makes it ``0o600``)."""
        try:
            mode = self._path.stat().st_mode & 0o777
        except FileNotFoundError:
            return
        if hasattr(os, "fchmod"):  # POSIX; Windows has no such modes to keep
            os.fchmod(fd, mode)

    def _remove_stale_temps(self) -> None:
        """Temporary files of writers that died before their replace (we hold the lock,
        so no live writer owns one)."""
        for stale in self._path.parent.glob(self._temp_prefix + "*.tmp"):
            _unlink(stale)


def _unlink(path: str | Path) -> None:
    with suppress(FileNotFoundError):
        os.unlink(path)


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable (POSIX; Windows has no directory handles to sync)."""
    if not hasattr(os, "O_DIRECTORY"):  # pragma: no cover - Windows
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
