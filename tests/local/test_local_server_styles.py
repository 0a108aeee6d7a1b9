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
from managedloop.hosts import UserMessage
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


# -- an error object inside a 200 answer, finish_reason missing, stream: true ignored ------


@pytest.mark.parametrize(
    ("kind", "retried"),
    [("server_error", True), ("overloaded_error", True), ("invalid_request_error", False)],
)
def test_an_error_object_mid_stream_raises_the_named_error(kind: str, retried: bool) -> None:
    faults = ChatFaults(stream_error=5, stream_error_type=kind)
    with ChatEmulator([say("never")], faults=faults) as emu:
        local = provider(emu, stream=True, max_retries=2, retry_backoff=0)
        with pytest.raises(ml.HostStreamError) as info:
            ml.run_sync(local, agent=AGENT, prompt="q")
    error = info.value
    assert error.code == "chat_stream_error"
    assert error.context["error_type"] == kind
    assert error.context["transient"] is retried
    assert f"injected {kind}" in str(error)
    assert len(emu.received) == (3 if retried else 1)
    assert error.partial_result is not None


def test_a_transient_error_mid_stream_is_retried_and_the_run_goes_on() -> None:
    faults = ChatFaults(stream_error=1)
    with ChatEmulator([say("fine now")], faults=faults) as emu:
        local = provider(emu, stream=True, retry_backoff=0)
        result = ml.run_sync(local, agent=AGENT, prompt="q")
    assert result.text == "fine now"
    assert len(emu.received) == 2


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        ({"message": "busy", "code": 503}, True),
        ({"message": "bad", "code": 400}, False),
        ({"message": "slow down", "type": "rate_limit_exceeded"}, True),
        ("a bare string", False),
        ({"message": "1 validation error for X", "type": "server_error"}, False),
    ],
)
def test_stream_error_objects_are_classified_by_type_and_code(error: Any, transient: bool) -> None:
    from managedloop.providers.local import is_transient
    from managedloop.providers.local._http import stream_error

    exc = stream_error(error)
    assert exc.context["transient"] is transient
    assert is_transient(exc) is transient


@pytest.mark.anyio
async def test_an_error_object_in_a_200_json_body_is_named_too() -> None:
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "model not loaded", "code": 400}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    async with TestServer(app, host="127.0.0.1") as server:
        local = Local(model="m", base_url=str(server.make_url("/v1")), api_key=None)
        with pytest.raises(ml.HostStreamError) as info:
            await ml.run(local, agent=AGENT, prompt="q")
    assert info.value.context["server_message"] == "model not loaded"
    assert info.value.context["transient"] is False


@pytest.mark.parametrize("stream", [False, True])
def test_a_missing_finish_reason_reads_like_null(stream: bool) -> None:
    faults = ChatFaults(omit_finish_reason=True, ignore_stream=stream)
    with ChatEmulator([say("hi")], faults=faults) as emu:
        result = ml.run_sync(provider(emu, stream=stream), agent=AGENT, prompt="q")
    assert "finish_reason" not in emu.received[0]  # (the request, for the record)
    assert result.text == "hi"
    assert result.stop_reason is None
    assert result.terminal is ml.Terminal.TERMINATED  # no finish reason: not a clean stop


def test_a_server_that_ignores_stream_true_still_works() -> None:
    CALLS.clear()
    seen: list[str] = []

    class Deltas:
        def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
            return get_weather(**input)

        def handle_event(self, event: dict[str, Any], info: Any) -> None:
            if event["type"] == "managedloop.text_delta":
                seen.append(event["text"])

    script = [call("get_weather", {"city": "Oslo"}), say("Cold.")]
    with ChatEmulator(script, faults=ChatFaults(ignore_stream=True)) as emu:
        result = ml.run_sync(provider(emu, stream=True), agent=AGENT, prompt="q", handler=Deltas())
    assert emu.received[0]["stream"] is True
    assert result.text == "Cold."
    assert seen == ["Cold."]  # the whole text, once
    assert [u.input for u in result.custom_tool_uses] == [{"city": "Oslo"}]


# -- redirects -------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_cross_origin_redirect_is_refused_and_nothing_reaches_the_target(stream: bool) -> None:
    secret = "sk-redirect-secret-0000"
    with ChatEmulator([say("stolen")], api_key=None) as target:
        faults = ChatFaults(redirect=1, redirect_to=target.base_url + "/chat/completions")
        with ChatEmulator([say("x")], faults=faults, api_key=secret) as origin:
            local = Local(model="m", base_url=origin.base_url, api_key=secret, stream=stream)
            with pytest.raises(ml.APIStatusError) as info:
                ml.run_sync(local, agent=AGENT, prompt="q")
        assert target.received == []  # neither the conversation nor the key went there
    error = info.value
    assert error.code == "redirect_refused"
    assert error.status == 307
    assert error.context["location_origin"] == f"http://127.0.0.1:{target.port}"
    assert f"http://127.0.0.1:{target.port}" in str(error)
    assert "another origin" in str(error)
    assert len(origin.received) == 1  # not retried
    for text in (str(error), repr(error.context)):
        assert secret not in text


def test_a_same_origin_307_is_followed_with_the_body() -> None:
    faults = ChatFaults(redirect=1, redirect_to="/v1/chat/completions")  # relative: same origin
    with ChatEmulator([say("moved")], faults=faults) as emu:
        result = ml.run_sync(provider(emu), agent=AGENT, prompt="q")
    assert result.text == "moved"
    assert len(emu.received) == 2
    assert emu.received[0] == emu.received[1]  # the same POST body, re-sent


def test_a_redirect_to_a_userinfo_url_shows_only_the_origin() -> None:
    faults = ChatFaults(redirect=1, redirect_to="http://bob:hunter2@evil.example:81/x?k=1")
    with ChatEmulator([say("x")], faults=faults) as emu, pytest.raises(ml.APIStatusError) as info:
        ml.run_sync(provider(emu), agent=AGENT, prompt="q")
    assert info.value.context["location_origin"] == "http://evil.example:81"
    assert "hunter2" not in str(info.value)
    assert "bob" not in str(info.value)
