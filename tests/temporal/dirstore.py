"""A minimal shared store for the worker processes of these tests: one file per key.

Stand-in until the persistent stores of ``managedloop.stores`` are used here; atomic
replace per key is all the kill tests need.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class DirStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / hashlib.sha256(key.encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(key).read_text())["value"]  # type: ignore[no-any-return]
        except FileNotFoundError:
            return None

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        path = self._path(key)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "value": dict(value)}))
        os.replace(tmp, path)

    def delete(self, key: str) -> bool:
        try:
            self._path(key).unlink()
            return True
        except FileNotFoundError:
            return False

    def scan(self, prefix: str) -> dict[str, dict[str, Any]]:
        out = {}
        for p in self.root.iterdir():
            if p.suffix == "":
                data = json.loads(p.read_text())
                if data["key"].startswith(prefix):
                    out[data["key"]] = data["value"]
        return out

    def close(self) -> None:
        pass
