"""One contract for every ``managedloop`` command (issue 26 item 1-3): ``--json`` on every
command parses, ``--version``, the exit-code table, Ctrl-C, store URLs, where a Local run
goes.

Acceptance lines pinned here:

* "every command's ``--json`` output parses": ``test_every_command_json_parses`` (and its
  error-path twin ``test_errors_are_json_documents_too``);
* "``--version`` prints the package version": ``test_version_prints_the_package_version``;
* "SIGINT to ``managedloop run`` during a 30 s sync tool: one line on stderr, exit 130":
  ``test_ctrl_c_during_a_sync_tool_exits_130_with_one_line`` — bounded by the process's own
  exit: it exits long before the tool's 30 s are over, or ``communicate`` times out;
* "``--store bogus://x resolve ...`` exits non-zero with a named error and creates
  nothing": ``test_an_unknown_store_scheme_is_named_and_creates_nothing``.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import managedloop
from managedloop.cli import exits, main
from managedloop.testing import ChatEmulator, ClaudeEmulator, call, say

from .conftest import EXAMPLES

SPEC = str(EXAMPLES / "claude.toml")
SRC = str(Path(managedloop.__file__).resolve().parents[1])

TOOLS_MODULE = '''
import pathlib, time
import anyio
from managedloop import tool

@tool
def slow() -> str:
    """Sleeps 30 s, as a blocking tool would."""
    pathlib.Path("started").touch()
    time.sleep(30)
    pathlib.Path("finished").touch()
    return "done"

@tool
async def stubborn() -> str:
    """Refuses to stop when cancelled."""
    pathlib.Path("started").touch()
    try:
        await anyio.sleep(30)
    except anyio.get_cancelled_exc_class():
        pathlib.Path("cancelled").touch()
        with anyio.CancelScope(shield=True):
            await anyio.sleep(30)
        raise
    return "done"

@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()
'''


@pytest.fixture
def tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "clitools.py").write_text(TOOLS_MODULE)
    monkeypatch.chdir(folder)
    return folder


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv, out=out), out.getvalue()


def one_document(text: str) -> dict[str, Any]:
    """stdout holds exactly one JSON document (one line), nothing else."""
    assert text.count("\n") == 1, text
    doc = json.loads(text)
    assert isinstance(doc, dict)
    return doc


def test_version_prints_the_package_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "managedloop", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"managedloop {managedloop.__version__}"


def test_every_command_json_parses(
    claude_emu: ClaudeEmulator, store_arg: list[str], tools_dir: Path
) -> None:
    del tools_dir
    seen: dict[str, dict[str, Any]] = {}
    code, text = run(["demo", "--hosts", "local", "--json"])
    seen["demo"] = one_document(text)
    assert code == 0
    assert seen["demo"]["hosts"][0]["result"]["terminal"] == "end_turn"
    with ChatEmulator([call("shout", {"text": "hi"}), say("HI it is")]) as emu:
        argv = ["run", "--base-url", emu.base_url, "--api-key", emu.api_key or ""]
        code, text = run([*argv, "--model", "m", "--tools", "clitools:shout", "--prompt", "q"])
        assert code == 0
        assert "HI it is" in text  # without --json the text streams to stdout
        code, text = run(
            [*argv, "--model", "m", "--tools", "clitools:shout", "--prompt", "q", "--json"]
        )
    seen["run"] = one_document(text)  # with --json the deltas do not stream: one document
    assert code == 0
    assert seen["run"]["result"]["text"] == "HI it is"
    assert seen["run"]["result"]["tool_uses"][0]["input"] == {"text": "hi"}
    for argv in (
        ["provision", SPEC, "--tag", "prod"],
        ["tag", SPEC, "stable"],
        ["resolve", "support-bot:prod"],
        ["ls", SPEC, "--keep", "1"],
        ["prune", SPEC, "--keep", "1", "--dry-run"],
        ["prune", SPEC, "--keep", "1"],
    ):
        code, text = run([*argv, *store_arg, "--json"])
        assert code == 0, text
        seen[argv[0]] = one_document(text)
    for name, doc in seen.items():
        assert doc["ok"] is True
        assert doc["command"] == name
    assert seen["resolve"]["handle"]["name"].startswith("support-bot_")


def test_emulate_json_is_one_document_then_it_serves() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "managedloop", "emulate", "local", "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        doc = json.loads(proc.stdout.readline())
        assert (doc["ok"], doc["command"]) == (True, "emulate")
        assert doc["base_url"].startswith("http://127.0.0.1:")
        argv = ["run", "--base-url", doc["base_url"], "--api-key", doc["api_key"]]
        code, text = run([*argv, "--model", "m", "--prompt", "q", "--json"])  # it serves
        assert code == 0
        assert one_document(text)["result"]["terminal"] == "end_turn"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    ("argv", "exit_code", "error"),
    [
        (["demo", "--hosts", "foo"], 2, "usage"),
        (["run", "--prompt", "q"], 2, "usage"),  # --model is required on Local
        (["resolve", "nobase:prod"], 3, "unknown_tag"),
        (["resolve", "x:prod", "--store", "bogus://x"], 2, "invalid_store"),
        (["provision", "no/such/spec.toml"], 2, "invalid_spec"),
        (["emulate", "local", "--port", "70000"], 2, "usage"),
    ],
)
def test_errors_are_json_documents_too(
    argv: list[str], exit_code: int, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = run([*argv, "--json"])
    doc = one_document(text)
    assert code == exit_code == doc["exit"]
    assert doc["ok"] is False
    assert doc["command"] == argv[0]
    assert doc["error"]["code"] == error
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("managedloop: ")
    assert "Traceback" not in err


def test_the_exit_code_table_is_one_table() -> None:
    assert [code for code, _ in exits.TABLE] == [0, 1, 2, 3, 4, 130]
    from managedloop.cli import ops

    assert (ops.EXIT_USAGE, ops.EXIT_NOT_FOUND, ops.EXIT_INTERRUPTED) == (2, 3, 130)


def test_missing_credentials_exit_2_on_every_host(capsys: pytest.CaptureFixture[str]) -> None:
    """The conftest empties the AWS chain and ANTHROPIC_*: both hosts say configuration."""
    code, _ = run(["run", "--provider", "claude", "--claude-agent-id", "a", "--prompt", "q"])
    assert code == 2
    assert "missing_configuration" in capsys.readouterr().err
    arn = "arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/h-1"
    code, _ = run(["run", "--provider", "agentcore", "--harness-arn", arn, "--prompt", "q"])
    assert code == 2
    assert "authentication_error" in capsys.readouterr().err


def test_an_unknown_store_scheme_is_named_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "empty"
    work.mkdir()
    monkeypatch.chdir(work)
    for argv in (
        ["--store", "bogus://x", "resolve", "x:prod"],  # the acceptance line, as written
        ["resolve", "x:prod", "--store", "bogus://x"],
        ["provision", SPEC, "--store", "bogus://x"],
        ["resolve", "x:prod", "--store", "bogus:x"],
    ):
        code, _ = run(argv)
        assert code == 2
        err = capsys.readouterr().err
        assert "invalid_store" in err
        assert "unknown scheme 'bogus'" in err
    assert list(work.iterdir()) == []
    assert not (tmp_path / "cache").exists()  # the default store was not opened either


def test_a_read_only_command_never_creates_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for store in (f"sqlite:{tmp_path / 'a.sqlite3'}", f"file:{tmp_path / 'b.json'}"):
        code, _ = run(["resolve", "x:prod", "--store", store])
        assert code == 3
        assert "unknown_tag" in capsys.readouterr().err
    code, _ = run(["resolve", "x:prod"])  # the default store, under XDG_CACHE_HOME
    assert code == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aws-empty"]


def test_a_local_run_without_base_url_says_where_it_goes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with ChatEmulator([say("hi")]) as emu:
        monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", emu.api_key or "")
        code, _ = run(["run", "--model", "m", "--prompt", "q", "--json"])
    assert code == 0
    err = capsys.readouterr().err
    assert err == f"managedloop: run: no --base-url: sending to {emu.base_url} ($OPENAI_BASE_URL)\n"


def test_an_api_key_flag_never_goes_to_a_host_nobody_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    code, _ = run(["run", "--model", "m", "--prompt", "q", "--api-key", "sk-secret-123"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--api-key without --base-url would send that key to https://api.openai.com/v1" in err
    assert "sk-secret-123" not in err


def test_run_help_lists_every_hosts_options_whole(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run(["run", "--help"])
    assert code == 0
    text = capsys.readouterr().out
    sections = [text.index(f"--provider {h} (") for h in ("local", "claude", "agentcore")]
    assert sections == sorted(sections)
    for option in ("--tool-choice", "--claude-agent-id", "--harness-arn", "--idle-timeout"):
        assert option in text
    flat = " ".join(text.split())
    assert "(default: $ANTHROPIC_BEARER_TOKEN_FILE)" in flat
    assert "..." not in flat.replace("redis://...", "")


def _spawn_run(emu: ChatEmulator, tool: str, folder: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, str(folder)])}
    argv = ["run", "--base-url", emu.base_url, "--api-key", emu.api_key or ""]
    argv += ["--model", "m", "--tools", f"clitools:{tool}", "--prompt", "q", *extra]
    return subprocess.Popen(
        [sys.executable, "-m", "managedloop", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=folder,
        env=env,
    )


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    """Until ``path`` exists (the tool started); bounded by the process's own exit."""
    for _ in range(3000):  # 60 s of 20 ms polls at most: the tool starts in well under 1 s
        if path.exists():
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError(f"{path.name} never appeared")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT semantics")
def test_ctrl_c_during_a_sync_tool_exits_130_with_one_line(tools_dir: Path) -> None:
    with ChatEmulator([call("slow", {}), say("never")]) as emu:
        proc = _spawn_run(emu, "slow", tools_dir)
        _wait_for(tools_dir / "started", proc)
        proc.send_signal(signal.SIGINT)
        # The tool sleeps 30 s: exiting before that means its thread was abandoned. The
        # cap is only there so a regression fails instead of hanging.
        out, err = proc.communicate(timeout=25)
    assert proc.returncode == 130
    assert not (tools_dir / "finished").exists()
    assert err.splitlines() == [
        "managedloop: interrupted: session cancelled; tool slow cancelled "
        "(a sync tool is abandoned in its thread)"
    ]
    assert "never" not in out


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT semantics")
def test_a_second_ctrl_c_exits_at_once(tools_dir: Path) -> None:
    with ChatEmulator([call("stubborn", {}), say("never")]) as emu:
        proc = _spawn_run(emu, "stubborn", tools_dir)
        _wait_for(tools_dir / "started", proc)
        proc.send_signal(signal.SIGINT)
        _wait_for(tools_dir / "cancelled", proc)  # the async tool was told: it got Cancelled
        proc.send_signal(signal.SIGINT)  # ...and refuses to stop: the second one exits
        _, err = proc.communicate(timeout=25)
    assert proc.returncode == 130
    assert err.splitlines() == ["managedloop: interrupted again: exiting now"]


