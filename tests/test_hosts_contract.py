"""The host contract (``managedloop.hosts``): its invariants on every host, the loop's
checks of them, no silent loss for a host that reuses ids, and ``docs/hosts.md``'s echo
host, run from the page itself.

Invariants (numbered as in the ``managedloop.hosts`` docstring), per host:

==================================  =======  =======  =========
invariant                            Local    Claude   AgentCore
==================================  =======  =======  =========
1 one TurnResult, last               here     here     here
2 events = yielded since RESTART     here     here     here
2 each event once (across a drop)    --       here     --
3 RESTART before a retried attempt   here(0)  here(0)  here
4 text deltas, never recorded        here     here     here
5 one model call per turn            here     --       here
6 closing turn() tears it down       see below
7 tool-input deltas, never recorded  here     --       here
==================================  =======  =======  =========

``here(0)``: the host never yields RESTART (Local yields events only once a call has
succeeded; Claude recovers a drop inside the turn), checked under a retried fault. Claude
has no model-call count on the wire to compare with, and hands a custom tool's input over
whole (no tool-input deltas on its stream). Invariant 6 is pinned per host by
``test_run_timeout_tears_down_the_in_flight_request`` (tests/local/test_local_http.py),
``test_run_timeout_tears_down_and_keeps_the_partial_result`` (tests/claude/test_provider.py)
and ``test_a_run_timeout_closes_the_in_flight_stream`` (tests/agentcore/test_faults.py).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import anthropic
import pydantic
import pytest

import managedloop as ml
from managedloop import hosts
from managedloop.hosts import (
    RESTART,
    ConnectionBase,
    OpenRequest,
    TextDelta,
    ToolInputDelta,
    TurnInput,
    TurnItem,
    TurnResult,
    UserMessage,
)
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.testing import (
    AgentCoreEmulator,
    ChatEmulator,
    ClaudeEmulator,
    ClaudeFaults,
    call,
    say,
)
from managedloop.testing.agentcore import AgentCoreFaults
from managedloop.testing.chat import ChatFaults
from weather import get_weather

pytestmark = pytest.mark.anyio

DOC = Path(__file__).resolve().parents[1] / "docs" / "hosts.md"


AGENT = ml.AgentSpec(name="contract", system_prompt="Use tools.", tools=[get_weather])
SCRIPT = [call("get_weather", {"city": "Paris"}, text="Let me look."), say("Sunny in Paris.")]


# -- recording what a host yields ----------------------------------------------------------


class _Recorded:
    """A connection that records every item of every turn of the one it wraps."""

    def __init__(self, inner: Any, turns: list[list[Any]]) -> None:
        self._inner = inner
        self._turns = turns

    @property
    def session_id(self) -> str | None:
        return self._inner.session_id  # type: ignore[no-any-return]

    @property
    def resumed(self) -> bool:
        return self._inner.resumed  # type: ignore[no-any-return]

    @property
    def pending_tool_uses(self) -> list[ml.ToolUse]:
        return self._inner.pending_tool_uses  # type: ignore[no-any-return]

    @pending_tool_uses.setter
    def pending_tool_uses(self, value: list[ml.ToolUse]) -> None:
        self._inner.pending_tool_uses = value

    async def turn(self, input: TurnInput) -> AsyncIterator[TurnItem]:
        items: list[Any] = []
        self._turns.append(items)
        async for item in self._inner.turn(input):
            items.append(item)
            yield item

    def transcript(self) -> Any:
        return self._inner.transcript()

    async def interrupt(self) -> None:
        await self._inner.interrupt()

    async def aclose(self) -> None:
        await self._inner.aclose()


class Recording:
    """A provider whose connections record their turns in ``turns``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.supports_outcomes = inner.supports_outcomes
        self.supports_raw_events = inner.supports_raw_events
        self.turns: list[list[Any]] = []

    async def open(self, request: OpenRequest) -> Any:
        return _Recorded(await self.inner.open(request), self.turns)


