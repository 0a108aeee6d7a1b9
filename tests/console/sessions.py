"""Sessions for the console tests: a bank agent on the Local host's scripted chat model."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio

import managedloop as ml
from managedloop.providers import Local
from managedloop.testing import ModelRequest, Reply, ScriptedChatModel, ToolCall, say

RAN: list[str] = []
GO = threading.Event()
XSS = "<script>alert(1)</script>"
IMG = '<img src=x onerror="alert(2)">'


@ml.tool(requires_approval=True)
def transfer(amount: int) -> str:
    """Move money (a person decides)."""
    RAN.append(f"transfer {amount}")
    return f"moved {amount}"


@ml.tool
def balance() -> str:
    """The balance: a hostile tool result."""
    RAN.append("balance")
    return XSS


@ml.tool
def wait_for_go() -> str:
    """Blocks until the test says go (so a page can watch the session live)."""
    assert GO.wait(60), "the test never said go"
    RAN.append("wait_for_go")
    return IMG


AGENT = ml.AgentSpec(name="bank", tools=[transfer, balance, wait_for_go])


def answer(request: ModelRequest) -> Reply:
    return say("; ".join(f"{r.tool_use_id}={r.text}" for r in request.tool_results))


def parking_model() -> ScriptedChatModel:
    calls = [ToolCall(name="transfer", input={"amount": 5}, id="call_t")]
    return ScriptedChatModel([Reply(tool_calls=calls), answer])


def in_thread(fn: Callable[[], Any]) -> Any:
    """``anyio.run(fn)`` in a thread of its own (Playwright's sync API owns this one)."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(("ok", anyio.run(fn)))
        except BaseException as exc:
            box.append(("err", exc))

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(120)
    kind, value = box[0]
    if kind == "err":
        raise value
    return value


def park(record: Any, model: ScriptedChatModel) -> ml.SessionResult:
    provider = Local(model="m", chat=model)

    async def go() -> ml.SessionResult:
        return await ml.run(provider, agent=AGENT, prompt="pay bob 5", record=record)

    result: ml.SessionResult = in_thread(go)
    assert result.reason == "approval_required"
    return result
