"""Streaming partial output under the tool strategy: the output tool's input, streamed in
pieces (:class:`managedloop.hosts.ToolInputDelta`), becomes partial typed outputs on live
sessions and ``handle_event``, on Local over HTTP (streaming) and on AgentCore through
botocore; other tools' pieces make none, a restart starts the input again, and no piece
is ever recorded in ``SessionResult.events``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

import anyio
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

import managedloop as ml
from managedloop.hosts import (
    RESTART,
    ConnectionBase,
    OpenRequest,
    Terminal,
    ToolInputDelta,
    TurnInput,
    TurnItem,
    TurnResult,
)
from managedloop.providers import BedrockAgentCore, Local
from managedloop.session import output as _output
from managedloop.session.driver import OUTPUT_PARTIAL
from managedloop.testing import AgentCoreEmulator, ChatEmulator, ScriptedChatModel, call
from managedloop.testing.agentcore import AgentCoreFaults
from managedloop.testing.chat import ChatFaults

from .models import GOOD, Sky, Weather

pytestmark = pytest.mark.anyio

ROME = {"city": "Rome", "sky": "rain", "temperature": {"celsius": 9.0}}


@ml.tool
def report(city: str, sky: str, temperature: dict[str, float]) -> str:
    """A user tool whose input is shaped like a Weather (its pieces must make no partial)."""
    return f"noted {city}"


SPEC = ml.AgentSpec(name="w", system_prompt="Use tools.", tools=[report])
SCRIPT = [call("report", ROME), call("final_result", GOOD)]


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
    """A handler: runs ``report``, records the partial outputs and every event type."""

    def __init__(self) -> None:
        self.partials: list[Any] = []
        self.types: list[Any] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
        assert name == "report"
        return "noted"

    def handle_event(self, event: dict[str, Any], info: Any) -> None:
        self.types.append(event.get("type") or next(iter(event), None))  # or its envelope
        if event.get("type") == OUTPUT_PARTIAL:
            self.partials.append(event["output"])


def _drain(partials: Any) -> list[Any]:
    seen: list[Any] = []
    while True:  # every partial is queued by the time the result is
        try:
            seen.append(partials.receive_nowait())
        except anyio.WouldBlock:
            return seen


async def _live(
    provider: Any, output: Any = Weather, agent: Any = SPEC
) -> tuple[Any, Events, list[Any]]:
    events = Events()
    async with ml.start(
        provider, agent=agent, output=output, output_strategy="tool", handler=events
    ) as session:
        partials = session.partial_outputs()
        await session.send("Weather in Paris?")
        result = await session.result()
        seen = _drain(partials)
    return result, events, seen


def _check_weather(result: Any, events: Events, seen: list[Any]) -> None:
    assert isinstance(result.output, Weather)
    assert result.output_strategy == "tool"
    assert seen == events.partials
    assert len(seen) >= 2  # it grew as the input streamed
    assert all(isinstance(p, Weather) for p in seen)
    assert all(p.city == "Paris" for p in seen)  # the report call's pieces made none
    celsius = [p.temperature.celsius for p in seen]
    assert celsius == sorted(celsius)  # 2, 21, 21.5: growing as the number is written
    assert seen[-1] == result.output
    assert len(seen) == len({json.dumps(p.model_dump(mode="json")) for p in seen})  # no repeat
    assert all(not isinstance(e, ToolInputDelta) for e in result.events)
    assert not any(isinstance(e, dict) and e.get("type") == OUTPUT_PARTIAL for e in result.events)


# -- Local -----------------------------------------------------------------------------------


@pytest.mark.parametrize("names", ["once", "every_chunk", "split"])
async def test_local_over_http_streams_the_output_tools_input(names: Any) -> None:
    with ChatEmulator(SCRIPT, chunk_size=1, faults=ChatFaults(stream_names=names)) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True)
        result, events, seen = await _live(provider)
    _check_weather(result, events, seen)
    first = events.types.index(OUTPUT_PARTIAL)
    assert events.types[:first].count("local.model_response") == 1  # none in report's turn


async def test_local_a_growing_list_streams_item_by_item() -> None:
    with ChatEmulator([call("final_result", FORECAST)], chunk_size=5) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True)
        result, _, seen = await _live(provider, Forecast, ml.AgentSpec(name="f"))
    assert isinstance(result.output, Forecast)
    days = [len(p.days) for p in seen]
    assert days == sorted(days)
    assert days[-1] == 3
    assert len(set(days)) >= 3
    assert seen[-1] == result.output


async def test_local_unstreamed_reads_the_input_once_whole() -> None:
    """A server that ignores ``stream``: one partial, the whole input."""
    faults = ChatFaults(ignore_stream=True)
    with ChatEmulator([call("final_result", GOOD)], faults=faults) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True)
        result, _, seen = await _live(provider)
    assert seen == [result.output]


async def test_local_a_retried_stream_reads_the_input_again() -> None:
    """The first attempt is cut mid-input; the retry's pieces start the input again (the
    same call id: the host gives a retried attempt's pieces their own)."""
    script = [call("final_result", GOOD, id="call_1")]
    faults = ChatFaults(drop=1, drop_after=40)
    with ChatEmulator(script, chunk_size=1, faults=faults) as emu:
        provider = Local(
            model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True, retry_backoff=0.0
        )
        result, _, seen = await _live(provider, agent=ml.AgentSpec(name="w"))
        assert len(emu.requests) == 2
    assert isinstance(result.output, Weather)
    assert seen[-1] == result.output


