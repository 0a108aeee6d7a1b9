"""The Claude plug-in of the ``managedloop`` command."""

from __future__ import annotations

import io
import subprocess
import sys

import anthropic
import pytest

from managedloop import cli
from managedloop.cli import claude as host_cli
from managedloop.testing import ClaudeEmulator


def test_demo_runs_on_the_emulator() -> None:
    result = host_cli.demo(cli.demo_agent(), cli.DEMO_PROMPT)
    assert result.terminal.value == "end_turn"
    assert [u.name for u in result.custom_tool_uses] == ["get_weather", "convert_temperature"]


def test_demo_table_shows_both_hosts() -> None:
    out = io.StringIO()
    assert cli.main(["demo", "--hosts", "local,claude"], out=out) == 0
    text = out.getvalue()
    assert "Local" in text
    assert "Claude Managed Agents" in text
    assert '{"type":"end_turn"}' in text


def test_run_provider_claude(monkeypatch: pytest.MonkeyPatch) -> None:
    with ClaudeEmulator() as emu:
        monkeypatch.setenv("ANTHROPIC_API_KEY", emu.api_key)
        monkeypatch.delenv("ANTHROPIC_BEARER_TOKEN_FILE", raising=False)
        out = io.StringIO()
        code = cli.main(
            [
                "run",
                "--provider",
                "claude",
                "--base-url",
                emu.base_url,
                "--prompt",
                "Weather?",
                "--tools",
                "managedloop.cli:get_weather",
            ],
            out=out,
        )
        assert code == 0, out.getvalue()
        assert "Claude Managed Agents" in out.getvalue()
        (agent,) = emu.state.agents.values()
        assert agent["name"].startswith("managedloop-cli_")


def test_emulate_serves_until_interrupted() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "managedloop.cli", "emulate", "claude", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        base_url = lines[1].strip().removeprefix("base_url=")
        api_key = lines[2].strip().removeprefix("api_key=")
        client = anthropic.Anthropic(base_url=base_url, api_key=api_key)
        assert client.beta.agents.list().data == []
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_sessions_verbs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``managedloop sessions list/get/update/archive/delete`` against the emulator."""
    import json

    import managedloop as ml
    from managedloop.providers import ClaudeManagedAgents

    with ClaudeEmulator() as emu:
        monkeypatch.setenv("ANTHROPIC_API_KEY", emu.api_key)
        monkeypatch.delenv("ANTHROPIC_BEARER_TOKEN_FILE", raising=False)
        provider = ClaudeManagedAgents(base_url=emu.base_url)
        spec = ml.AgentSpec(name="cli", model="claude-haiku-4-5")
        sid = ml.run_sync(provider, agent=spec, prompt="hi").session_id
        assert sid is not None
        url = ["--base-url", emu.base_url]

        def main(*argv: str) -> tuple[int, str]:
            out = io.StringIO()
            return cli.main(["sessions", *argv, *url], out=out), out.getvalue()

        assert main("list") == (0, f"{sid} idle -\n")
        assert main("update", sid, "--title", "night", "--set", "team=ops") == (
            0,
            f"{sid} idle night\n",
        )
        code, text = main("get", sid, "--json")
        assert code == 0
        assert json.loads(text)["metadata"] == {"team": "ops"}
        assert main("list", "--status", "running") == (0, "")
        assert main("archive", sid) == (0, f"{sid} idle night (archived)\n")
        assert main("list") == (0, "")
        assert main("delete", sid) == (0, f"{sid} deleted\n")
        code, _ = main("get", sid)
        assert code == 1
        assert "404" in capsys.readouterr().err
        code, _ = main("update", sid, "--set", "novalue")
        assert code == 2
        code, _ = main("get", "../agents")
        assert code == 2
