"""Scripted fake hosts for loop tests that need no server.

A fake turn is a list of raw events: ``{"type": "tool", "id", "name", "input"}`` for a
custom tool use, ``{"type": "text", "text"}`` for assistant text and
``{"type": "stop", "terminal": ...}`` for the boundary (plus ``TextDelta``, ``RESTART`` or
an exception to raise). Each turn reports usage 1/1. ``turn()`` yields the items, a text
delta after each text event, and ends with ``normalize`` of the raw events since the last
``RESTART`` (a test may override ``normalize``).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, ClassVar

import anyio

from managedloop.hosts import (
    RESTART,
    ConnectionBase,
    OpenRequest,
    TextDelta,
    TurnInput,
)
from managedloop.results import Terminal, ToolUse, TurnResult, Usage

_ids = itertools.count(1)


def tool(name: str, input: dict[str, Any] | None = None, id: str | None = None) -> dict[str, Any]:
    return {"type": "tool", "id": id or f"t{next(_ids)}", "name": name, "input": input or {}}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def stop(terminal: str = "end_turn") -> dict[str, Any]:
    return {"type": "stop", "terminal": terminal}


Turn = Sequence[Any] | Callable[[TurnInput], Sequence[Any]]


class FakeConnection(ConnectionBase):
    def __init__(self, host: FakeHost, request: OpenRequest) -> None:
        super().__init__()
        self.host = host
        self.request = request
        self.session_id = request.session_id or "fake_session"
        self.resumed = request.session_id is not None
        self.pending_tool_uses = list(host.pending)
        self.closed = False

    async def turn(self, input: TurnInput) -> AsyncIterator[Any]:
        self.host.inputs.append(input)
        if self.host.block:
            await anyio.sleep_forever()
        step = self.host.turns.pop(0)
        events = step(input) if callable(step) else step
        kept: list[Any] = []
        for ev in events:
            if isinstance(ev, BaseException):
                raise ev
            if ev is RESTART:
                kept = []
            elif not isinstance(ev, TextDelta):
                kept.append(ev)
            yield ev
            if isinstance(ev, dict) and ev.get("type") == "text":
                yield TextDelta(str(ev.get("text")))
        yield self.normalize(kept)

    def normalize(self, events: Sequence[Any]) -> TurnResult:
        uses = [
            ToolUse(id=e["id"], name=e["name"], input=e["input"])
            for e in events
            if isinstance(e, dict) and e.get("type") == "tool"
        ]
        stops = [e for e in events if isinstance(e, dict) and e.get("type") == "stop"]
        terminal = Terminal(stops[-1]["terminal"]) if stops else Terminal.TERMINATED
        texts = [e["text"] for e in events if isinstance(e, dict) and e.get("type") == "text"]
        return TurnResult(
            terminal=terminal,
            stop_reason=stops[-1]["terminal"] if stops else None,
            text="".join(texts),
            custom_tool_uses=uses,
            usage=Usage(input_tokens=1, output_tokens=1, raw=[{"in": 1, "out": 1}]),
            events=list(events),
        )

    def transcript(self) -> list[dict[str, Any]] | None:
        return self.host.transcript_value

    async def aclose(self) -> None:
        self.closed = True
        self.host.closed += 1


class FakeHost:
    """A request/response fake: one scripted turn per ``turn()`` call."""

    name: ClassVar[str] = "fake"
    supports_outcomes: ClassVar[bool] = False
    supports_raw_events: ClassVar[bool] = False

    def __init__(
        self,
        turns: Sequence[Turn] = (),
        *,
        pending: Sequence[ToolUse] = (),
        block: bool = False,
        transcript: list[dict[str, Any]] | None = None,
        open_error: Exception | None = None,
    ) -> None:
        self.turns = list(turns)
        self.pending = list(pending)
        self.block = block
        self.transcript_value = transcript
        self.open_error = open_error
        self.inputs: list[TurnInput] = []
        self.connections: list[FakeConnection] = []
        self.closed = 0

    async def open(self, request: OpenRequest) -> FakeConnection:
        if self.open_error is not None:
            raise self.open_error
        conn = FakeConnection(self, request)
        self.connections.append(conn)
        return conn


class OutcomeHost(FakeHost):
    supports_outcomes: ClassVar[bool] = True
    supports_raw_events: ClassVar[bool] = True


__all__ = ["RESTART", "FakeHost", "OutcomeHost", "TextDelta", "stop", "text", "tool"]
