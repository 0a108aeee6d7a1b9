"""A streamed call with tools and ``tool_choice: "auto"`` on llama-cpp-python's server.

That server (0.3.x, ``--chat_format chatml-function-calling``) cannot stream such a call
once the model picks a tool: it raises "Automatic streaming tool choice is not supported"
after sending its SSE headers, so the client sees HTTP 200 ``text/event-stream`` and an
empty chunked body that ends cleanly (captured from the real server; ``ChatFaults(
no_auto_tool_stream=True)`` plays it byte for byte). The ``llama.cpp`` profile never
streams such a call; every other profile streams it and, on that empty stream, re-sends it
unstreamed (not a retry) and sends every later one unstreamed.
"""

from __future__ import annotations

import io
import json
import socket
from typing import Any

import pytest
from aiohttp import web

import managedloop as ml
from managedloop import cli
from managedloop.providers.local import Local
from managedloop.providers.local._http import ClientPool, OpenAIChat
from managedloop.providers.local._profiles import PROFILES, Profile
from managedloop.providers.local._transports import HttpTransport
from managedloop.providers.local._types import ChatRequest
from managedloop.testing import ChatEmulator, ChatFaults, call, say
from managedloop.testing.script import ModelRequest

CALLS: list[str] = []


@ml.tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    CALLS.append(city)
    return f"Sunny in {city}"


AGENT = ml.AgentSpec(system_prompt="Use tools.", tools=[get_weather])
FAULT = ChatFaults(no_auto_tool_stream=True)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


