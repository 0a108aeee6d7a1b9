"""``managedloop provision/ls/prune`` on ``examples/agentcore.toml`` against the AgentCore
emulator (issue 10 item 8).

Acceptance line pinned here: "the AgentCore one shows progress while waiting" — the
harness and then its endpoint are polled until READY on a ``ManualClock`` shared with the
emulator (``ops.set_testing``), so the waits are exact and take no wall-clock time, and the
progress shows up in each of the three forms: one line per status change on a non-terminal
stderr (a cron log), JSON lines with ``--json``, and the ``rich`` live display on a
terminal (a forced-terminal console). A second provision creates nothing.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from managedloop.cli import main, render
from managedloop.testing import AgentCoreEmulator

from .conftest import EXAMPLES

SPEC = str(EXAMPLES / "agentcore.toml")


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv, out=out), out.getvalue()


def test_provision_shows_progress_until_ready_and_a_second_run_creates_nothing(
    agentcore_emu: AgentCoreEmulator, store_arg: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = run(["provision", SPEC, *store_arg])
    assert code == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("waiting: ")]
    harness = [line for line in lines if line.startswith("waiting: harness weather_")]
    endpoint = [line for line in lines if line.startswith("waiting: endpoint DEFAULT")]
    assert "CREATING" in harness[0]
    assert "READY" in harness[-1]
    assert endpoint
    assert "READY" in endpoint[-1]
    assert lines.index(harness[-1]) < lines.index(endpoint[0])  # harness first, then endpoint
    assert len(lines) == len(set(lines))  # one line per change, not one per poll
    assert "weather_" in text
    assert "built" in text
    assert len(agentcore_emu.operations("CreateHarness")) == 1
    seen = len(agentcore_emu.requests)
    code, text = run(["provision", SPEC, *store_arg])
    assert code == 0
    assert "nothing to build" in text
    assert len(agentcore_emu.requests) == seen  # a store hit: no request
    assert "waiting" not in capsys.readouterr().err


def test_json_progress_lines_and_document(
    agentcore_emu: AgentCoreEmulator, store_arg: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = run(["provision", SPEC, *store_arg, "--json", "--tag", "prod"])
    assert code == 0
    doc = json.loads(text)
    (handle,) = doc["handles"]
    assert (handle["kind"], handle["status"], doc["built"]) == ("harness", "built", 1)
    assert handle["harness_arn"].endswith(handle["harness_id"])
    events = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert {e["event"] for e in events} == {"progress"}
    assert [e["phase"] for e in events] == sorted(
        (e["phase"] for e in events), key=["ready", "endpoint"].index
    )
    assert events[0]["status"] == "CREATING"
    assert (events[-1]["phase"], events[-1]["status"]) == ("endpoint", "READY")
    assert [e["polls"] for e in events if e["phase"] == "ready"] == [1, 2, 3, 4]
    code, text = run(["resolve", "weather:prod", *store_arg, "--json"])
    assert code == 0
    assert json.loads(text)["handle"]["harness_arn"] == handle["harness_arn"]


def test_the_live_display_on_a_terminal(
    agentcore_emu: AgentCoreEmulator, store_arg: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    screen = io.StringIO()

    def terminal(file: Any) -> Console:
        return Console(file=screen, force_terminal=True, width=100, color_system=None)

    monkeypatch.setattr(render, "make_console", terminal)
    code, _ = run(["provision", SPEC, *store_arg])
    assert code == 0
    shown = screen.getvalue()
    assert "harness weather_" in shown
    assert "endpoint DEFAULT" in shown
    assert "CREATING" in shown
    assert "READY" in shown
    assert "\x1b[" in shown  # drawn in place (cursor control), not appended lines


def test_ls_and_prune_delete_old_harnesses(
    agentcore_emu: AgentCoreEmulator, store_arg: list[str], tmp_path: Path
) -> None:
    text = Path(SPEC).read_text(encoding="utf-8")
    old = tmp_path / "old.toml"
    old.write_text(text.replace("be brief.", "be terse."), encoding="utf-8")
    assert run(["provision", str(old), *store_arg])[0] == 0
    harnesses = agentcore_emu._account.harnesses.values()
    (first,) = [h for h in harnesses if h.name.startswith("weather_")]
    first.created_at = 1_700_000_000.0  # older than anything created now
    assert run(["provision", SPEC, *store_arg])[0] == 0
    code, out = run(["ls", SPEC, "--keep", "1", *store_arg, "--json"])
    assert code == 0
    (base,) = json.loads(out)["bases"]
    assert [v["prune"] for v in base["versions"]] == ["keep", "archive"]
    assert [v["status"] for v in base["versions"]] == ["READY", "READY"]
    code, table = run(["ls", SPEC, "--keep", "1", *store_arg])
    assert code == 0
    assert "status" in table
    assert "archive" in table
    assert run(["prune", SPEC, "--keep", "1", "--dry-run", *store_arg])[0] == 0
    assert not agentcore_emu.operations("DeleteHarness")
    code, out = run(["prune", SPEC, "--keep", "1", *store_arg, "--json"])
    assert code == 0
    (report,) = json.loads(out)["reports"]
    assert report["kind"] == "harness"
    assert len(report["archived"]) == 1
    assert len(agentcore_emu.operations("DeleteHarness")) == 1
    assert run(["prune", SPEC, "--keep", "1", "--only", "environment", *store_arg])[0] == 2


def test_a_missing_execution_role_is_usage_before_any_create(
    agentcore_emu: AgentCoreEmulator,
    store_arg: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("MANAGEDLOOP_EXECUTION_ROLE_ARN")
    assert run(["provision", SPEC, *store_arg])[0] == 2
    assert not agentcore_emu.operations("CreateHarness")
    err = capsys.readouterr().err  # the message names the variable to set, not the option
    assert "the environment variable MANAGEDLOOP_EXECUTION_ROLE_ARN" in err
    assert "(host.execution_role_arn_env) is not set" in err


def test_flag_misuse_is_usage_and_an_unusable_store_is_a_failure(
    agentcore_emu: AgentCoreEmulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = run(["tag", SPEC, "prod", "--environment", "--store", "memory:", "--json"])
    assert code == 2
    assert json.loads(text)["error"]["code"] == "usage"
    blocker = tmp_path / "a-file"
    blocker.touch()
    code, text = run(["provision", SPEC, "--store", f"sqlite:{blocker / 'x.db'}", "--json"])
    assert code == 1
    assert json.loads(text)["error"]["code"] == "store_unavailable"
    assert not agentcore_emu.operations("CreateHarness")
    assert "store_unavailable" in capsys.readouterr().err


def test_progress_lines_without_rich(
    agentcore_emu: AgentCoreEmulator,
    store_arg: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("rich", "rich.console", "rich.table", "rich.progress"):
        monkeypatch.setitem(sys.modules, name, None)  # the `cli` extra is not installed
    code, text = run(["provision", SPEC, *store_arg])
    assert code == 0
    assert "weather_" in text
    err = capsys.readouterr().err
    assert "waiting: harness weather_" in err
    assert "waiting: endpoint DEFAULT: READY" in err