async def test_the_scripted_chat_model_streams_tool_arguments_too() -> None:
    model = ScriptedChatModel(SCRIPT, chunk_size=3)
    result, events, seen = await _live(Local(model="m", chat=model, stream=True))
    _check_weather(result, events, seen)


async def test_nobody_listening_nothing_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any) -> Any:
        raise AssertionError("a partial was validated with nobody listening")

    monkeypatch.setattr(_output, "partial_output", fail)
    model = ScriptedChatModel(SCRIPT, chunk_size=3)
    result = await ml.run(
        Local(model="m", chat=model, stream=True), agent=SPEC, prompt="x", output=Weather
    )
    assert isinstance(result.output, Weather)


# -- AgentCore -------------------------------------------------------------------------------


async def test_agentcore_through_botocore_streams_the_output_tools_input() -> None:
    async with (
        AgentCoreEmulator(SCRIPT, tool_input_chunk=2) as emu,
        BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        ) as provider,
    ):
        result, events, seen = await _live(provider)
    _check_weather(result, events, seen)
    first = events.types.index(OUTPUT_PARTIAL)
    assert events.types[:first].count("messageStop") == 1  # none in report's turn


async def test_agentcore_a_restart_reads_the_input_again() -> None:
    """The first attempt ends mid-input (truncated); the retry yields RESTART and streams
    the same call again: without the reset its pieces would follow the first attempt's."""
    faults = AgentCoreFaults(truncate_after=30)
    script = [call("final_result", GOOD, id="tooluse_1")]
    async with AgentCoreEmulator(script, faults=faults, tool_input_chunk=1) as emu:
        async with BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        ) as provider:
            result, _, seen = await _live(provider, agent=ml.AgentSpec(name="w"))
        assert len(emu.operations("InvokeHarness")) == 2
    assert isinstance(result.output, Weather)
    assert seen[-1] == result.output


# -- the loop, over a host of pieces -----------------------------------------------------------


class Pieces(ConnectionBase):
    """A host whose one turn yields the given items, then calls ``final_result`` with the
    given input."""

    def __init__(self, items: Sequence[Any], final: dict[str, Any]) -> None:
        super().__init__()
        self.session_id = "pieces"
        self.items, self.final = items, final

    async def turn(self, input: TurnInput) -> AsyncIterator[TurnItem]:
        for item in self.items:
            yield item
        use = ml.ToolUse(id="t1", name="final_result", input=self.final)
        yield TurnResult(
            terminal=Terminal.REQUIRES_ACTION, stop_reason="tool_use", custom_tool_uses=[use]
        )


