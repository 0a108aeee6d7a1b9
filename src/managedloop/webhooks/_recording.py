"""The recording provider and connection a delivery runs through: tool uses the ledger has
answered (or started) are not run again, and every result is written to the ledger before
it is sent. Built on the public host contract only."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from typing import Any

import anyio

from managedloop.hosts import Connection, OpenRequest, Provider, ToolResults, TurnInput, TurnItem
from managedloop.results import ToolResult, ToolUse, TurnResult
from managedloop.webhooks._ledger import Ledger

__all__ = ["Attached", "RecordingConnection"]

_INTERRUPTED = (
    "an earlier webhook delivery started this tool call and did not finish; managedloop "
    "does not run a tool twice for one tool use, so it was not run again"
)
_FROM_STORE = "answered from the webhook store (not run again)"


class Attached:
    """A provider that wraps another for one delivery: on attach, tool uses the store has
    already answered (or started) are marked so the loop does not run them; every result
    is written to the store before it is sent. Built on the public host contract only."""

    def __init__(self, inner: Provider, ledger: Ledger, session_id: str, webhook_id: str):
        self.inner = inner
        self.name = inner.name  # telemetry and errors name the real host
        self.supports_outcomes = False  # a resumed run sends results only
        self.supports_raw_events = False
        self.ledger = ledger
        self.session_id = session_id
        self.webhook_id = webhook_id
        self.overrides: dict[str, ToolResult] = {}
        """Answers from the store (or for an interrupted run), by tool-use id."""
        self.claimed: set[str] = set()
        self.recorded: set[str] = set()

    def __getattr__(self, name: str) -> Any:  # cache_identity, artifact_store, ...
        return getattr(self.inner, name)

    async def open(self, request: OpenRequest) -> Connection:
        conn = await self.inner.open(request)
        try:
            conn.pending_tool_uses = await self._mark(list(conn.pending_tool_uses))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await conn.aclose()
            raise
        return RecordingConnection(conn, self)

    async def _mark(self, uses: list[ToolUse]) -> list[ToolUse]:
        out = []
        for use in uses:
            record = await self.ledger.get(self.ledger.tool_key(self.session_id, use.id or ""))
            if record is not None and isinstance(record.get("result"), dict):
                self.overrides[use.id or ""] = ToolResult.from_dict(record["result"])
            elif record is not None:
                self.overrides[use.id or ""] = ToolResult(
                    tool_use_id=use.id or "", text=_INTERRUPTED, is_error=True
                )
            if use.id in self.overrides:
                # An input_error is answered without running the tool (handler.py); the
                # answer itself is replaced in RecordingConnection.turn.
                out.append(replace(use, input_error=_FROM_STORE))
            else:
                out.append(use)
        await self.claim(u for u in out if u.input_error is None)
        return out

    async def claim(self, uses: Iterable[ToolUse]) -> None:
        for use in uses:
            if not use.id or use.id in self.claimed or use.id in self.recorded:
                continue
            key = self.ledger.tool_key(self.session_id, use.id)
            if await self.ledger.claim(key, self.webhook_id):
                self.claimed.add(use.id)

    async def record(self, results: ToolResults) -> ToolResults:
        fixed = [self.overrides.get(r.tool_use_id, r) for r in results.results]
        for r in fixed:
            if r.tool_use_id and r.tool_use_id not in self.overrides:
                key = self.ledger.tool_key(self.session_id, r.tool_use_id)
                await self.ledger.put(key, {"result": r.to_dict(), "webhook_id": self.webhook_id})
                self.recorded.add(r.tool_use_id)
        return replace(results, results=fixed)

    async def release_unrun(self) -> None:
        """After a normal return: uses claimed but never run (the loop stopped first)."""
        for tid in self.claimed - self.recorded:
            await self.ledger.release(self.ledger.tool_key(self.session_id, tid), self.webhook_id)


class RecordingConnection:
    """The wrapped connection: results go through the store on their way out."""

    def __init__(self, inner: Connection, owner: Attached) -> None:
        self._inner = inner
        self._owner = owner
        self.pending_tool_uses: list[ToolUse] = inner.pending_tool_uses
        self.session_id: str | None = inner.session_id  # fixed once attached
        self.resumed: bool = inner.resumed

    def __getattr__(self, name: str) -> Any:  # normalize, recover, send, ...
        return getattr(self._inner, name)

    async def turn(self, input: TurnInput) -> AsyncIterator[TurnItem]:
        if isinstance(input, ToolResults):
            input = await self._owner.record(input)
        async for item in self._inner.turn(input):
            if isinstance(item, TurnResult) and item.custom_tool_uses:
                await self._owner.claim(item.custom_tool_uses)
            yield item

    def transcript(self) -> list[dict[str, Any]] | None:
        return self._inner.transcript()

    async def interrupt(self) -> None:
        await self._inner.interrupt()

    async def aclose(self) -> None:
        await self._inner.aclose()