def check_turn(items: Sequence[Any]) -> TurnResult:
    """Invariants 1, 2, 4 and 7 on the items of one turn; returns its result."""
    results = [i for i in items if isinstance(i, TurnResult)]
    assert len(results) == 1, "exactly one TurnResult per turn"
    assert items[-1] is results[0], "the TurnResult is the last item"
    result = results[0]
    since: list[Any] = []
    deltas: list[str] = []
    inputs: dict[str, list[ToolInputDelta]] = {}  # tool-input pieces since RESTART, by call
    for item in items[:-1]:
        if item is RESTART:
            since, inputs = [], {}
        elif isinstance(item, TextDelta):
            deltas.append(item.text)
        elif isinstance(item, ToolInputDelta):
            inputs.setdefault(item.id, []).append(item)
        else:
            since.append(item)
    assert len(result.events) == len(since)
    assert all(a is b for a, b in zip(result.events, since, strict=True)), "verbatim, in order"
    for text in deltas:
        assert text in result.text or not text  # a delta streams the turn's own text
    if result.text:
        assert deltas, "a turn with text streams it as TextDelta items"
    calls = [(u.name, u.input) for u in result.custom_tool_uses]
    for pieces in inputs.values():  # each call's pieces concatenate to one call's input
        assert len({p.name for p in pieces}) == 1
        assert (pieces[0].name, json.loads("".join(p.partial_json for p in pieces))) in calls
    return result


def check_run(recording: Recording, result: ml.SessionResult) -> None:
    turns = [check_turn(items) for items in recording.turns]
    assert result.turns == len(turns)
    recorded = [e for t in turns for e in t.events]
    assert result.events == recorded  # the loop kept every event, added none
    assert all(not isinstance(e, TextDelta | ToolInputDelta) for e in result.events)


# -- the three hosts -----------------------------------------------------------------------


class Forecast(pydantic.BaseModel):
    city: str
    sky: str


SCRIPT_OUT = [
    call("get_weather", {"city": "Paris"}),
    call("final_result", {"city": "Paris", "sky": "sunny"}),
]


def check_pieces(recording: Recording) -> None:
    """Invariant 7 where the loop reads the output tool's input: pieces of it, and (as
    ``OpenRequest.tool_input_deltas`` lets the host) of no other tool."""
    pieces = [i for t in recording.turns for i in t if isinstance(i, ToolInputDelta)]
    assert len(pieces) > 1
    assert {p.name for p in pieces} == {"final_result"}


def test_local_keeps_the_contract_across_a_retried_500() -> None:
    with ChatEmulator(SCRIPT, faults=ChatFaults(statuses=(500,), retry_after="0")) as emu:
        recording = Recording(Local(model="m", base_url=emu.base_url, api_key=emu.api_key))
        result = ml.run_sync(recording, agent=AGENT, prompt="Weather?")
        calls = len(emu.requests)
    check_run(recording, result)
    assert result.text == "Sunny in Paris."
    assert not any(i is RESTART for t in recording.turns for i in t)  # never needed
    assert calls == result.turns  # one model call per turn (the 500 reached no model)


def test_local_streamed_turns_keep_the_contract() -> None:
    with ChatEmulator(SCRIPT, chunk_size=4) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True)
        recording = Recording(provider)
        result = ml.run_sync(recording, agent=AGENT, prompt="Weather?")
    check_run(recording, result)
    last = recording.turns[-1]
    assert "".join(i.text for i in last if isinstance(i, TextDelta)) == "Sunny in Paris."
    assert not any(isinstance(i, ToolInputDelta) for t in recording.turns for i in t)


def test_local_streams_the_output_tools_input_within_the_contract() -> None:
    with ChatEmulator(SCRIPT_OUT, chunk_size=4) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True)
        recording = Recording(provider)
        result = ml.run_sync(recording, agent=AGENT, prompt="Weather?", output=Forecast)
    check_run(recording, result)
    check_pieces(recording)
    assert result.output == Forecast(city="Paris", sky="sunny")


