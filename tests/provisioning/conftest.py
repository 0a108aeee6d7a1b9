"""Fixtures for the lifecycle tests: the emulators, providers on them, and stores.

``store`` is a factory fixture: tests that need a store (or two handles on one) ask for
``store()``. It builds a ``MemoryStore`` here; at merge time the persistent stores
(``FileStore``, ``SQLiteStore``) slot in by parametrising ``store_factory``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import anthropic
import pytest

from managedloop.providers import ClaudeManagedAgents
from managedloop.stores import MemoryStore, Store
from managedloop.testing import ClaudeEmulator


@pytest.fixture
def store_factory() -> Callable[[], Store]:
    return MemoryStore


@pytest.fixture
def store(store_factory: Callable[[], Store]) -> Iterator[Store]:
    s = store_factory()
    yield s
    s.close()


@pytest.fixture
def emu() -> Iterator[ClaudeEmulator]:
    with ClaudeEmulator() as e:
        yield e


@pytest.fixture
async def client(emu: ClaudeEmulator) -> AsyncIterator[anthropic.AsyncAnthropic]:
    c = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key, max_retries=0)
    async with c:
        yield c


@pytest.fixture
def claude(client: anthropic.AsyncAnthropic) -> ClaudeManagedAgents:
    return ClaudeManagedAgents(client=client, reconnect_backoff=0.0)
