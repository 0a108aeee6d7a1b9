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
from tests_local_helpers import drive, open_conn

import managedloop as ml
from managedloop.providers.base import UserMessage
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


# -- the assistant tool-call message goes back with "" content, and a 500 that says the
# request was invalid is neither retried nor cut before its cause ------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_turn_two_works_on_a_server_that_rejects_null_content(stream: bool) -> None:
    CALLS.clear()
    script = [call("get_weather", {"city": "Paris"}), say("Sunny.")]
    with ChatEmulator(script, faults=ChatFaults(reject_null_content=True)) as emu:
        result = ml.run_sync(provider(emu, stream=stream), agent=AGENT, prompt="Weather?")
    assert result.text == "Sunny."
    assert CALLS == ["Paris"]
    assert len(emu.received) == 2
    assert emu.received[1]["messages"][2]["content"] == ""


@pytest.mark.anyio
async def test_a_500_that_says_the_request_was_invalid_is_not_retried() -> None:
    transcript = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [], "x": 1},
        {"role": "user", "content": "again"},
    ]
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    with ChatEmulator([say("x")], faults=ChatFaults(reject_null_content=True)) as emu:
        local = provider(emu, sleep=sleep)
        conn = await open_conn(local, AGENT, transcript=transcript)
        try:
            with pytest.raises(ml.APIStatusError) as info:
                await drive(conn, UserMessage("and now?"))
        finally:
            await conn.aclose()
    assert len(emu.received) == 1  # not retried: the same body would fail again
    assert sleeps == []
    error = info.value
    assert error.status == 500
    assert error.context["invalid_request"] is True
    # the line naming the cause sits ~1,000 characters into the body: it is kept
    assert "Input should be a valid string" in str(error)
    assert "Input should be a valid string" in error.context["server_message"]
    assert str(error).startswith("the chat endpoint answered HTTP 500: 5 validation errors")


@pytest.mark.parametrize(
    ("body", "message", "invalid"),
    [
        ('{"error": {"message": "boom", "type": "server_error"}}', "boom", False),
        ('{"error": {"message": "bad", "type": "invalid_request_error"}}', "bad", True),
        ('{"error": "plain string"}', "plain string", False),
        ('{"detail": "Not Found"}', "Not Found", False),
        (
            '{"detail": [{"loc": ["body", "messages"], "msg": "Field required"}]}',
            '[{"loc": ["body", "messages"], "msg": "Field required"}]',
            True,
        ),
        ('{"message": "overloaded"}', "overloaded", False),
        ("<html>Bad Gateway</html>", None, False),
        ("[1, 2]", None, False),
        ('{"error": {"code": "validation_error"}}', None, True),
    ],
)
def test_server_error_bodies_are_read_for_their_message(
    body: str, message: str | None, invalid: bool
) -> None:
    from managedloop.providers.local import is_transient
    from managedloop.providers.local._http import status_error

    error = status_error(502, body, None)
    assert error.context["server_message"] == message
    assert error.context["invalid_request"] is invalid
    assert is_transient(error) is not invalid
    assert str(error).endswith(message if message is not None else body)


def test_error_excerpts_are_capped_at_a_few_kib() -> None:
    from managedloop.providers.local._http import status_error

    error = status_error(500, '{"error": {"message": "' + "x" * 10_000 + '"}}', None)
    assert 4000 < len(str(error)) < 4200
    assert len(error.context["body"]) < 4200
