"""The ``managedloop`` command, run in process (``main([...])``) against the emulators."""

from __future__ import annotations

import argparse
import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import managedloop as ml
from managedloop import cli
from managedloop.cli import render
from managedloop.providers import Local
from managedloop.testing import ChatEmulator, ChatFaults, EmulatorStartError, call, say
from managedloop.tools import Toolset, tool


@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


TOOLS = [shout]
TOOL_TUPLE = (shout,)
TOOLSET = Toolset([shout])
NOT_A_TOOL = 42
BAD_LIST = [shout, "not a tool"]


def run_main(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main(argv, out=out), out.getvalue()


def run_local(emu: ChatEmulator, prompt: str, *extra: str) -> tuple[int, str]:
    """``managedloop run`` on the Local host against ``emu`` with model ``m``."""
    base = ["run", "--base-url", emu.base_url, "--api-key", emu.api_key or ""]
    return run_main([*base, "--model", "m", "--prompt", prompt, *extra])


@pytest.mark.parametrize(
    ("host", "label", "stop_reason"),
    [
        ("local", "Local", "stop"),
        ("claude", "Claude Managed Agents", '{"type":"end_turn"}'),
        ("agentcore", "Bedrock AgentCore", "end_turn"),
    ],
)
def test_demo_prints_a_table_with_real_content(host: str, label: str, stop_reason: str) -> None:
    code, text = run_main(["demo", "--hosts", host])
    assert code == 0
    lines = text.splitlines()
    header = next(line for line in lines if label in line and "|" in line)
    assert header.split("|")[1].strip() == label
    rows: dict[str, str] = {}
    last = ""
    for line in lines:  # wrapped cells continue on lines with an empty first column
        if "|" not in line or set(line) <= {"-", "+"}:
            continue
        name, _, value = (part.strip() for part in line.partition("|"))
        last = name or last
        rows[last] = f"{rows.get(last, '')} {value}".strip()
    assert rows["terminal"] == "end_turn"
    assert rows["stop reason"] == stop_reason
    assert rows["tokens"] == "30 in / 15 out"
    assert rows["turns"] == "3"
    assert rows["tool calls"] == (
        "get_weather(city='Paris'); convert_temperature(celsius=18.0, unit='fahrenheit')"
    )
    # the tools really ran: the answer quotes both results
    assert rows["text"] == "Sunny, 18 °C in Paris, which is 64.4 °F."


def test_demo_script_converts_what_the_weather_tool_really_returned() -> None:
    @tool
    def get_weather(city: str) -> str:
        """Weather."""
        return f"Rain, 7 °C in {city}"

    agent = ml.AgentSpec(tools=[get_weather, cli.convert_temperature])
    with ChatEmulator(cli.demo_script("Oslo")) as emu:
        result = ml.run_sync(
            Local(model="m", base_url=emu.base_url, api_key=emu.api_key), agent=agent
        )
    assert [u.input for u in result.custom_tool_uses] == [
        {"city": "Oslo"},
        {"celsius": 7.0, "unit": "fahrenheit"},
    ]
    assert result.text == "Rain, 7 °C in Oslo, which is 44.6 °F."


def test_demo_passes_the_script_only_to_plugins_that_take_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, object] = {}

    class Old:  # a host plug-in written before demo(..., script=)
        LABEL = "Old"

        @staticmethod
        def demo(agent: ml.AgentSpec, prompt: str) -> ml.SessionResult:
            seen["old"] = prompt
            return ml.SessionResult(terminal=ml.Terminal.END_TURN, text="old")

    class New:
        LABEL = "New"

        @staticmethod
        def demo(agent: ml.AgentSpec, prompt: str, script: object = None) -> ml.SessionResult:
            seen["new"] = script
            return ml.SessionResult(terminal=ml.Terminal.END_TURN, text="new")

    monkeypatch.setattr(
        cli.hosts, "host_module", lambda host: {"local": New, "claude": Old}.get(host, "skipped: x")
    )
    code, text = run_main(["demo", "--hosts", "local,claude"])
    assert code == 0
    assert seen["old"] == cli.DEMO_PROMPT
    script = seen["new"]
    assert isinstance(script, list)
    assert len(script) == 3
    assert "Old" in text
    assert "New" in text


