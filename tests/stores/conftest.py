"""The ``store`` fixture: one instance of every backend the contract suite runs against.

Each backend adds one factory here; ``test_contract.py`` then runs unchanged against it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from managedloop.stores import MemoryStore, Store

FACTORIES: dict[str, Callable[[Path], Store]] = {
    "memory": lambda _tmp: MemoryStore(),
}


@pytest.fixture(params=sorted(FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made = FACTORIES[request.param](tmp_path)
    yield made
    made.close()
