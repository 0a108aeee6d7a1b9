"""``OpenRequest.replay_from``: a turn retried after its first attempt died mid-turn.

The dead attempt may have sent its input and seen part of the turn. Reattached with
``replay_from`` (the last event the caller holds), the next turn yields every event after
it — from the history, then the live stream — and sends nothing it finds already sent:
no second prompt, no second tool result on the wire (the emulator's log).
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

import managedloop as ml
from managedloop.hosts import OpenRequest, ToolResults, UserMessage
from managedloop.results import ToolResult, TurnResult
from managedloop.testing import ClaudeEmulator, ClaudeFaults

from .conftest import WEATHER, make_provider, wire_messages, wire_results

pytestmark = pytest.mark.anyio


def _req(**kw: Any) -> OpenRequest:
    return OpenRequest(spec=WEATHER, agent=WEATHER, tools=WEATHER.tool_definitions(), **kw)


async def _first_event_then_die(conn: Any, input: Any) -> list[Any]:
    """An attempt that sends ``input``, sees one event, and dies (its worker killed)."""
    stream = conn.turn(input)
    got = [await stream.__anext__()]
    await stream.aclose()
    await conn.aclose()
    return got


async def _whole_turn(conn: Any, input: Any) -> TurnResult:
    try:
        items = [i async for i in conn.turn(input)]
    finally:
        await conn.aclose()
    result = items[-1]
    assert isinstance(result, TurnResult)
    return result


async def test_a_retried_kickoff_sends_no_second_prompt_and_loses_no_tool_use() -> None:
    with ClaudeEmulator() as emu:
        emu.faults = ClaudeFaults(event_delay=0.01)
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            handle = await ml.provision(make_provider(c), WEATHER)
            provider = make_provider(c, agent=handle, environment=handle)
            first = await provider.open(_req())
            sid = first.session_id
            await _first_event_then_die(first, UserMessage("Paris?"))
            retry = await provider.open(_req(session_id=sid, replay_from=""))
            turn = await _whole_turn(retry, UserMessage("Paris?"))
            assert wire_messages(emu, sid) == ["Paris?"]  # sent once, by the dead attempt
            assert turn.terminal == ml.Terminal.REQUIRES_ACTION
            assert [u.name for u in turn.custom_tool_uses] == ["get_weather"]
            # Every event of the turn, each once, in history order.
            ids = [e["id"] for e in turn.events]
            assert len(ids) == len(set(ids))
            assert ids == [e["id"] for e in emu.events(sid)][: len(ids)]


async def test_a_retried_result_turn_sends_no_second_result() -> None:
    with ClaudeEmulator() as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            handle = await ml.provision(make_provider(c), WEATHER)
            provider = make_provider(c, agent=handle, environment=handle)
            conn = await provider.open(_req())
            sid = conn.session_id
            first = await _whole_turn(conn, UserMessage("Paris?"))
            [use] = first.custom_tool_uses
            assert use.id is not None
            answer = ToolResults(
                tool_uses=[use], results=[ToolResult(tool_use_id=use.id, text="Sunny")]
            )
            last = first.events[-1]["id"]
            emu.faults = ClaudeFaults(event_delay=0.01)
            dead = await provider.open(_req(session_id=sid))
            await _first_event_then_die(dead, answer)
            retry = await provider.open(_req(session_id=sid, replay_from=last))
            turn = await _whole_turn(retry, answer)
    assert wire_results(emu, sid) == [use.id]  # once, by the dead attempt
    assert turn.terminal == ml.Terminal.END_TURN
    assert turn.events[0]["type"] == "user.custom_tool_result"  # the turn from its start
    assert all(e["id"] != last for e in turn.events)


async def test_an_unknown_replay_point_is_a_named_error() -> None:
    with ClaudeEmulator() as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            handle = await ml.provision(make_provider(c), WEATHER)
            provider = make_provider(c, agent=handle, environment=handle)
            conn = await provider.open(_req())
            sid = conn.session_id
            await conn.aclose()
            with pytest.raises(ml.InvalidOptionsError) as info:
                await provider.open(_req(session_id=sid, replay_from="sevt_nope"))
    assert info.value.context["option"] == "replay_from"