def test_demo_on_every_host_skips_missing_ones_with_a_note() -> None:
    code, text = run_main(["demo"])
    assert code == 0
    assert "Local" in text
    for host in ("claude", "agentcore"):
        module = cli.host_module(host)
        if isinstance(module, str):
            assert f"note: {host}: skipped" in text
        else:
            assert str(module.LABEL) in text


def test_demo_rejects_unknown_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_main(["demo", "--hosts", "local,mars"])
    assert code == 2
    assert "unknown host(s) mars" in capsys.readouterr().err


def test_run_streams_text_then_prints_the_summary() -> None:
    script = [call("shout", {"text": "hi"}), say("The answer is HI, streamed in pieces.")]
    with ChatEmulator(script, chunk_size=6) as emu:
        code, text = run_main(
            [
                "run",
                "--provider",
                "local",
                "--base-url",
                emu.base_url,
                "--api-key",
                emu.api_key or "",
                "--model",
                "m",
                "--tools",
                "test_cli:TOOLS",
                "--prompt",
                "shout hi",
            ]
        )
    assert code == 0
    assert text.startswith("The answer is HI, streamed in pieces.\n")
    assert emu.requests[1].tool_results[0].text == "HI"
    assert emu.received[0]["stream"] is True
    assert "shout(text='hi')" in text
    assert emu.received[0]["tools"][0]["function"]["name"] == "shout"


class _TimedOut(io.StringIO):
    """Records when each piece of text was written."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.writes.append((time.monotonic(), text))
        return super().write(text)


def test_run_writes_each_delta_as_it_arrives() -> None:
    answer = "one two three four five six"
    faults = ChatFaults(chunk_delay=0.05)
    with ChatEmulator([say(answer)], chunk_size=5, faults=faults) as emu:
        out = _TimedOut()
        argv = ["run", "--base-url", emu.base_url, "--api-key", emu.api_key or ""]
        code = cli.main([*argv, "--model", "m", "--prompt", "q"], out=out)
    assert code == 0
    deltas = []
    for when, text in out.writes:
        if "|" in text:  # the summary table
            break
        deltas.append((when, text))
    assert "".join(t for _, t in deltas).strip() == answer
    pieces = [(w, t) for w, t in deltas if t.strip()]
    assert len(pieces) == 6  # one write per 5-character chunk, not one at the end
    # written while the stream was still arriving: 50 ms apart, not in one burst
    assert pieces[-1][0] - pieces[0][0] >= 4 * 0.05 * 0.8


def test_run_without_stream(capsys: pytest.CaptureFixture[str]) -> None:
    with ChatEmulator([say("whole")]) as emu:
        code, text = run_local(emu, "q", "--no-stream", "--tools", "test_cli:shout")
    assert code == 0
    assert "stream" not in emu.received[0]
    assert "whole" in text


@pytest.mark.parametrize(
    "ref", ["test_cli:shout", "test_cli:TOOLS", "test_cli:TOOL_TUPLE", "test_cli:TOOLSET"]
)
def test_run_tools_takes_a_tool_a_list_a_tuple_or_a_toolset(ref: str) -> None:
    with ChatEmulator([call("shout", {"text": "hi"}), say("ok")]) as emu:
        code, _ = run_local(emu, "q", "--no-stream", "--tools", ref)
    assert code == 0
    assert emu.received[0]["tools"][0]["function"]["name"] == "shout"
    assert emu.requests[1].tool_results[0].text == "HI"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "--model", "m", "--prompt", "x", "--base-url", "nope"], "invalid_opts"),
        (["run", "--prompt", "x"], "--model"),
        (["run", "--model", "m", "--prompt", "x", "--tools", "nosuchmod:x"], "nosuchmod"),
        (["run", "--model", "m", "--prompt", "x", "--tools", "noattr"], "module:attr"),
        (
            ["run", "--model", "m", "--prompt", "x", "--tools", "test_cli:NOT_A_TOOL"],
            "test_cli:NOT_A_TOOL is int: not a tool, a function, a Toolset or a list of them",
        ),
        (
            ["run", "--model", "m", "--prompt", "x", "--tools", "test_cli:BAD_LIST"],
            "'not a tool' in it is not a tool or a function",
        ),
        (["run", "--model", "m", "--prompt", "x", "--max-retries", "-1"], "max_retries"),
        (["frobnicate"], "invalid choice"),
        (["emulate", "mars"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_usage_exits_2_with_a_named_error(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run_main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err
    assert "Traceback" not in err


def test_refused_credentials_are_configuration_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Missing or refused credentials exit 2 on every host (AgentCore: tests/agentcore)."""
    with ChatEmulator([say("x")]) as emu:
        code, _ = run_main(
            [
                "run",
                "--base-url",
                emu.base_url,
                "--api-key",
                "wrong",
                "--model",
                "m",
                "--prompt",
                "q",
            ]
        )
    assert code == 2
    assert "managedloop: error: authentication_error" in capsys.readouterr().err


