"""Streaming partial output on live sessions: as the answer's JSON streams (text and native
strategies, ``Local(stream=True)``), each partial is an instance of the output type,
validated leniently, to ``partial_outputs()`` and to ``handle_event``. (The tool
strategy's: ``test_output_tool_stream.py``.)"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pydantic
import pytest

import managedloop as ml
from managedloop.providers import Local
from managedloop.session.driver import OUTPUT_PARTIAL
from managedloop.testing import ChatEmulator, ScriptedChatModel, call, say

from .models import GOOD, Sky, Weather

pytestmark = pytest.mark.anyio

SPEC = ml.AgentSpec(name="w")


class Day(pydantic.BaseModel):
    name: str
    sky: Sky


class Forecast(pydantic.BaseModel):
    """Validates as soon as ``city`` is there: a list that grows makes partials."""

    city: str
    days: list[Day] = []


FORECAST = {
    "city": "Paris",
    "days": [{"name": d, "sky": "sunny"} for d in ("Monday", "Tuesday", "Wednesday")],
}


class Events:
    def __init__(self) -> None:
        self.partials: list[Any] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
        raise AssertionError("no tools here")

    def handle_event(self, event: dict[str, Any], info: Any) -> None:
        if event.get("type") == OUTPUT_PARTIAL:
            self.partials.append(event["output"])


@pytest.mark.parametrize("strategy", ["native", "text"])
async def test_partials_stream_to_a_live_session(strategy: str) -> None:
    text = json.dumps(FORECAST)
    events = Events()
    with ChatEmulator([say(text)], chunk_size=6) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True)
        async with ml.start(
            provider, agent=SPEC, output=Forecast, output_strategy=strategy, handler=events
        ) as session:
            partials = session.partial_outputs()
            await session.send("weather?")
            result = await session.result()
            seen: list[Any] = []
            while True:  # every partial is queued by the time the result is
                try:
                    seen.append(partials.receive_nowait())
                except anyio.WouldBlock:
                    break
    assert isinstance(result.output, Forecast)
    assert seen == events.partials
    assert all(isinstance(p, Forecast) for p in seen)
    assert [len(p.days) for p in seen][-1] == 3
    assert len(seen) >= 3  # it grew over the chunks: a day at a time at least
    assert [len(p.days) for p in seen] == sorted(len(p.days) for p in seen)
    assert seen[-1] == result.output


async def test_an_unstreamed_host_streams_no_partials() -> None:
    """Partials under the tool strategy: ``test_output_tool_stream.py``."""
    events = Events()
    provider = Local(model="m", chat=ScriptedChatModel([call("final_result", GOOD)]))
    async with ml.start(
        provider, agent=SPEC, output=Weather, output_strategy="tool", handler=events
    ) as session:
        partials = session.partial_outputs()
        await session.send("x")
        result = await session.result()
        with pytest.raises(anyio.WouldBlock):
            partials.receive_nowait()
    assert isinstance(result.output, Weather)
    assert events.partials == []
