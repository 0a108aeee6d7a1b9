"""The ``managedloop`` command, run in process (``main([...])``) against the emulators."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import pytest

from managedloop import cli
from managedloop.testing import ChatEmulator, call, say
from managedloop.tools import tool


@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


TOOLS = [shout]


def run_main(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main(argv, out=out), out.getvalue()


def test_demo_prints_a_table_with_real_content() -> None:
    code, text = run_main(["demo", "--hosts", "local"])
    assert code == 0
    lines = text.splitlines()
    header = next(line for line in lines if "Local" in line and "|" in line)
    assert header.split("|")[1].strip() == "Local"
    rows = {line.split("|")[0].strip(): line.split("|")[1].strip() for line in lines if "|" in line}
    assert rows["terminal"] == "end_turn"
    assert rows["stop reason"] == "stop"
    assert rows["tokens"] == "20 in / 10 out"
    assert rows["turns"] == "2"
    assert rows["tool calls"].startswith("get_weather(city='example')")
    assert "convert_temperature(celsius=1.5" in text
    assert "Done. Sunny, 18 °C in example" in text  # the tools really ran
    assert "34.7 °F" in text


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


def test_run_without_stream(capsys: pytest.CaptureFixture[str]) -> None:
    with ChatEmulator([say("whole")]) as emu:
        code, text = run_main(
            [
                "run",
                "--base-url",
                emu.base_url,
                "--api-key",
                emu.api_key or "",
                "--model",
                "m",
                "--prompt",
                "q",
                "--no-stream",
                "--tools",
                "test_cli:shout",
            ]
        )
    assert code == 0
    assert "stream" not in emu.received[0]
    assert "whole" in text


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["run", "--model", "m", "--prompt", "x", "--base-url", "nope"], "invalid_opts"),
        (["run", "--prompt", "x"], "--model"),
        (["run", "--model", "m", "--prompt", "x", "--tools", "nosuchmod:x"], "nosuchmod"),
        (["run", "--model", "m", "--prompt", "x", "--tools", "noattr"], "module:attr"),
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


def test_run_failure_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
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
    assert code == 1
    assert "authentication_error" in capsys.readouterr().err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run_main(["--help"])
    assert code == 0
    assert "demo" in capsys.readouterr().out


def test_render_table_wraps_long_cells() -> None:
    table = cli.render_table(["", "A"], [["text", "word " * 20]])
    lines = table.splitlines()
    assert len(lines) > 3
    assert all(len(line) <= len("text | ") + cli._CELL for line in lines)


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