def test_run_failure_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    argv = ["run", "--base-url", url, "--api-key", "k", "--model", "m", "--prompt", "q"]
    code, _ = run_main([*argv, "--max-retries", "0"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("managedloop: failed: ")
    assert len(err.splitlines()) == 1


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_main(["--help"])
    assert code == 0
    assert "demo" in capsys.readouterr().out


def test_render_table_wraps_long_cells() -> None:
    table = render.render_table(["", "A"], [["text", "word " * 20]])
    lines = table.splitlines()
    assert len(lines) > 3
    assert all(len(line) <= len("text | ") + render.CELL for line in lines)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT semantics")
def test_emulate_serves_until_interrupted() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "managedloop.cli", "emulate", "local", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 20
        lines: list[str] = []
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if line.startswith("api_key="):
                break
        base_url = next(x for x in lines if x.startswith("base_url=")).split("=", 1)[1].strip()
        key = next(x for x in lines if x.startswith("api_key=")).split("=", 1)[1].strip()
        from managedloop import AgentSpec, run_sync
        from managedloop.providers import Local

        result = run_sync(
            Local(model="m", base_url=base_url, api_key=key),
            agent=AgentSpec(tools=[shout]),
            prompt="q",
        )
        assert result.text == "Done. EXAMPLE"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    assert code == 0


# -- model settings (issue 8 item 3) ----------------------------------------------------


def test_run_sends_model_settings_as_body_keys() -> None:
    with ChatEmulator([say("ok")]) as emu:
        code, _ = run_local(
            emu,
            "q",
            "--no-stream",
            "--tool-choice",
            "auto",
            "--max-tokens",
            "64",
            "--temperature",
            "0",
            "--set",
            "seed=7",
            "--set",
            "user=me",
            "--set",
            'stop=["\\n", "END"]',
            "--set",
            'response_format={"type": "json_object"}',
        )
    assert code == 0
    body = emu.received[0]
    assert body["tool_choice"] == "auto"
    assert body["max_tokens"] == 64
    assert body["temperature"] == 0.0
    assert body["seed"] == 7  # JSON: a number
    assert body["user"] == "me"  # not JSON: the string itself
    assert body["stop"] == ["\n", "END"]
    assert body["response_format"] == {"type": "json_object"}


def test_run_tool_choice_takes_a_tool_name_or_a_json_object() -> None:
    with ChatEmulator([call("shout", {"text": "hi"}), say("ok")]) as emu:
        code, _ = run_local(
            emu, "q", "--no-stream", "--tools", "test_cli:shout", "--tool-choice", "shout"
        )
    assert code == 0
    assert emu.received[0]["tool_choice"] == {"type": "function", "function": {"name": "shout"}}
    forced = '{"type": "function", "function": {"name": "shout"}}'
    with ChatEmulator([say("ok")]) as emu:
        code, _ = run_local(emu, "q", "--no-stream", "--tool-choice", forced)
    assert code == 0
    assert emu.received[0]["tool_choice"] == {"type": "function", "function": {"name": "shout"}}


def test_run_without_model_settings_sends_none() -> None:
    with ChatEmulator([say("ok")]) as emu:
        code, _ = run_local(emu, "q", "--no-stream")
    assert code == 0
    for key in ("tool_choice", "max_tokens", "temperature", "seed"):
        assert key not in emu.received[0]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--max-tokens", "0"], "--max-tokens: must be >= 1"),
        (["--max-tokens", "lots"], "--max-tokens: not an integer"),
        (["--temperature", "-1"], "--temperature: must be a finite number >= 0"),
        (["--temperature", "nan"], "--temperature: must be a finite number >= 0"),
        (["--temperature", "warm"], "--temperature: not a number"),
        (["--tool-choice", "any tool"], "--tool-choice: takes auto, none, required"),
        (["--tool-choice", "{nope"], "--tool-choice: not a JSON object"),
        (["--tool-choice", "{}]"], "--tool-choice: not a JSON object"),
        (["--set", "seed"], "--set: takes key=value"),
        (["--set", "=7"], "--set: takes key=value"),
        (["--set", "model=other"], "model is written by the loop itself"),
        (["--set", "stream=true"], "stream is written by the loop itself"),
        (["--set", "temperature=1e999"], "is not a finite number"),
        (["--set", "max_tokens=5", "--max-tokens", "6"], "contradicts --max-tokens"),
    ],
)
def test_bad_model_settings_are_usage_errors(
    extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with ChatEmulator([say("never")]) as emu:
        code, _ = run_local(emu, "q", *extra)
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err
    assert "Traceback" not in err
    assert emu.received == []  # refused before any request


def test_the_same_setting_twice_agreeing_is_fine() -> None:
    with ChatEmulator([say("ok")]) as emu:
        code, _ = run_local(emu, "q", "--no-stream", "--set", "max_tokens=6", "--max-tokens", "6")
    assert code == 0
    assert emu.received[0]["max_tokens"] == 6


# -- rough edges (issue 8) --------------------------------------------------------------


def test_emulate_on_a_busy_port_is_a_usage_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        for host in cli.HOSTS:
            code, _ = run_main(["emulate", host, "--port", str(port)])
            err = capsys.readouterr().err
            assert code == 2, host
            assert f"cannot serve on 127.0.0.1:{port}" in err
            assert "pick another --port" in err
            assert "Traceback" not in err


def test_emulate_that_fails_to_start_is_a_failure_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Broken:  # an emulator that cannot start for a reason other than its port
        @staticmethod
        def emulate(host: str, port: int) -> None:
            raise EmulatorStartError(
                "the chat emulator failed to start on 127.0.0.1:0: OSError: no sockets left",
                host="127.0.0.1",
                port=0,
            )

    monkeypatch.setattr(cli.hosts, "host_module", lambda host: Broken)
    code, _ = run_main(["emulate", "local", "--port", "0"])
    err = capsys.readouterr().err
    assert code == 1
    assert "failed: emulator_start_failed: emulate local: the emulator did not start" in err
    assert "no sockets left" in err
    assert "Traceback" not in err


def test_emulate_on_a_port_taken_after_the_arguments_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The emulator itself finds the port busy (no probe beforehand can rule out the race):
    # its named error becomes the usage message, exit code 2, as for a port busy from start.
    class Raced:
        @staticmethod
        def emulate(host: str, port: int) -> None:
            raise EmulatorStartError(
                f"the chat emulator cannot listen on 127.0.0.1:{port}: port {port} is "
                "already in use (pass another port, or 0 for a free one)",
                code="port_in_use",
                host="127.0.0.1",
                port=port,
            )

    monkeypatch.setattr(cli.hosts, "host_module", lambda host: Raced)
    code, _ = run_main(["emulate", "local", "--port", "8765"])
    err = capsys.readouterr().err
    assert code == 2
    assert "emulate local: cannot serve on 127.0.0.1:8765: port 8765 is already in use" in err
    assert "pick another --port" in err
    assert "Traceback" not in err


def test_emulate_refuses_a_port_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_main(["emulate", "local", "--port", "70000"])
    assert code == 2
    assert "--port must be 0..65535" in capsys.readouterr().err


def test_run_tools_imports_a_module_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cwd_tools_for_cli.py").write_text(
        "import managedloop as ml\n\n"
        "@ml.tool\n"
        "def echo(text: str) -> str:\n"
        '    """Echo."""\n'
        "    return 'echo ' + text\n\n"
        "TOOLS = [echo]\n"
    )
    monkeypatch.chdir(tmp_path)
    # as under the console script: neither the cwd nor "" is on the path
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_tools_for_cli", raising=False)
    with ChatEmulator([call("echo", {"text": "hi"}), say("ok")]) as emu:
        code, _ = run_local(emu, "q", "--no-stream", "--tools", "cwd_tools_for_cli:TOOLS")
    sys.modules.pop("cwd_tools_for_cli", None)
    assert code == 0
    assert emu.requests[1].tool_results[0].text == "echo hi"


