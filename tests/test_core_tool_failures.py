"""What a tool can throw at the loop, and what the model and the caller get back (issue 7):
an exception whose ``__str__`` raises, a tool's own ``CancelledError``, ``BaseException`` s,
lone surrogates in results and inputs, and inputs nested 100k deep."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from typing import Any

import anyio
import pytest

import managedloop as ml
from emitted import emitted
from fakes import FakeHost, stop, text, tool
from managedloop.handler import run_tool_calls
from managedloop.hosts import ToolResults
from managedloop.results import SessionInfo, ToolUse

pytestmark = pytest.mark.anyio


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message for you")


class Boom(BaseException):
    """A BaseException that is neither a cancellation nor KeyboardInterrupt/SystemExit."""


class Raising:
    """A handler: ``bad`` raises ``exc``, every other tool answers after a checkpoint."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.calls: list[str] = []

    async def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
        self.calls.append(name)
        if name == "bad":
            raise self.exc
        await anyio.sleep(0)
        return f"{name} ok"


def turn_host(*names: str) -> FakeHost:
    uses = [tool(name, id=f"{name}{i}") for i, name in enumerate(names)]
    return FakeHost([[*uses, stop("requires_action")], [text("done"), stop()]])


def sent_results(host: FakeHost) -> list[ml.ToolResult]:
    resumed = host.inputs[1]
    assert isinstance(resumed, ToolResults)
    return list(resumed.results)


# -- exceptions that cannot be printed ---------------------------------------------------


async def test_an_exception_whose_str_raises_is_an_error_result() -> None:
    host = turn_host("bad")
    result = await ml.run(host, agent=ml.AgentSpec(name="a"), handler=Raising(Unprintable()))
    assert result.text == "done"
    [sent] = sent_results(host)
    assert sent.is_error
    assert sent.text == "tool 'bad' raised Unprintable (its message could not be read)"


async def test_a_tool_error_and_a_result_that_cannot_be_printed() -> None:
    class Opaque:
        def __str__(self) -> str:
            raise ValueError("nope")

    @ml.tool
    def refuse() -> str:
        raise ml.ToolError(Opaque())  # type: ignore[arg-type]

    @ml.tool
    def odd() -> Any:
        return Opaque()

    toolset = ml.Toolset([refuse, odd])
    info = SessionInfo()
    [refused, strange] = await run_tool_calls(
        toolset, [ToolUse(id="a", name="refuse"), ToolUse(id="b", name="odd")], info
    )
    assert refused == ml.ToolResult(
        tool_use_id="a", text="ToolError (its message could not be read)", is_error=True
    )
    assert strange.is_error
    assert strange.text == "tool 'odd' raised ValueError: nope"


# -- pydantic's ValidationError from a handler of one's own ------------------------------
# pydantic loads with the first @tool, not with `import managedloop`, so the handler names
# ValidationError only once pydantic is loaded; a handler's own is still an input error.


async def test_a_handlers_own_validation_error_is_an_invalid_input_result() -> None:
    import pydantic

    class Point(pydantic.BaseModel):
        x: int

    class Validating:
        def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
            return str(Point.model_validate(input).x)

    [good, bad] = await run_tool_calls(
        Validating(),
        [ToolUse(id="a", name="pt", input={"x": 1}), ToolUse(id="b", name="pt", input={})],
        SessionInfo(),
    )
    assert good == ml.ToolResult(tool_use_id="a", text="1")
    assert bad.is_error
    assert bad.text == "invalid input for tool 'pt': x: Field required"


