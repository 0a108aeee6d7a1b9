"""Local's shared connection pool across connections of one provider.

Regression: the pool counted its users, but creating the client session (at the first
request, after both connections had been opened) reset that count to zero, so the first
connection to close closed the session under a request the other still had in flight —
seen as ``ClientConnectionError`` retries when a Temporal worker ran many activities on one
provider. The count now belongs to the event loop the connections were opened on.
"""

from __future__ import annotations

import threading

import anyio
import pytest

import managedloop as ml
from managedloop.hosts import OpenRequest, UserMessage
from managedloop.providers import Local
from managedloop.results import TurnResult
from managedloop.testing import ChatEmulator, ModelRequest, Reply, say

pytestmark = pytest.mark.anyio

SPEC = ml.AgentSpec(name="a", system_prompt="Hi.", model="m")
HOLD_BOUND = 30.0  # the test releases the held answer long before


async def test_closing_one_connection_does_not_close_the_pool_under_another() -> None:
    arrived, release = threading.Event(), threading.Event()

    def step(request: ModelRequest) -> Reply:
        if request.user_text == "one":
            return say("first")
        arrived.set()  # the second connection's request: held until the first has closed
        release.wait(HOLD_BOUND)
        return say("late but whole")

    with ChatEmulator(script=[step]) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
        first = await provider.open(OpenRequest(spec=SPEC, agent=SPEC))
        second = await provider.open(OpenRequest(spec=SPEC, agent=SPEC))
        got: list[TurnResult] = []

        async def turn(conn: object, text: str) -> None:
            async for item in conn.turn(UserMessage(text)):  # type: ignore[attr-defined]
                if isinstance(item, TurnResult):
                    got.append(item)

        await turn(first, "one")
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn, second, "two")
            await anyio.to_thread.run_sync(arrived.wait, HOLD_BOUND)
            await first.aclose()  # the other connection's request is in flight
            release.set()
        await second.aclose()
    assert [t.text for t in got] == ["first", "late but whole"]
    assert len(emu.received) == 2  # the held request was never cut off and retried