async def test_claude_keeps_the_contract_and_yields_each_event_once_across_a_drop() -> None:
    with ClaudeEmulator() as emu:
        emu.agent.script = list(SCRIPT)
        emu.faults = ClaudeFaults(drop_stream_after=(3,))
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            bare = ClaudeManagedAgents(client=client, reconnect_backoff=0.0)
            handle = await ml.provision(bare, AGENT)
            provider = ClaudeManagedAgents(
                client=client, agent=handle, environment=handle, reconnect_backoff=0.0
            )
            recording = Recording(provider)
            result = await ml.run(recording, agent=handle, prompt="Weather?", handler=_Tools())
        assert emu.faults.used_drops == {3}
    check_run(recording, result)
    ids = [e["id"] for e in result.events if isinstance(e.get("id"), str)]
    assert len(ids) == len(set(ids)), "the connection dropped the history's repeats itself"
    assert not any(i is RESTART for t in recording.turns for i in t)
    assert result.text == "Sunny in Paris."


async def test_agentcore_keeps_the_contract_and_restarts_a_retried_attempt() -> None:
    faults = AgentCoreFaults(truncate_after=3)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            retry_backoff=0.0,
            **emu.client_kwargs,  # type: ignore[arg-type]
        )
        with provider:
            recording = Recording(provider)
            result = await ml.run(recording, agent=AGENT, prompt="Weather?")
        invokes = len(emu.operations("InvokeHarness"))
    check_run(recording, result)
    assert any(i is RESTART for i in recording.turns[0])  # the truncated attempt
    assert not any(isinstance(i, ToolInputDelta) for t in recording.turns for i in t)
    assert invokes == result.turns + 1  # one model call per turn (+ the truncated one)
    assert result.text == "Sunny in Paris."


async def test_agentcore_streams_the_output_tools_input_within_the_contract() -> None:
    # the final_result invoke ends mid-input: the retry's pieces start again
    faults = AgentCoreFaults(truncate_after=5, skip=1)
    async with AgentCoreEmulator(SCRIPT_OUT, faults=faults, tool_input_chunk=4) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            retry_backoff=0.0,
            **emu.client_kwargs,  # type: ignore[arg-type]
        )
        with provider:
            recording = Recording(provider)
            result = await ml.run(recording, agent=AGENT, prompt="Weather?", output=Forecast)
    check_run(recording, result)
    check_pieces(recording)
    restart = recording.turns[1].index(RESTART)
    assert any(isinstance(i, ToolInputDelta) for i in recording.turns[1][:restart])
    assert result.output == Forecast(city="Paris", sky="sunny")


class _Tools:
    def handle_tool_call(self, name: str, input: dict[str, Any], info: ml.SessionInfo) -> str:
        return get_weather(**input)


# -- no silent loss: a host reusing ids ----------------------------------------------------


class _IdReuser(ConnectionBase):
    """Every event is ``{"id": "e1"}`` (the first use's id, reused), in every request."""

    async def turn(self, input: TurnInput) -> AsyncIterator[TurnItem]:
        assert isinstance(input, UserMessage)
        event = {"type": "say", "id": "e1", "text": input.text}
        yield event
        yield TextDelta(input.text)
        yield TurnResult(
            terminal=ml.Terminal.END_TURN, stop_reason="end", text=input.text, events=[event]
        )


class IdReuser:
    name: ClassVar[str] = "reuser"
    supports_outcomes: ClassVar[bool] = False
    supports_raw_events: ClassVar[bool] = False

    async def open(self, request: OpenRequest) -> _IdReuser:
        return _IdReuser()


class _Events:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], info: ml.SessionInfo) -> str:
        raise AssertionError("no tools here")

    def handle_event(self, event: dict[str, Any], info: ml.SessionInfo) -> None:
        self.seen.append(event)