def test_tool_failures_without_pydantic_loaded_stay_error_results() -> None:
    # A fresh process that never defines a @tool: pydantic is not loaded, and a failing
    # handler call is the usual error result (and loads nothing to say so).
    code = """
import sys, anyio, managedloop as ml
from managedloop.handler import run_tool_calls
from managedloop.results import SessionInfo, ToolUse

class Failing:
    def handle_tool_call(self, name, input, info):
        raise ValueError("bad value")

async def main():
    return await run_tool_calls(Failing(), [ToolUse(id="a", name="f")], SessionInfo())

[result] = anyio.run(main)
print(result.is_error, result.text, "pydantic_core" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True tool 'f' raised ValueError: bad value False"


# -- a tool's own CancelledError, and genuine cancellation -------------------------------


@pytest.mark.parametrize("others", [0, 2])
async def test_a_tools_own_cancelled_error_is_just_an_error_result(others: int) -> None:
    host = turn_host("bad", *["good"] * others)
    handler = Raising(asyncio.CancelledError())
    result = await ml.run(host, agent=ml.AgentSpec(name="a"), handler=handler)
    assert result.text == "done"
    sent = sent_results(host)
    assert len(sent) == 1 + others  # no call of the turn lost its result
    assert sent[0].is_error
    assert sent[0].text == "tool 'bad' raised CancelledError: "
    assert [r.text for r in sent[1:]] == ["good ok"] * others


@pytest.mark.parametrize("calls", [1, 3])
async def test_a_run_timeout_still_cancels_the_tools(calls: int) -> None:
    class Forever:
        results: list[str] = []

        async def handle_tool_call(self, name: str, input: Any, info: Any) -> str:
            try:
                await anyio.sleep_forever()
            finally:
                self.results.append("cancelled")
            return "never"

    host = turn_host(*["wait"] * calls)
    handler = Forever()
    with pytest.raises(ml.SessionTimeoutError):
        await ml.run(host, agent=ml.AgentSpec(name="a"), handler=handler, timeout=0.05)
    assert handler.results == ["cancelled"] * calls
    assert len(host.inputs) == 1  # no results were sent: the cancellation was not swallowed


@pytest.mark.parametrize("calls", [1, 3])
async def test_cancelling_the_callers_task_cancels_the_run(calls: int) -> None:
    entered = anyio.Event()

    class Forever:
        async def handle_tool_call(self, name: str, input: Any, info: Any) -> str:
            entered.set()
            await anyio.sleep_forever()
            return "never"

    host = turn_host(*["wait"] * calls)
    task = asyncio.ensure_future(ml.run(host, agent=ml.AgentSpec(name="a"), handler=Forever()))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert len(host.inputs) == 1
    assert host.closed == 1


# -- BaseExceptions propagate as themselves ----------------------------------------------


@pytest.mark.parametrize("others", [0, 2])
async def test_a_base_exception_propagates_unwrapped(others: int) -> None:
    host = turn_host("bad", *["good"] * others)
    with pytest.raises(Boom) as info:
        await ml.run(host, agent=ml.AgentSpec(name="a"), handler=Raising(Boom()))
    assert type(info.value) is Boom  # never a BaseExceptionGroup
    assert host.closed == 1


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)])
@pytest.mark.parametrize("others", [0, 2])
def test_keyboard_interrupt_and_system_exit_propagate(
    exc: BaseException, others: int, caplog: pytest.LogCaptureFixture
) -> None:
    host = turn_host("bad", *["good"] * others)
    with caplog.at_level(logging.ERROR, logger="asyncio"), pytest.raises(type(exc)) as info:
        ml.run_sync(host, agent=ml.AgentSpec(name="a"), handler=Raising(exc))
    assert info.value is exc
    # asyncio logs a child task's BaseExceptionGroup it could not deliver: there is none.
    assert not [r for r in caplog.records if "ExceptionGroup" in r.getMessage()]
    assert host.closed == 1


async def test_a_live_session_raises_a_tools_base_exception_from_result() -> None:
    host = turn_host("bad", "good")
    with pytest.raises(Boom) as info:
        async with ml.start(
            host, agent=ml.AgentSpec(name="a"), handler=Raising(Boom()), prompt="go"
        ) as session:
            await session.result()
    assert type(info.value) is Boom
    assert host.closed == 1


async def test_a_live_session_raises_an_unseen_base_exception_on_exit() -> None:
    host = turn_host("bad")
    session = ml.start(host, agent=ml.AgentSpec(name="a"), handler=Raising(Boom()), prompt="go")

    async def watch_events_only() -> None:
        async with session:
            async for _ in session.events():  # ends when the session is over
                pass

    with pytest.raises(Boom) as info:
        await watch_events_only()
    assert type(info.value) is Boom
    with pytest.raises(ml.ManagedLoopError) as closed:
        await session.send("more")
    assert closed.value.code == "session_closed"


async def test_a_live_session_base_exception_seen_in_result_is_not_raised_twice() -> None:
    host = turn_host("bad")
    async with ml.start(
        host, agent=ml.AgentSpec(name="a"), handler=Raising(Boom()), prompt="go"
    ) as session:
        with pytest.raises(Boom):
            await session.result()
        with pytest.raises(ml.ManagedLoopError) as closed:
            await session.result()
        assert closed.value.code == "session_closed"
    assert host.closed == 1


# -- lone surrogates ---------------------------------------------------------------------


async def test_a_result_with_a_lone_surrogate_is_encoded_safely() -> None:
    @ml.tool
    def emit(kind: str) -> Any:
        if kind == "text":
            return "bad \ud800 text"
        if kind == "json":
            return {"k\udfff": ["\ud800"]}
        if kind == "pair":
            return "\ud83d\ude00"  # a pair spelled as two code points: one character
        if kind == "result":
            return ml.ToolResult(tool_use_id="x", text="r\udc00", is_error=True)
        raise ValueError("broken \ud800 message")

    toolset = ml.Toolset([emit])
    uses = [
        ToolUse(id=k, name="emit", input={"kind": k})
        for k in ("text", "json", "pair", "result", "raise")
    ]
    results = await run_tool_calls(toolset, uses, SessionInfo())
    # Compared as ascii(): a failing assertion must not feed pytest's report a surrogate.
    assert [ascii(r.text) for r in results] == [
        ascii(t)
        for t in (
            "bad \ufffd text",
            '{"k\ufffd":["\ufffd"]}',
            "\U0001f600",
            "r\ufffd",
            "tool 'emit' raised ValueError: broken \ufffd message",
        )
    ]
    assert [r.is_error for r in results] == [False, False, False, True, True]
    for r in results:
        r.text.encode("utf-8")


async def test_the_session_goes_on_after_a_surrogate_result_and_input() -> None:
    seen: list[str] = []

    @ml.tool
    def echo(q: str) -> str:
        seen.append(q)
        return q

    host = FakeHost([[tool("echo", {"q": "x\ud800"}, id="e1"), stop("requires_action")], [stop()]])
    result = await ml.run(host, agent=ml.AgentSpec(name="a", tools=[echo]))
    assert result.terminal is ml.Terminal.END_TURN
    assert [ascii(q) for q in seen] == [ascii("x\ud800")]  # the input reaches the tool as is
    [sent] = sent_results(host)
    assert ascii(sent.text) == ascii("x\ufffd")
    sent.text.encode("utf-8")


# -- inputs nested too deep --------------------------------------------------------------


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    inner = value
    for _ in range(levels):
        inner["a"] = {}
        inner = inner["a"]
    return value


async def test_a_decoded_input_nested_100k_deep_is_an_error_result() -> None:
    ran: list[Any] = []

    @ml.tool
    def take(a: Any = None) -> str:
        ran.append(a)
        return "took it"

    with emitted() as events:
        host = FakeHost(
            [
                [tool("take", _deep(100_000), id="d1"), stop("requires_action")],
                [text("still here"), stop()],
            ]
        )
        result = await ml.run(host, agent=ml.AgentSpec(name="a", tools=[take]))
    assert result.text == "still here"
    assert ran == []
    [sent] = sent_results(host)
    assert sent.is_error
    assert "nested deeper than 64 levels" in sent.text
    [use] = result.custom_tool_uses
    assert use.input == {}
    assert use.input_error is not None
    assert "managedloop.tool.stop" in [name for name, _, _ in events]
