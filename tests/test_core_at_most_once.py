"""A tool runs at most once per tool-use id per session, on every host (issue 7: a host that
re-delivered a call after a reconnect, or a server that reused an id, ran the tool again).

The driver keeps every result it computed in the session, by tool-use id, and answers a
repeated id with the stored result; a call with no id always runs; the store belongs to one
session and never reaches another; ``custom_tool_uses`` lists exactly the calls that ran.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest

import managedloop as ml
from fakes import FakeConnection, FakeHost, stop, text
from managedloop.hosts import OpenRequest, ToolResults
from managedloop.results import ToolUse, TurnResult

pytestmark = pytest.mark.anyio

_event_ids = itertools.count(1)


def tool(name: str, input: dict[str, Any] | None = None, id: str | None = None) -> dict[str, Any]:
    """A tool-use event with its own event id: the driver drops a raw event whose *event*
    id it has seen, so a re-delivered call must arrive as a new event with an old use id."""
    return {
        "type": "tool",
        "id": f"ev{next(_event_ids)}",
        "use_id": id,
        "name": name,
        "input": input or {},
    }


class UseIdConnection(FakeConnection):
    def normalize(self, events: Sequence[Any]) -> TurnResult:
        turn = super().normalize(events)
        uses = [e for e in events if isinstance(e, dict) and e.get("type") == "tool"]
        ids = [ToolUse(id=e["use_id"], name=e["name"], input=e["input"]) for e in uses]
        return TurnResult(
            terminal=turn.terminal,
            stop_reason=turn.stop_reason,
            text=turn.text,
            custom_tool_uses=ids,
            usage=turn.usage,
            events=turn.events,
        )


class Host(FakeHost):
    async def open(self, request: OpenRequest) -> FakeConnection:
        conn = UseIdConnection(self, request)
        self.connections.append(conn)
        return conn


class Counter:
    """A handler counting runs per tool name; ``boom`` raises."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, Any]]] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
        self.runs.append((name, input))
        if name == "boom":
            raise ValueError(f"boom #{len(self.runs)}")
        return f"{name} run #{len(self.runs)}"


AGENT = ml.AgentSpec(name="a")


def results_sent(host: FakeHost) -> list[list[tuple[str, str]]]:
    return [
        [(r.tool_use_id, r.text) for r in item.results]
        for item in host.inputs
        if isinstance(item, ToolResults)
    ]


async def test_a_redelivered_call_gets_its_stored_result_and_does_not_run_again() -> None:
    host = Host(
        [
            [tool("add", {"a": 1}, id="u1"), stop("requires_action")],
            # The host lost our result and asks again (e.g. after a reconnect).
            [tool("add", {"a": 1}, id="u1"), stop("requires_action")],
            [text("done"), stop()],
        ]
    )
    handler = Counter()
    result = await ml.run(host, agent=AGENT, handler=handler)
    assert handler.runs == [("add", {"a": 1})]
    assert results_sent(host) == [[("u1", "add run #1")], [("u1", "add run #1")]]
    assert [u.id for u in result.custom_tool_uses] == ["u1"]
    assert result.text == "done"


async def test_an_error_result_is_stored_too() -> None:
    host = Host(
        [
            [tool("boom", id="b1"), stop("requires_action")],
            [tool("boom", id="b1"), stop("requires_action")],
            [stop()],
        ]
    )
    handler = Counter()
    await ml.run(host, agent=AGENT, handler=handler)
    assert len(handler.runs) == 1
    [[first], [again]] = [item.results for item in host.inputs if isinstance(item, ToolResults)]
    assert first == again
    assert first.is_error