def test_python_dash_m_managedloop_runs_the_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "managedloop", "demo", "--hosts", "local"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "managedloop demo:" in proc.stdout
    assert "end_turn" in proc.stdout


def test_a_404_names_the_url_and_hints_at_v1(capsys: pytest.CaptureFixture[str]) -> None:
    with ChatEmulator([say("never")]) as emu:
        root = emu.anthropic_base_url  # http://127.0.0.1:<port>, without /v1
        argv = ["run", "--base-url", root, "--api-key", emu.api_key or "", "--model", "m"]
        code, _ = run_main([*argv, "--prompt", "q", "--no-stream"])
    err = capsys.readouterr().err
    assert code == 1
    assert "HTTP 404" in err
    assert f"at {root}" in err
    assert f"try --base-url {root}/v1" in err
    assert "Traceback" not in err


def test_a_404_under_v1_names_the_url_without_the_v1_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with ChatEmulator([say("never")], faults=ChatFaults(statuses=[404])) as emu:
        code, _ = run_local(emu, "q", "--no-stream")
    err = capsys.readouterr().err
    assert code == 1
    assert f"HTTP 404) at {emu.base_url}" in err
    assert "try --base-url" not in err


def test_a_streamed_run_without_usage_says_so_instead_of_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with ChatEmulator([say("no counts here", usage=None)]) as emu:
        code, text = run_local(emu, "q")
    assert code == 0
    assert emu.received[0]["stream"] is True
    assert "usage not reported" in text
    assert "0 in / 0 out" not in text


