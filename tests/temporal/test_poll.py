"""The one bounded poll the durable-session tests wait with (``conftest.poll``): it counts
looks, not seconds, and its sleep is injected, so these run without a clock or a server."""

from __future__ import annotations

import pytest

from .conftest import INTERVAL, poll

pytestmark = pytest.mark.anyio


async def test_poll_returns_the_first_true_look() -> None:
    looks = iter([[], [], ["held"]])
    slept: list[float] = []

    async def look() -> list[str]:
        return next(looks)

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    assert await poll(look, "a held call", sleep=sleep) == ["held"]
    assert slept == [INTERVAL, INTERVAL]


async def test_poll_gives_up_after_its_bound_of_looks() -> None:
    looked: list[int] = []

    async def look() -> bool:
        looked.append(1)
        return False

    async def sleep(seconds: float) -> None:
        pass

    with pytest.raises(AssertionError, match="gave up waiting for the file after 3 polls"):
        await poll(look, "the file", polls=3, sleep=sleep)
    assert len(looked) == 3
