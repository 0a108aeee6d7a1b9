"""Acceptance: the same ``output=Weather`` session on the Local, Claude and AgentCore
emulators returns a ``Weather`` instance, with the strategy reported; the output tool is
never a user tool and runs after the turn's other tools."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

import managedloop as ml
from managedloop import telemetry
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.testing import (
    AgentCoreEmulator,
    ChatEmulator,
    ClaudeEmulator,
    Fail,
    ToolCall,
    call,
    calls,
)

from .models import BAD, GOOD, Sky, Weather, get_forecast

pytestmark = pytest.mark.anyio

SPEC = ml.AgentSpec(name="weather", system_prompt="Use tools.", tools=[get_forecast])
SCRIPT = [call("get_forecast", {"city": "Paris"}), call("final_result", GOOD)]


@pytest.fixture(autouse=True)
def _no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """botocore never reaches real AWS: no IMDS, no profile files, no ambient keys."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "aws-empty"
    empty.touch()
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))


@pytest.fixture
def output_events() -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []
    names = ["managedloop.session.output", "managedloop.session.request.stop"]
    handle = telemetry.attach(lambda n, _m, meta: seen.append({"event": n, **meta}), names)
    try:
        yield seen
    finally:
        telemetry.detach(handle)


def _check(result: ml.SessionResult) -> None:
    assert isinstance(result.output, Weather)
    assert result.output.sky is Sky.SUNNY
    assert result.output.temperature.celsius == 21.5
    assert result.output_strategy == "tool"
    assert result.terminal is ml.Terminal.END_TURN
    assert result.reason is None
    # the output call is no user tool: only get_forecast ran and is listed
    assert [u.name for u in result.custom_tool_uses] == ["get_forecast"]
    assert ml.SessionResult.from_dict(json.loads(json.dumps(result.to_dict())), output=Weather)
    again = ml.SessionResult.from_dict(result.to_dict(), output=Weather)
    assert again.output == result.output


def _check_telemetry(seen: list[dict[str, Any]]) -> None:
    outputs = [e for e in seen if e["event"].endswith("session.output")]
    assert [(e["strategy"], e["valid"]) for e in outputs] == [("tool", True)]
    (stop,) = [e for e in seen if e["event"].endswith("request.stop")]
    assert stop["output_strategy"] == "tool"


async def test_local(output_events: list[dict[str, Any]]) -> None:
    with ChatEmulator(SCRIPT) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(provider, agent=SPEC, prompt="Weather in Paris?", output=Weather)
    _check(result)
    _check_telemetry(output_events)
    offered = [t.name for t in emu.requests[0].tools]
    assert offered == ["get_forecast", "final_result"]
    assert emu.requests[1].tool_results[0].text == "Sunny and 21.5 C in Paris"


async def test_claude(output_events: list[dict[str, Any]]) -> None:
    # A managed host's agent is provisioned with its tools: the output tool among them.
    spec = ml.AgentSpec(
        name="weather",
        system_prompt="Use tools.",
        tools=[get_forecast, ml.output_tool(Weather)],
    )
    with ClaudeEmulator(SCRIPT) as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            handle = await ml.provision(ClaudeManagedAgents(client=c), spec)
            hosted = ClaudeManagedAgents(client=c, agent=handle, environment=handle)
            result = await ml.run(hosted, agent=spec, prompt="Weather in Paris?", output=Weather)
    _check(result)
    _check_telemetry(output_events)
    assert [t.name for t in emu.agent.requests[0].tools] == ["get_forecast", "final_result"]


async def test_agentcore(output_events: list[dict[str, Any]]) -> None:
    with AgentCoreEmulator(SCRIPT) as emu:
        async with BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        ) as hosted:
            result = await ml.run(hosted, agent=SPEC, prompt="Weather in Paris?", output=Weather)
    _check(result)
    _check_telemetry(output_events)
    assert {"get_forecast", "final_result"} <= {t.name for t in emu.agent.requests[0].tools}


async def test_the_default_script_answers_through_the_output_tool() -> None:
    """With no script the emulators' agent calls every tool with schema-made arguments:
    the output tool's schema alone makes a valid Weather."""
    with ChatEmulator() as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(provider, agent=SPEC, prompt="x", output=Weather)
    assert isinstance(result.output, Weather)


async def test_the_output_turns_other_tools_run_first_and_the_output_is_never_dispatched() -> None:
    ran: list[str] = []

    class Recorder:
        def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
            ran.append(name)
            return "ok"

    script = [
        calls(
            ToolCall(name="final_result", input=GOOD),
            ToolCall(name="get_forecast", input={"city": "Paris"}),
        )
    ]
    with ChatEmulator(script) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(provider, agent=SPEC, prompt="x", output=Weather, handler=Recorder())
    assert ran == ["get_forecast"]  # ran, though called after the output tool
    assert isinstance(result.output, Weather)
    assert [u.name for u in result.custom_tool_uses] == ["get_forecast"]
    assert result.turns == 1


RETRY = [call("final_result", BAD), call("final_result", GOOD)]


async def test_agentcore_invalid_then_valid_the_errors_go_back_as_the_tool_result() -> None:
    with AgentCoreEmulator(RETRY) as emu:
        async with BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        ) as hosted:
            result = await ml.run(hosted, agent=SPEC, prompt="x", output=Weather)
    assert isinstance(result.output, Weather)
    assert result.turns == 2
    (sent,) = emu.agent.requests[1].tool_results
    assert sent.is_error
    assert "Input should be" in sent.text


async def test_claude_invalid_then_valid_the_errors_go_back_as_the_tool_result() -> None:
    spec = ml.AgentSpec(name="weather", tools=[get_forecast, ml.output_tool(Weather)])
    with ClaudeEmulator(RETRY) as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            handle = await ml.provision(ClaudeManagedAgents(client=c), spec)
            hosted = ClaudeManagedAgents(client=c, agent=handle, environment=handle)
            result = await ml.run(hosted, agent=spec, prompt="x", output=Weather)
    assert isinstance(result.output, Weather)
    (sent,) = emu.agent.requests[1].tool_results
    assert sent.is_error
    assert "temperature" in sent.text


async def test_a_raised_error_carries_the_last_invalid_output_in_its_partial_result() -> None:
    script = [call("final_result", BAD), Fail(message="the host broke down")]
    with ChatEmulator(script) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, max_retries=0)
        with pytest.raises(ml.ManagedLoopError) as caught:
            await ml.run(provider, agent=SPEC, prompt="x", output=Weather)
    partial = caught.value.partial_result
    assert partial is not None
    assert partial.output is None
    assert partial.output_failure is not None
    assert partial.output_failure.payload == BAD
    assert partial.output_strategy == "tool"