def test_a_run_with_usage_prints_the_counts() -> None:
    with ChatEmulator([say("counted", usage=(0, 0))]) as emu:  # zero reported is still reported
        code, text = run_local(emu, "q")
    assert code == 0
    assert "0 in / 0 out" in text
    assert "usage not reported" not in text


def test_every_run_option_has_help() -> None:
    from managedloop.cli import local as local_cli

    parser = cli.build_parser(local_cli)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"


def test_max_turns_defaults_to_the_librarys() -> None:
    from managedloop.cli import local as local_cli
    from managedloop.session.options import DEFAULTS

    args = cli.build_parser(local_cli).parse_args(["run", "--model", "m", "--prompt", "q"])
    assert args.max_turns == DEFAULTS["max_turns"] == 50


def test_a_local_emulator_with_a_model_list_answers_an_unknown_model_as_openai_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json
    import urllib.error
    import urllib.request

    with ChatEmulator([say("served")], models=["gpt-4o"]) as emu:
        code, _ = run_local_model(emu, "gpt-4o-mnii", "--no-stream")
        request = urllib.request.Request(
            f"{emu.base_url}/chat/completions",
            data=json.dumps({"model": "gpt-4", "messages": []}).encode(),
            headers={"Authorization": f"Bearer {emu.api_key}"},
        )
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=30)
        body = json.loads(info.value.read())
        listed = json.loads(urllib.request.urlopen(f"{emu.base_url}/models", timeout=30).read())
        good, text = run_local_model(emu, "gpt-4o")
    assert code == 1
    assert "The model `gpt-4o-mnii` does not exist" in capsys.readouterr().err
    assert info.value.code == 404
    assert body == {
        "error": {
            "message": "The model `gpt-4` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
    }
    assert [m["id"] for m in listed["data"]] == ["gpt-4o"]
    assert good == 0
    assert "served" in text


def run_local_model(emu: ChatEmulator, model: str, *extra: str) -> tuple[int, str]:
    base = ["run", "--base-url", emu.base_url, "--api-key", emu.api_key or ""]
    return run_main([*base, "--model", model, "--prompt", "q", *extra])