async def test_one_id_twice_in_one_turn_runs_once_and_answers_both() -> None:
    host = Host(
        [
            [
                tool("add", id="dup"),
                tool("mul", id="dup"),
                tool("sub", id="s"),
                stop("requires_action"),
            ],
            [stop()],
        ]
    )
    handler = Counter()
    result = await ml.run(host, agent=AGENT, handler=handler)
    assert sorted(name for name, _ in handler.runs) == ["add", "sub"]
    [sent] = results_sent(host)
    assert [uid for uid, _ in sent] == ["dup", "dup", "s"]
    # mul is another call under a used id: it never gets add's result, and never runs.
    assert sent[0] == ("dup", "add run #1")
    assert "already used in this session for a different call" in sent[1][1]
    assert [u.id for u in result.custom_tool_uses] == ["dup", "s"]


async def test_calls_without_an_id_always_run() -> None:
    host = Host(
        [
            [tool("add"), tool("add"), stop("requires_action")],
            [tool("add"), stop("requires_action")],
            [stop()],
        ]
    )
    handler = Counter()
    result = await ml.run(host, agent=AGENT, handler=handler)
    assert len(handler.runs) == 3
    assert len(result.custom_tool_uses) == 3


async def test_the_store_never_reaches_another_session() -> None:
    handler = Counter()
    for _ in range(2):
        host = Host([[tool("add", id="same"), stop("requires_action")], [stop()]])
        await ml.run(host, agent=AGENT, handler=handler)
    assert len(handler.runs) == 2  # one run per session, same id in both


async def test_a_live_session_keeps_the_store_across_requests() -> None:
    host = Host(
        [
            [tool("add", id="u1"), stop("requires_action")],
            [text("first"), stop()],
            # Second request: the host re-delivers the old call before answering.
            [tool("add", id="u1"), tool("mul", id="u2"), stop("requires_action")],
            [text("second"), stop()],
        ]
    )
    handler = Counter()
    async with ml.start(host, agent=AGENT, handler=handler, prompt="one") as session:
        first = await session.result()
        await session.send("two")
        second = await session.result()
    assert [name for name, _ in handler.runs] == ["add", "mul"]
    assert [u.id for u in first.custom_tool_uses] == ["u1"]
    # u1 ran in the first request: re-sending its result is not a second run.
    assert [u.id for u in second.custom_tool_uses] == ["u2"]
    assert results_sent(host)[1] == [("u1", "add run #1"), ("u2", "mul run #2")]


async def test_a_resent_call_is_left_out_of_a_partial_result_too() -> None:
    err = ml.TransportError("dropped", code="stream_dropped")
    host = Host(
        [
            [tool("add", id="u1"), stop("requires_action")],
            [text("first"), stop()],
            [tool("add", id="u1"), stop("requires_action")],
            [err],
        ]
    )
    handler = Counter()
    async with ml.start(host, agent=AGENT, handler=handler, prompt="one") as session:
        await session.result()
        await session.send("two")
        with pytest.raises(ml.TransportError) as info:
            await session.result()
    partial = info.value.partial_result
    assert partial is not None
    assert partial.custom_tool_uses == []
    assert len(handler.runs) == 1


async def test_an_id_reused_for_another_call_is_never_answered_with_the_old_result() -> None:
    # Found by the hostile review: a server reusing an id for a *different* call (other
    # input) got the first call's result, handing the model wrong data.
    host = Host(
        [
            [tool("weather", {"city": "A"}, id="t1"), stop("requires_action")],
            [tool("weather", {"city": "B"}, id="t1"), stop("requires_action")],
            [tool("weather", {"city": "A"}, id="t1"), stop("requires_action")],
            [stop()],
        ]
    )
    handler = Counter()
    result = await ml.run(host, agent=AGENT, handler=handler)
    assert handler.runs == [("weather", {"city": "A"})]  # at most once per id, still
    first, second, third = results_sent(host)
    assert first == [("t1", "weather run #1")]
    assert second[0][1] != "weather run #1"
    assert "was not run" in second[0][1]
    assert third == first  # the same call again: its stored result
    assert [u.input for u in result.custom_tool_uses] == [{"city": "A"}]
