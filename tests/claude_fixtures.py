"""Claude Managed Agents fixtures shared by the test folders that run on its emulator.

A folder's ``conftest.py`` imports the fixtures it wants (``from claude_fixtures import
client, emu``) and may override any of them: ``emu`` to give the emulator a script,
``sdk_max_retries`` for the SDK client's own retries (0 here, so a fault reaches the test).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import pytest

from managedloop.providers import ClaudeManagedAgents
from managedloop.testing import ClaudeEmulator


@pytest.fixture
def emu() -> Iterator[ClaudeEmulator]:
    with ClaudeEmulator() as e:
        yield e


@pytest.fixture
def sdk_max_retries() -> int:
    return 0


@pytest.fixture
async def client(
    emu: ClaudeEmulator, sdk_max_retries: int
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    c = anthropic.AsyncAnthropic(
        base_url=emu.base_url, api_key=emu.api_key, max_retries=sdk_max_retries
    )
    async with c:
        yield c


def make_provider(client: anthropic.AsyncAnthropic, **kwargs: Any) -> ClaudeManagedAgents:
    """A provider on the SDK client, with no reconnect backoff (tests never wait)."""
    kwargs.setdefault("reconnect_backoff", 0.0)
    return ClaudeManagedAgents(client=client, **kwargs)
