"""Live: a real OpenAI-compatible endpoint (e.g. Ollama). Runs only when configured:

OLLAMA_BASE_URL=http://127.0.0.1:11434/v1 OLLAMA_MODEL=llama3.2 pytest -m live
"""

from __future__ import annotations

import os

import pytest

import managedloop as ml
from managedloop.providers import Local

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (os.environ.get("OLLAMA_BASE_URL") and os.environ.get("OLLAMA_MODEL")),
        reason="needs OLLAMA_BASE_URL and OLLAMA_MODEL",
    ),
]


@ml.tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny, 18 °C in {city}"


def test_a_real_model_calls_the_tool_and_answers() -> None:
    provider = Local(
        model=os.environ["OLLAMA_MODEL"],
        base_url=os.environ["OLLAMA_BASE_URL"],
        api_key=os.environ.get("OLLAMA_API_KEY", "ollama"),
        stream=True,
    )
    agent = ml.AgentSpec(system_prompt="Use the tools to answer.", tools=[get_weather])
    result = ml.run_sync(provider, agent=agent, prompt="What is the weather in Paris?")
    assert result.terminal is ml.Terminal.END_TURN
    assert result.text
