"""DESIGN.md's public-surface snippet, run as written against the loopback chat emulator.

The only change to the snippet: ``base_url``/``api_key`` come from the emulator instead of
the placeholder ``http://127.0.0.1:8000/v1`` / ``sk-...``.
"""

from __future__ import annotations

import pytest

import managedloop as ml
from managedloop.providers import Local
from managedloop.testing import ChatEmulator

pytestmark = pytest.mark.anyio


@ml.tool
def get_weather(city: str) -> str:
    """Current weather for a city."""  # docstring -> tool description
    return f"Sunny in {city}"  # str result; raise ml.ToolError(msg) -> is_error


agent = ml.AgentSpec(name="weather", system_prompt="Use tools.", tools=[get_weather])


def test_run_sync_and_resume() -> None:
    with ChatEmulator() as emu:
        provider = Local(model="my-model", base_url=emu.base_url, api_key=emu.api_key)
        result = ml.run_sync(provider, agent=agent, prompt="Weather in Paris?")
        assert result.terminal is ml.Terminal.END_TURN
        assert result.terminal == "end_turn"
        assert result.stop_reason == "stop"
        assert result.text == "Done. Sunny in example"  # the default script's answer
        assert result.custom_tool_uses == [
            ml.ToolUse(id="call_0001", name="get_weather", input={"city": "example"})
        ]
        assert result.usage.input_tokens == 20
        assert result.usage.output_tokens == 10
        assert result.session_id is not None
        assert result.session_id.startswith("local_")
        assert result.turns == 2
        assert [e["type"] for e in result.events] == ["local.model_response"] * 2
        assert result.transcript is not None
        assert [m["role"] for m in result.transcript] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]

        again = ml.run_sync(provider, agent=agent, prompt="And Rome?", resume=result)
        assert again.terminal is ml.Terminal.END_TURN
        assert again.session_id == result.session_id
        first_call_of_second_run = emu.requests[2]
        assert len(first_call_of_second_run.messages) == len(result.transcript) + 1
        assert first_call_of_second_run.user_text == "And Rome?"
        assert again.transcript is not None
        assert again.transcript[: len(result.transcript)] == result.transcript
        # the model saw the tool the snippet declared, with its docstring as description
        assert [(t.name, t.description) for t in emu.requests[0].tools] == [
            ("get_weather", "Current weather for a city.")
        ]


async def test_run_and_start() -> None:
    with ChatEmulator() as emu:
        provider = Local(model="my-model", base_url=emu.base_url, api_key=emu.api_key)
        result = await ml.run(provider, agent=agent, prompt="Weather in Paris?")
        assert result.terminal is ml.Terminal.END_TURN
        assert result.custom_tool_uses[0].name == "get_weather"

        seen: list[str] = []
        async with ml.start(provider, agent=agent) as session:  # live, multi-turn
            await session.send("hello")
            first = await session.result()  # waits for the next terminal
            assert first.terminal is ml.Terminal.END_TURN
            assert first.text == "Done. Sunny in example"

            async def collect() -> None:
                async for event in session.events():  # raw events as they arrive
                    seen.append(event["type"])
                    if event["type"] == "local.model_response":
                        break

            import anyio

            async with anyio.create_task_group() as tg:
                tg.start_soon(collect)
                await anyio.sleep(0)
                await session.send("again")
                second = await session.result()
            assert second.text == "You said: again"
            assert second.turns == 1
        assert "local.model_response" in seen
