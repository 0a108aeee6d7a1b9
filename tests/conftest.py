"""Shared pytest configuration: async tests run on asyncio through anyio's plugin."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _reset_config() -> Iterator[None]:
    """Each test starts with no process-wide configuration and an empty provision cache."""
    from managedloop import configure
    from managedloop.provisioning import clear_cache

    configure()
    clear_cache()
    yield
    configure()
    clear_cache()
