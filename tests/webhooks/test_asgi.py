"""The ASGI face on its own: methods, sizes, lifespan, and the synchronous mode's answers
(200 with the outcome, 500 so the host retries), with plain ASGI calls."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest
from tests.webhooks.conftest import (
    Calls,
    deployment,
    make_provider,
    parked,
    run_deployment,
    tool_uses,
    weather_spec,
)
from tests.webhooks.test_end_to_end import _clock, _signed

import managedloop.webhooks as mw
from managedloop.stores import MemoryStore
from managedloop.testing import ClaudeEmulator

pytestmark = pytest.mark.anyio


async def _call(app: Any, scope: dict[str, Any], chunks: list[bytes]) -> tuple[int, Any]:
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, json.loads(body) if body else None


def _scope(method: str = "POST", headers: dict[str, str] | None = None) -> dict[str, Any]:
    pairs = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    return {"type": "http", "method": method, "path": "/", "headers": pairs}


async def test_the_http_edges() -> None:
    hooks = mw.app(lambda: None, agent="agent_1", secret=b"k", clock=_clock)  # type: ignore[arg-type,return-value]
    assert (await _call(hooks, _scope("GET"), [b""]))[0] == 405
    big = [b"x" * (mw.MAX_BODY // 2)] * 3
    assert (await _call(hooks, _scope(), big))[0] == 413
    assert await _call(hooks, _scope(headers={}), [b"{}"]) == (400, {"error": "malformed_webhook"})
    body, headers = _signed("m1", "sesn_1", "session.requires_action", b"other key")
    assert await _call(hooks, _scope(headers=headers), [body]) == (401, {"error": "bad_signature"})
    body, headers = _signed("m2", "drun_1", "deployment_run.started", b"k")
    status, answer = await _call(hooks, _scope(headers=headers), [body[:5], body[5:]])
    assert (status, answer["status"]) == (200, "ignored")

    lifespan = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return lifespan.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await hooks({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    await hooks({"type": "websocket"}, receive, send)  # not served: returns at once


async def test_synchronous_mode_answers_after_the_work(
    emu: ClaudeEmulator, client: anthropic.AsyncAnthropic
) -> None:
    calls = Calls()
    dep_id, spec = await deployment(client, weather_spec(calls))
    hooks = mw.app(
        make_provider(client),
        agent=spec,
        secret=b"k",
        store=MemoryStore(),
        clock=_clock,
        background=False,
        run_options={"max_turns": 5},
    )
    sid = await run_deployment(client, dep_id)
    await parked(emu, sid)
    emu.faults.fault_path, emu.faults.fault_method = "/events", "POST"
    emu.faults.server_errors = 1000
    body, headers = _signed("m3", sid, "session.requires_action", b"k")
    status, answer = await _call(hooks, _scope(headers=headers), [body])
    assert (status, answer["webhook_id"]) == (500, "m3")  # the host will redeliver
    emu.faults.server_errors = 0
    status, answer = await _call(hooks, _scope(headers=headers), [body])  # its retry
    assert (status, answer["status"], answer["terminal"]) == (200, "completed", "end_turn")
    assert calls.log == ["Paris"]
    assert len(tool_uses(emu, sid)) == 1