class PiecesHost:
    name: ClassVar[str] = "pieces"
    supports_outcomes: ClassVar[bool] = False
    supports_raw_events: ClassVar[bool] = False

    def __init__(self, items: Sequence[Any], final: dict[str, Any] = GOOD) -> None:
        self.items, self.final = items, final

    async def open(self, request: OpenRequest) -> Pieces:
        return Pieces(self.items, self.final)


def _pieces(text: str, id: str = "t1", name: str = "final_result") -> list[ToolInputDelta]:
    return [ToolInputDelta(id, name, c) for c in text]


async def test_a_restart_starts_the_input_again() -> None:
    text = json.dumps(GOOD)
    items = [*_pieces(text[:60]), RESTART, *_pieces(text)]
    result, _, seen = await _live(PiecesHost(items), agent=ml.AgentSpec(name="w"))
    assert seen[-1] == result.output == Weather.model_validate(GOOD)


async def test_another_call_of_the_output_tool_starts_the_input_again() -> None:
    text = json.dumps(GOOD)
    items = [*_pieces(json.dumps(ROME)[:-3], id="a"), *_pieces(text, id="b")]
    result, _, seen = await _live(PiecesHost(items), agent=ml.AgentSpec(name="w"))
    assert seen[0].city == "Rome"
    assert seen[-1] == result.output


async def test_pieces_of_other_tools_and_empty_pieces_make_no_partials() -> None:
    items = [*_pieces(json.dumps(ROME), name="report"), ToolInputDelta("t1", "final_result", "")]
    result, events, seen = await _live(PiecesHost(items), agent=ml.AgentSpec(name="w"))
    assert isinstance(result.output, Weather)
    assert seen == events.partials == []


@pytest.mark.fuzz
@given(data=st.data(), wrapped=st.booleans())
def test_any_split_of_the_input_gives_prefix_consistent_partials(
    data: st.DataObject, wrapped: bool
) -> None:
    """Whatever pieces the input arrives in, each partial is the lenient parse of the
    input so far (de-duplicated), the last is the output, and nothing raises."""
    output: Any = list[Weather] if wrapped else Forecast
    value: Any = {"response": [GOOD, ROME]} if wrapped else FORECAST
    text = json.dumps(value)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(text) - 1), max_size=40)))
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    events = Events()
    result = ml.run_sync(
        PiecesHost([ToolInputDelta("t1", "final_result", c) for c in chunks], value),
        agent=ml.AgentSpec(name="w"),
        prompt="x",
        output=output,
        handler=events,
    )
    plan = _output.plan(
        output, strategy="tool", retries=0, validators=None, provider=None, spec=None, tools=()
    )
    expected: list[Any] = []
    for end in [*cuts, len(text)]:
        value_so_far = _output.partial_output(plan, text[:end])
        if value_so_far is not None and (not expected or expected[-1] != value_so_far):
            expected.append(value_so_far)
    assert events.partials == expected
    assert events.partials[-1] == result.output


def test_a_validator_failing_on_a_partial_any_way_makes_no_partial_and_no_error() -> None:
    from typing import Annotated

    def picky(value: Weather) -> Weather:
        if value.temperature.celsius < 20:
            raise TypeError("not a ValueError")
        return value

    output: Any = Annotated[Weather, pydantic.AfterValidator(picky)]
    plan = _output.plan(
        output, strategy="tool", retries=0, validators=None, provider=None, spec=None, tools=()
    )
    text = json.dumps(GOOD)
    assert _output.partial_output(plan, text[: text.index("21.5") + 1]) is None  # 2.0: raises
    assert _output.partial_output(plan, text) == Weather.model_validate(GOOD)