class Deltas:
    """A handler that runs the tool and keeps the streamed text."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
        return get_weather(**input)

    def handle_event(self, event: dict[str, Any], info: Any) -> None:
        if event["type"] == "managedloop.text_delta":
            self.seen.append(event["text"])


def provider(emu: ChatEmulator, **kwargs: Any) -> Local:
    kwargs.setdefault("max_retries", 0)  # the fallback must not need a retry
    return Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True, **kwargs)


def streamed(emu: ChatEmulator) -> list[bool]:
    return [bool(body.get("stream")) for body in emu.received]


def _raw_post(port: int, body: dict[str, Any], *, keep_alive: bool = False) -> bytes:
    """The bytes of the answer, up to the server closing the connection."""
    data = json.dumps(body).encode()
    connection = b"keep-alive" if keep_alive else b"close"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nConnection: " + connection + b"\r\n"
            b"Content-Length: %d\r\n\r\n" % len(data) + data
        )
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def test_the_fault_sends_what_llama_cpp_python_sends() -> None:
    # What llama_cpp.server 0.3.36 sent (uvicorn; date, server and request-id headers cut):
    # HTTP/1.1 200 OK ... content-type: text/event-stream; charset=utf-8 ...
    # Transfer-Encoding: chunked, then the body b"0\r\n\r\n": no bytes, ended cleanly;
    # then uvicorn closed the connection although the request asked for keep-alive.
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}], "tools": TOOLS}
    script = [call("get_weather", {"city": "Paris"})]
    with ChatEmulator(script, faults=FAULT, api_key=None) as emu:
        refused = _raw_post(
            emu.port, {**body, "tool_choice": "auto", "stream": True}, keep_alive=True
        )
        forced = {"type": "function", "function": {"name": "get_weather"}}
        named = _raw_post(emu.port, {**body, "tool_choice": forced, "stream": True})
    head, _, rest = refused.partition(b"\r\n\r\n")
    headers = head.decode().lower().split("\r\n")
    assert headers[0] == "http/1.1 200 ok"
    assert "content-type: text/event-stream; charset=utf-8" in headers
    assert "transfer-encoding: chunked" in headers
    assert rest == b"0\r\n\r\n"  # and closed: _raw_post read up to the end of the socket
    assert b"data: [DONE]" in named  # a named tool_choice streams, as on the server


def test_a_text_answer_under_auto_still_streams() -> None:
    # the server streams when its model answers in text; so does the fault
    deltas = Deltas()
    with ChatEmulator([say("Hello there.")], faults=FAULT) as emu:
        result = ml.run_sync(provider(emu), agent=AGENT, prompt="hi", handler=deltas)
    assert result.text == "Hello there."
    assert streamed(emu) == [True]
    assert len(deltas.seen) > 1  # really streamed, in chunks


@pytest.mark.parametrize(
    ("profile", "model_config", "wire"),
    [
        # the default sends tool_choice "auto": the first call streams, the server sends an
        # empty stream, the call is re-sent whole at once, and so is every later one
        ("default", {}, [True, False, False]),
        ("llama.cpp", {}, [False, False]),  # never streamed
        ("openai", {"tool_choice": "auto"}, [True, False, False]),
        ("vllm", {"tool_choice": "auto"}, [True, False, False]),
        ("ollama", {"tool_choice": "auto"}, [True, False, False]),
        ("openai", {}, [True, True]),  # no tool_choice sent: the server streams
    ],
)
def test_a_streamed_run_with_auto_tool_choice_works_on_every_profile(
    profile: str, model_config: dict[str, Any], wire: list[bool]
) -> None:
    CALLS.clear()
    deltas = Deltas()
    script = [call("get_weather", {"city": "Paris"}), say("Sunny.")]
    with ChatEmulator(script, faults=FAULT) as emu:
        local = provider(emu, profile=profile, model_config=model_config)
        result = ml.run_sync(local, agent=AGENT, prompt="Weather?", handler=deltas)
    assert result.terminal is ml.Terminal.END_TURN
    assert result.text == "Sunny."
    assert CALLS == ["Paris"]  # the tool ran once: nothing was parsed from the empty stream
    assert [(u.name, u.input) for u in result.custom_tool_uses] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert streamed(emu) == wire
    assert "".join(deltas.seen) == "Sunny."  # the text reached the handler, once
    for body in emu.received:
        if not body.get("stream"):
            assert "stream_options" not in body  # OpenAI refuses it on a whole request
    if wire[0] and not wire[1]:  # the re-sent call is the same call
        assert emu.received[1]["messages"] == emu.received[0]["messages"]


def test_the_fallback_lasts_for_the_providers_life() -> None:
    script = [call("get_weather", {"city": "Paris"}), say("Sunny.")]
    with ChatEmulator(script, faults=FAULT) as emu:
        local = provider(emu)
        ml.run_sync(local, agent=AGENT, prompt="Weather?", handler=Deltas())
        ml.run_sync(local, agent=AGENT, prompt="Weather?", handler=Deltas())
        other = provider(emu)  # another provider finds out for itself
        ml.run_sync(other, agent=AGENT, prompt="Weather?", handler=Deltas())
    assert streamed(emu) == [True, False, False, False, False, True, False, False]


def test_a_stream_cut_before_any_byte_is_a_dropped_stream_not_the_fallback() -> None:
    # a body cut mid-transfer (no final chunk) is not the server's clean empty answer:
    # it is retried, streamed again, and later calls stream too
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    faults = ChatFaults(drop=1, drop_after=0)
    script = [call("get_weather", {"city": "Paris"}), say("Sunny.")]
    with ChatEmulator(script, faults=faults) as emu:
        local = provider(emu, max_retries=1, sleep=sleep)
        result = ml.run_sync(local, agent=AGENT, prompt="Weather?", handler=Deltas())
    assert result.text == "Sunny."
    assert len(sleeps) == 1  # one retry
    assert streamed(emu) == [True, True, True]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tools", "options"),
    [
        ((), {}),  # no tools
        (TOOLS, {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
        (TOOLS, {"tool_choice": "required"}),
    ],
    ids=["no-tools", "named-tool", "required"],
)
async def test_an_empty_stream_for_any_other_call_is_still_a_dropped_stream(
    tools: Any, options: dict[str, Any]
) -> None:
    answers: list[bool] = []

    def empty(request: ModelRequest) -> Any:
        answers.append(True)
        return web.Response(content_type="text/event-stream")  # 200, no bytes, clean end

    with ChatEmulator([empty], api_key=None) as emu:
        pool = ClientPool(HttpTransport(timeout=10, connect_timeout=10))
        chat = OpenAIChat(emu.base_url, None, pool, profile=PROFILES["default"])
        request = ChatRequest(
            model="m",
            messages=[{"role": "user", "content": "q"}],
            tools=tools,
            options=options,
            on_delta=lambda text: None,
        )
        try:
            for _ in range(2):
                with pytest.raises(ml.TransportError) as info:
                    await chat(request)
                assert info.value.context["cause"] == "stream_dropped"
        finally:
            await pool.aclose()
    assert streamed(emu) == [True, True]  # no fallback: both went out streamed
    assert answers == [True, True]


@pytest.mark.anyio
async def test_a_custom_profile_can_turn_streaming_off_for_auto_tool_calls() -> None:
    profile = Profile(tool_choice="auto", stream_auto_tools=False)
    seen: list[str] = []
    with ChatEmulator([say("Hi."), say("Hi.")], faults=FAULT, api_key=None) as emu:
        pool = ClientPool(HttpTransport(timeout=10, connect_timeout=10))
        chat = OpenAIChat(emu.base_url, None, pool, profile=profile)
        messages = [{"role": "user", "content": "q"}]
        try:
            await chat(ChatRequest(model="m", messages=messages, tools=TOOLS, on_delta=seen.append))
            await chat(ChatRequest(model="m", messages=messages, on_delta=seen.append))
        finally:
            await pool.aclose()
    assert streamed(emu) == [False, True]  # a call without tools still streams
    assert emu.received[0]["tool_choice"] == "auto"
    assert seen[0] == "Hi."  # the whole text, once
    assert "".join(seen[1:]) == "Hi."


@pytest.mark.parametrize(
    ("extra", "wire"),
    [([], [True, False, False]), (["--profile", "llama.cpp"], [False, False])],
    ids=["default", "llama.cpp"],
)
def test_the_cli_streams_a_run_with_tools_on_such_a_server(
    extra: list[str], wire: list[bool]
) -> None:
    CALLS.clear()
    out = io.StringIO()
    script = [call("get_weather", {"city": "Paris"}), say("Sunny.")]
    with ChatEmulator(script, faults=FAULT) as emu:
        argv = ["run", "--base-url", emu.base_url, "--api-key", emu.api_key or "", "--model"]
        argv += ["m", "--prompt", "Weather?", "--max-retries", "0", *extra]
        argv += ["--tools", "test_local_auto_tool_stream:get_weather"]
        code = cli.main(argv, out=out)
    assert code == 0, out.getvalue()
    assert CALLS == ["Paris"]
    assert streamed(emu) == wire
    assert all(body["tool_choice"] == "auto" for body in emu.received)
    assert "Sunny." in out.getvalue()


def test_the_cli_refuses_an_unknown_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", "--model", "m", "--prompt", "q", "--profile", "nosuch"])
    assert code == 2  # a usage error
    assert "llama.cpp" in capsys.readouterr().err  # the choices are listed
