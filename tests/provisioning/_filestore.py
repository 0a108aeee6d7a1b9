"""A throwaway file-backed ``Store`` for the two-process test (no pytest import: the child
processes import it)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


class JsonFileStore:
    """A throwaway file-backed ``Store`` for the two-process test: one JSON file, an
    exclusive ``O_EXCL`` lock file, atomic replace. Not a product store (``FileStore`` on
    the stores branch is); just enough to share state between two processes honestly."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._local = threading.Lock()

    def _locked(self, fn: Callable[[dict[str, Any]], Any], write: bool) -> Any:
        lock = self.path.with_suffix(".lock")
        with self._local:
            while True:
                try:
                    fd = os.open(lock, os.O_CREAT | os.O_EXCL)
                    break
                except FileExistsError:
                    threading.Event().wait(0.005)
            try:
                data = json.loads(self.path.read_text()) if self.path.exists() else {}
                out = fn(data)
                if write:
                    tmp = self.path.with_suffix(".tmp")
                    tmp.write_text(json.dumps(data))
                    os.replace(tmp, self.path)
                return out
            finally:
                os.close(fd)
                os.unlink(lock)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._locked(lambda d: d.get(key), write=False)  # type: ignore[no-any-return]

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        self._locked(lambda d: d.__setitem__(key, dict(value)), write=True)

    def delete(self, key: str) -> bool:
        return bool(self._locked(lambda d: d.pop(key, None) is not None, write=True))

    def scan(self, prefix: str) -> dict[str, dict[str, Any]]:
        return self._locked(  # type: ignore[no-any-return]
            lambda d: {k: v for k, v in sorted(d.items()) if k.startswith(prefix)}, write=False
        )

    def close(self) -> None:
        pass
