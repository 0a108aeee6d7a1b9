"""``session.interrupt()`` on every host.

* Local: the in-flight model call or tool calls are cancelled; the request ends
  ``terminated`` / ``interrupted``; every ``tool_call`` in the transcript is answered, so
  the session takes a follow-up message (the next model call sees a valid history).
* AgentCore: the in-flight invoke stream is closed (the emulator sees its client go
  away); the request ends ``terminated`` / ``interrupted``; a follow-up works.
* Claude: ``user.interrupt`` goes to the host; the host ends the turn.

No wall-clock margins: every wait is on an event the code under test sets.
"""

from __future__ import annotations

import math
from typing import Any

import anthropic
import anyio
import pytest

import managedloop as ml
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.providers.local import ChatRequest, ChatResponse
from managedloop.testing import (
    AgentCoreEmulator,
    AgentCoreFaults,
    ClaudeEmulator,
    Reply,
    ScriptedChatModel,
    ToolCall,
    call,
    say,
)

pytestmark = pytest.mark.anyio

STARTED = anyio.Event()  # replaced per test


@ml.tool
async def slow(q: str) -> str:
    """Never finishes by itself."""
    STARTED.set()
    await anyio.sleep_forever()
    return "never"


@ml.tool
def quick(q: str) -> str:
    """Answers at once."""
    return f"quick {q}"


AGENT = ml.AgentSpec(name="interruptible", tools=[slow, quick])


@pytest.fixture(autouse=True)
def _fresh_event() -> None:
    global STARTED
    STARTED = anyio.Event()


class GatedChat:
    """A scripted chat function whose ``hold``-th call blocks until cancelled."""

    def __init__(self, script: list[Any], hold: int | None = None) -> None:
        self.model = ScriptedChatModel(script)
        self.hold = hold
        self.calls = 0
        self.entered = anyio.Event()
        self.cancelled = False
        self.seen: list[list[dict[str, Any]]] = []

    async def __call__(self, request: ChatRequest) -> ChatResponse:
        index = self.calls
        self.calls += 1
        self.seen.append([dict(m) for m in request.messages])
        if index == self.hold:
            self.entered.set()
            try:
                await anyio.sleep_forever()
            finally:
                self.cancelled = True
        return await self.model(request)


def unanswered(history: list[dict[str, Any]]) -> list[str]:
    """Tool-call ids of the history with no tool message answering them."""
    asked = [
        c["id"] for m in history if m.get("role") == "assistant" for c in m.get("tool_calls") or []
    ]
    answered = {m["tool_call_id"] for m in history if m.get("role") == "tool"}
    return [i for i in asked if i not in answered]


async def test_local_interrupt_cancels_tool_calls_and_answers_them() -> None:
    chat = GatedChat(
        [
            Reply(
                tool_calls=[
                    ToolCall(name="slow", input={"q": "a"}, id="s1"),
                    ToolCall(name="quick", input={"q": "b"}, id="q1"),
                ]
            ),
            say("after the interrupt"),
        ]
    )
    async with ml.start(Local(model="m", chat=chat), agent=AGENT, prompt="go") as session:
        await STARTED.wait()  # the slow tool is running
        await session.interrupt()
        stopped = await session.result()
        assert stopped.terminal is ml.Terminal.TERMINATED
        assert stopped.reason == "interrupted"
        assert stopped.transcript is not None
        assert unanswered(stopped.transcript) == []
        answers = {
            m["tool_call_id"]: m["content"] for m in stopped.transcript if m["role"] == "tool"
        }
        assert set(answers) == {"s1", "q1"}
        assert all('"isError": true' in text for text in answers.values())
        await session.send("carry on")
        after = await session.result()
    assert after.terminal is ml.Terminal.END_TURN
    assert after.text == "after the interrupt"
    assert unanswered(chat.seen[-1]) == []  # the model call after the interrupt was valid


async def test_local_interrupt_cancels_the_model_call() -> None:
    # The scripted model plays the step numbered by the assistant messages it is sent: the
    # interrupted call adds none, so the call after it plays step 1 again.
    chat = GatedChat([say("first"), say("third")], hold=1)
    async with ml.start(Local(model="m", chat=chat), agent=AGENT, prompt="one") as session:
        assert (await session.result()).text == "first"
        await session.send("two")
        await chat.entered.wait()  # the second model call is in flight
        await session.interrupt()
        stopped = await session.result()
        assert chat.cancelled
        assert (stopped.terminal, stopped.reason) == (ml.Terminal.TERMINATED, "interrupted")
        assert stopped.transcript is not None
        assert stopped.transcript[-1] == {"role": "user", "content": "two"}
        await session.send("three")
        after = await session.result()
    assert after.text == "third"
    assert chat.calls == 3


async def test_local_interrupt_with_nothing_in_flight_does_nothing() -> None:
    chat = GatedChat([say("done")])
    async with ml.start(Local(model="m", chat=chat), agent=AGENT, prompt="go") as session:
        assert (await session.result()).text == "done"
        await session.interrupt()  # idle: nothing to stop, no error
    assert chat.calls == 1


async def test_agentcore_interrupt_closes_the_stream() -> None:
    faults = AgentCoreFaults(stall_at=2, stall_seconds=math.inf)  # the first invoke only
    script = [say("never finished"), say("after the interrupt")]
    async with AgentCoreEmulator(script, faults=faults) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        )  # type: ignore[arg-type]
        with provider:
            async with ml.start(provider, agent=AGENT, prompt="go") as session:
                async for _event in session.events():  # frames 0-1 arrived: the turn streams
                    break
                await session.interrupt()
                stopped = await session.result()
                assert (stopped.terminal, stopped.reason) == (
                    ml.Terminal.TERMINATED,
                    "interrupted",
                )
                while emu.disconnects == 0:  # the emulator saw its client go away
                    await anyio.sleep(0.01)
                await session.send("again")
                after = await session.result()
    assert after.terminal is ml.Terminal.END_TURN
    assert after.text == "after the interrupt"
    assert emu.disconnects == 1


async def test_agentcore_interrupt_during_tool_calls() -> None:
    script = [call("slow", {"q": "x"}), say("after")]
    async with AgentCoreEmulator(script) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        )  # type: ignore[arg-type]
        with provider:
            async with ml.start(provider, agent=AGENT, prompt="go") as session:
                await STARTED.wait()
                await session.interrupt()
                stopped = await session.result()
    assert (stopped.terminal, stopped.reason) == (ml.Terminal.TERMINATED, "interrupted")
    assert [u.name for u in stopped.custom_tool_uses] == ["slow"]
    assert len(emu.operations("InvokeHarness")) == 1  # no result was sent for the cancelled call


async def test_claude_interrupt_asks_the_host() -> None:
    with ClaudeEmulator([call("slow", {"q": "x"}), say("unused")]) as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            base = ClaudeManagedAgents(client=client, reconnect_backoff=0.0)
            handle = await ml.provision(base, AGENT)
            provider = ClaudeManagedAgents(client=client, agent=handle, environment=handle)
            async with ml.start(provider, agent=AGENT, prompt="go") as session:
                await STARTED.wait()  # the session is parked on our tool call
                await session.interrupt()
                sent = [e["type"] for e in emu.sent_events()]
    assert sent == ["user.message", "user.interrupt"]
