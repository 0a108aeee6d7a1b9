"""The MCP session lives as long as the agent session and is closed on every way out:
a result, an error, a run timeout, a cancellation, a ``KeyboardInterrupt`` from a tool, a host
that fails to open, a live session's end and its timeout. After each, every stdio server
process the session started is gone (checked by pid), and what was raised is raised as
itself (never inside an ``ExceptionGroup`` from the SDK's task groups).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp_support import Weather

import managedloop as ml
from managedloop.hosts import OpenRequest
from managedloop.providers import Local
from managedloop.testing import ModelRequest, ScriptedChatModel, call, calls, say

pytestmark = pytest.mark.anyio

FORECAST = "Forecast for Paris: sunny for 1 day(s)"


def _agent(*tools: Any) -> ml.AgentSpec:
    return ml.AgentSpec(name="lifetime", tools=list(tools))


def _local(script: list[Any]) -> tuple[Local, ScriptedChatModel]:
    model = ScriptedChatModel(script)
    return Local(model="m", chat=model), model


async def test_a_result_closes_the_server(weather: Weather) -> None:
    provider, model = _local([call("get_forecast", {"city": "Paris"}), say("Sunny.")])
    result = await ml.run(provider, agent=_agent(weather.tools), prompt="Weather?")
    assert result.text == "Sunny."
    assert model.requests[1].tool_results[0].text == FORECAST
    weather.pidfile.assert_all_gone()


async def test_a_host_error_closes_the_server_and_raises_as_itself(weather: Weather) -> None:
    def broken(request: ModelRequest) -> Any:
        raise AssertionError("the model broke")

    provider, _ = _local([call("get_forecast", {"city": "Paris"}), broken])
    with pytest.raises(ml.ProviderError) as caught:
        await ml.run(provider, agent=_agent(weather.tools), prompt="Weather?")
    assert caught.value.partial_result is not None
    assert [u.name for u in caught.value.partial_result.custom_tool_uses] == ["get_forecast"]
    weather.pidfile.assert_all_gone()


async def test_a_run_timeout_closes_the_server(weather: Weather) -> None:
    # ``hang`` never answers: the run's own bound ends it (any value would; none is raced).
    provider, _ = _local([call("hang"), say("never")])
    with pytest.raises(ml.SessionTimeoutError):
        await ml.run(provider, agent=_agent(weather.tools), prompt="Hang.", timeout=1.0)
    weather.pidfile.assert_all_gone()


async def test_cancelling_the_caller_closes_the_server(weather: Weather) -> None:
    started = anyio.Event()

    @ml.tool
    async def signal() -> str:
        """Tells the test that the turn's calls are running."""
        started.set()
        return "ok"

    provider, _ = _local([calls(("hang", {}), ("signal", {})), say("never")])
    async with anyio.create_task_group() as tg:

        async def session() -> None:
            await ml.run(provider, agent=_agent(weather.tools, signal), prompt="Hang.")

        tg.start_soon(session)
        await started.wait()
        tg.cancel_scope.cancel()
    weather.pidfile.assert_all_gone()


async def test_a_tools_keyboard_interrupt_closes_the_server_and_propagates(
    weather: Weather,
) -> None:
    @ml.tool
    def interrupt() -> str:
        """Raises KeyboardInterrupt."""
        raise KeyboardInterrupt

    provider, _ = _local([calls(("get_forecast", {"city": "Paris"}), ("interrupt", {}))])
    with pytest.raises(KeyboardInterrupt):
        await ml.run(provider, agent=_agent(weather.tools, interrupt), prompt="Go.")
    weather.pidfile.assert_all_gone()


class _RefusingHost:
    """A host whose open fails: the MCP connection was already open by then."""

    name = "refusing"
    supports_outcomes = False
    supports_raw_events = False

    async def open(self, request: OpenRequest) -> Any:
        raise ml.ProviderError("no session today", code="provider_error")


async def test_a_host_that_fails_to_open_closes_the_server(weather: Weather) -> None:
    with pytest.raises(ml.ProviderError, match="no session today"):
        await ml.run(_RefusingHost(), agent=_agent(weather.tools), prompt="Hi.")
    weather.pidfile.assert_all_gone()


async def test_a_server_that_cannot_start_for_the_session_is_a_named_error(
    weather: Weather,
) -> None:
    weather.refuse_start.touch()
    provider, model = _local([say("never asked")])
    with pytest.raises(ml.McpError) as caught:
        await ml.run(provider, agent=_agent(weather.tools), prompt="Hi.")
    assert caught.value.code == "mcp_unavailable"
    assert model.requests == []  # nothing was sent to the host
    weather.pidfile.assert_all_gone()


async def test_a_live_session_keeps_one_server_across_requests_and_closes_it(
    weather: Weather,
) -> None:
    script = [
        call("get_forecast", {"city": "Paris"}),
        say("Sunny."),
        call("get_forecast", {"city": "Rome"}),
        say("Also sunny."),
    ]
    provider, model = _local(script)
    async with ml.start(provider, agent=_agent(weather.tools), prompt="Paris?") as session:
        assert (await session.result()).text == "Sunny."
        await session.send("Rome?")
        assert (await session.result()).text == "Also sunny."
        assert len(weather.pidfile.new()) == 1  # one server for the whole session
    assert model.requests[3].tool_results[0].text == "Forecast for Rome: sunny for 1 day(s)"
    weather.pidfile.assert_all_gone()


async def test_a_live_session_timeout_closes_the_server_when_the_session_ends(
    weather: Weather,
) -> None:
    provider, _ = _local([call("hang"), say("never")])
    async with ml.start(
        provider, agent=_agent(weather.tools), prompt="Hang.", timeout=1.0
    ) as session:
        with pytest.raises(ml.SessionTimeoutError):
            await session.result()
    weather.pidfile.assert_all_gone()


def test_run_sync_closes_the_server(weather: Weather) -> None:
    provider, _ = _local([call("add", {"a": 2, "b": 3}), say("5.")])
    result = ml.run_sync(provider, agent=_agent(weather.tools), prompt="2+3?")
    assert [u.name for u in result.custom_tool_uses] == ["add"]
    weather.pidfile.assert_all_gone()


async def test_two_sessions_of_one_toolset_get_a_server_each(weather: Weather) -> None:
    results: list[ml.SessionResult] = []

    async def session(city: str) -> None:
        provider, _ = _local([call("get_forecast", {"city": city}), say(city)])
        results.append(await ml.run(provider, agent=_agent(weather.tools), prompt="?"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(session, "Paris")
        tg.start_soon(session, "Rome")
    assert sorted(r.text for r in results) == ["Paris", "Rome"]
    assert len(set(weather.pidfile.assert_all_gone(at_least=2))) == 2