async def test_a_host_reusing_event_ids_across_requests_loses_nothing() -> None:
    """The old driver dropped every event whose "id" it had seen in the session: the
    follow-up came back with zero events and nothing delivered, without an error."""
    events = _Events()
    async with ml.start(IdReuser(), agent=AGENT, prompt="first", handler=events) as session:
        first = await session.result()
        await session.send("second")
        second = await session.result()
    assert (first.text, second.text) == ("first", "second")
    assert first.events == [{"type": "say", "id": "e1", "text": "first"}]
    assert second.events == [{"type": "say", "id": "e1", "text": "second"}]
    raw = [e for e in events.seen if e["type"] == "say"]
    assert [e["text"] for e in raw] == ["first", "second"]  # both delivered live


# -- the loop names a broken host ----------------------------------------------------------


class _Broken(ConnectionBase):
    def __init__(self, items: list[Any]) -> None:
        super().__init__()
        self.items = items

    async def turn(self, input: TurnInput) -> AsyncIterator[TurnItem]:
        for item in self.items:
            yield item


class Broken:
    name: ClassVar[str] = "broken"
    supports_outcomes: ClassVar[bool] = False
    supports_raw_events: ClassVar[bool] = False

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    async def open(self, request: OpenRequest) -> _Broken:
        return _Broken(self.items)


EVENT = {"type": "x"}
DONE = TurnResult(terminal=ml.Terminal.END_TURN, events=[EVENT])
DONE_TWICE = TurnResult(terminal=ml.Terminal.END_TURN, events=[EVENT, EVENT])  # kept the restart


@pytest.mark.parametrize(
    ("items", "says"),
    [
        ([EVENT], "without a TurnResult"),
        ([EVENT, DONE, {"type": "late"}], "after its TurnResult"),
        ([EVENT, DONE, DONE], "after its TurnResult"),
        ([EVENT, EVENT, DONE], "holds 1 events but turn() yielded 2"),
        ([EVENT, RESTART, EVENT, DONE_TWICE], "holds 2 events but turn() yielded 1 since"),
    ],
)
async def test_a_host_breaking_the_contract_fails_by_name_with_the_partial_result(
    items: list[Any], says: str
) -> None:
    with pytest.raises(ml.ProviderError) as info:
        await ml.run(Broken(items), agent=AGENT, prompt="go")
    assert info.value.code == "host_contract"
    assert says in str(info.value)
    assert info.value.partial_result is not None


# -- the public contract module and the page -----------------------------------------------


def test_the_contract_is_one_public_module() -> None:
    for name in hosts.__all__:
        assert getattr(hosts, name) is not None
    assert hosts.TurnResult is ml.TurnResult
    assert hosts.ToolUse is ml.ToolUse
    assert not hasattr(hosts.Connection, "normalize")  # the turn carries its result
    assert not hasattr(hosts.ConnectionBase, "text_delta")  # TextDelta is the one way
    assert "max_turns" not in hosts.OpenRequest.__dataclass_fields__  # loop policy


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_echo_host_on_the_page_imports_only_the_public_contract() -> None:
    imported: set[str] = set()
    for block in _blocks():
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom):
                imported.add(node.module or "")
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
    ours = {m for m in imported if m.split(".")[0] == "managedloop"}
    assert ours == {"managedloop", "managedloop.hosts"}
    assert imported - ours <= {"collections.abc", "typing", "anyio"}


def test_the_echo_host_on_the_page_runs_through_run_sync_and_a_live_session() -> None:
    blocks = _blocks()
    assert len(blocks) == 3  # the host, run_sync, a live session with a follow-up
    namespace: dict[str, Any] = {"__name__": "hosts_md"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # the page's own asserts run
    assert namespace["result"].text == "Sunny in Paris"
    assert isinstance(namespace["Echo"](), hosts.Provider)
