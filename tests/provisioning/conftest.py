"""Fixtures for the lifecycle tests: the emulators, providers on them, and stores.

``store`` is a factory fixture: tests that need a store (or two handles on one) ask for
``store()``. It builds a ``MemoryStore`` here; at merge time the persistent stores
(``FileStore``, ``SQLiteStore``) slot in by parametrising ``store_factory``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import anthropic
import pytest

import claude_fixtures
from claude_fixtures import make_provider
from managedloop.providers import ClaudeManagedAgents
from managedloop.stores import MemoryStore, Store

# The shared Claude fixtures (tests/claude_fixtures.py), served to this folder.
client = claude_fixtures.client
sdk_max_retries = claude_fixtures.sdk_max_retries
emu = claude_fixtures.emu


@pytest.fixture
def store_factory() -> Callable[[], Store]:
    return MemoryStore


@pytest.fixture
def store(store_factory: Callable[[], Store]) -> Iterator[Store]:
    s = store_factory()
    yield s
    s.close()


@pytest.fixture
def claude(client: anthropic.AsyncAnthropic) -> ClaudeManagedAgents:
    return make_provider(client)
