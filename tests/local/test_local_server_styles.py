"""Real chat servers disagree on the wire; the Local host copes with each style.

The ChatEmulator reproduces each style (``ChatFaults``), and the production HTTP client is
what gets tested: streamed tool-call names and ids sent once (OpenAI), whole in every chunk
(llama.cpp's server) or split; the assistant tool-call message echoed with ``""`` content
(llama.cpp answers HTTP 500 to ``null``); invalid-request errors not retried, with the
server's own message kept in the error.
"""

from __future__ import annotations

from typing import Any

import pytest

import managedloop as ml
from managedloop.providers.local import Local
from managedloop.testing import ChatEmulator, ChatFaults, call, calls, say

CALLS: list[str] = []


@ml.tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    CALLS.append(city)
    return f"Sunny in {city}"


AGENT = ml.AgentSpec(system_prompt="Use tools.", tools=[get_weather])


def provider(emu: ChatEmulator, **kwargs: Any) -> Local:
    return Local(model="m", base_url=emu.base_url, api_key=emu.api_key, **kwargs)


@pytest.mark.parametrize("style", ["once", "every_chunk", "split"])
def test_streamed_tool_call_names_and_ids_in_every_server_style(style: Any) -> None:
    CALLS.clear()
    script = [
        call("get_weather", {"city": "Paris"}, id="call_abc123"),
        say("Sunny."),
    ]
    faults = ChatFaults(stream_names=style)
    with ChatEmulator(script, faults=faults, chunk_size=3) as emu:
        result = ml.run_sync(provider(emu, stream=True), agent=AGENT, prompt="Weather?")
    assert CALLS == ["Paris"]
    assert [(u.id, u.name, u.input) for u in result.custom_tool_uses] == [
        ("call_abc123", "get_weather", {"city": "Paris"})
    ]
    echoed = emu.received[1]["messages"][2]["tool_calls"][0]
    assert echoed["id"] == "call_abc123"
    assert echoed["function"]["name"] == "get_weather"
    assert emu.received[1]["messages"][3]["tool_call_id"] == "call_abc123"
    assert result.text == "Sunny."


@pytest.mark.parametrize("style", ["once", "every_chunk", "split"])
def test_two_streamed_calls_in_one_answer_keep_their_names(style: Any) -> None:
    CALLS.clear()
    script = [
        calls(("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})),
        say("Both sunny."),
    ]
    with ChatEmulator(script, faults=ChatFaults(stream_names=style), chunk_size=4) as emu:
        result = ml.run_sync(provider(emu, stream=True), agent=AGENT, prompt="Weather?")
    assert sorted(CALLS) == ["Paris", "Rome"]  # the two calls run concurrently
    assert [(u.name, u.input) for u in result.custom_tool_uses] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Rome"}),
    ]


@pytest.mark.parametrize(
    ("pieces", "known", "expected"),
    [
        (["get_weather"], set(), "get_weather"),  # once
        (["get_weather"] * 3, set(), "get_weather"),  # repeated in every chunk
        (["get_", "wea", "ther"], set(), "get_weather"),  # split
        (["get", "get_wea", "get_weather"], set(), "get_weather"),  # growing prefix
        (["ab", "ab"], set(), "ab"),  # ambiguous: repetition unless a tool says otherwise
        (["ab", "ab"], {"abab"}, "abab"),
        ([], set(), ""),
    ],
)
def test_streamed_pieces_resolve_to_the_value_sent(
    pieces: list[str], known: set[str], expected: str
) -> None:
    from managedloop.providers.local._http import _joined

    assert _joined(pieces, known) == expected
