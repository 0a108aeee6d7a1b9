"""Shared pytest configuration: async tests run on asyncio through anyio's plugin."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

# Property tests (marked ``fuzz``): a few hundred examples in `make test`, at least 10,000
# in `make fuzz`. No deadline: a loaded two-core CI machine must not fail a property on time.
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "fuzz", max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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