def test_a_timed_out_run_does_not_wait_for_its_sync_tool_at_exit(tools_dir: Path) -> None:
    """The run's timeout abandons the tool's thread; the process then ends without joining
    it (bounded, as above, by the tool's 30 s against the process's own exit)."""
    with ChatEmulator([call("slow", {}), say("never")]) as emu:
        proc = _spawn_run(emu, "slow", tools_dir, "--timeout", "1")
        _, err = proc.communicate(timeout=25)
    assert proc.returncode == 1
    assert not (tools_dir / "finished").exists()
    assert err.startswith("managedloop: failed: timeout: ")
    assert len(err.splitlines()) == 1


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_run_says_what_it_waits_for_on_a_terminal_and_nothing_when_piped(
    tools_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rich.console import Console

    import managedloop.cli.run
    from managedloop.cli import render

    del tools_dir
    said: list[str] = []

    class Recorded(render.Waiting):
        def show(self, text: str) -> None:
            said.append(text)
            super().show(text)

    monkeypatch.setattr(managedloop.cli.run, "Waiting", Recorded)
    script = [call("shout", {"text": "hi"}), say("done")]
    with ChatEmulator(script) as emu:
        argv = ["run", "--base-url", emu.base_url, "--api-key", emu.api_key or ""]
        argv += ["--model", "m", "--tools", "clitools:shout", "--prompt", "q"]
        assert run(argv)[0] == 0
        assert capsys.readouterr().err == ""  # stderr is not a terminal here: quiet
        screen = io.StringIO()
        monkeypatch.setattr(
            render,
            "make_console",
            lambda file: Console(file=screen, force_terminal=True, width=100, color_system=None),
        )
        monkeypatch.setattr(sys, "stderr", _Tty())
        assert run(argv)[0] == 0
    assert "waiting for the model" in screen.getvalue()  # drawn on the terminal
    assert said[:3] == ["waiting for the model", "running tool shout", "waiting for the model"]
