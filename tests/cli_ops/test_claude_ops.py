"""``managedloop provision/tag/resolve/prune/ls`` on ``examples/claude.toml`` against the
Claude emulator (issue 10 item 8).

Acceptance lines pinned here:

* "``managedloop provision examples/claude.toml`` run twice against the Claude emulator
  creates nothing the second time":
  ``test_provision_twice_in_subprocesses_creates_nothing_the_second_time`` (real
  ``python -m managedloop`` processes, the default SQLite store under the cache dir; the
  second run sends no request at all) and the in-process ``--json`` twin;
* "examples/ holds a spec file for each host, used by the tests": every test here runs
  ``examples/claude.toml``; ``test_agentcore_ops.py`` runs ``examples/agentcore.toml``.

Also: tag/resolve round trip, an unknown tag exits 3, ``prune --dry-run`` lists without
archiving, then ``prune`` archives exactly those (emulator log), a partial prune exits 4,
``--json`` parses on every command, and no output carries the API key.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from managedloop.cli import main
from managedloop.testing import ClaudeEmulator, ClaudeFaults

from .conftest import EXAMPLES

SPEC = str(EXAMPLES / "claude.toml")


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = main(argv, out=out)
    return code, out.getvalue()


def run_json(argv: list[str]) -> tuple[int, dict[str, Any]]:
    code, text = run([*argv, "--json"])
    doc = json.loads(text)
    assert isinstance(doc, dict)
    return code, doc


def creates(emu: ClaudeEmulator) -> list[Any]:
    return [
        r
        for r in emu.requests
        if r.method == "POST" and r.path in ("/v1/agents", "/v1/environments")
    ]


def archives(emu: ClaudeEmulator) -> list[str]:
    return [r.path for r in emu.requests if r.path.endswith("/archive")]


def test_provision_twice_in_subprocesses_creates_nothing_the_second_time(
    claude_emu: ClaudeEmulator, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, "-m", "managedloop", "provision", SPEC]
    first = subprocess.run(
        cmd, check=False, env=env, capture_output=True, text=True, timeout=50, cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    assert [r.path for r in creates(claude_emu)] == ["/v1/environments", "/v1/agents"]
    assert "support-bot_" in first.stdout
    assert "built" in first.stdout
    seen = len(claude_emu.requests)
    second = subprocess.run(
        [*cmd, "--json"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        cwd=tmp_path,
    )
    assert second.returncode == 0, second.stderr
    assert len(claude_emu.requests) == seen  # a store hit: no create, no request at all
    doc = json.loads(second.stdout)
    assert doc["built"] == 0
    assert [h["status"] for h in doc["handles"]] == ["cached", "cached"]
    assert doc["store"].endswith(str(Path("cache/managedloop/store.sqlite3")))  # the default
    for text in (first.stdout, first.stderr, second.stdout, second.stderr):
        assert claude_emu.api_key not in text


def test_provision_json_then_hit_then_tag_and_resolve_round_trip(
    claude_emu: ClaudeEmulator, store_arg: list[str]
) -> None:
    code, doc = run_json(["provision", SPEC, *store_arg, "--tag", "prod"])
    assert code == 0
    assert doc["ok"]
    assert doc["built"] == 2
    env, agent = doc["handles"]
    assert (env["kind"], agent["kind"]) == ("environment", "agent")
    assert agent["name"].startswith("support-bot_")
    assert agent["status"] == "built"
    seen = len(claude_emu.requests)
    code, again = run_json(["provision", SPEC, *store_arg])
    assert (code, again["built"]) == (0, 0)
    assert len(claude_emu.requests) == seen
    code, resolved = run_json(["resolve", "support-bot:prod", *store_arg])
    assert code == 0
    assert resolved["handle"]["agent_id"] == agent["agent_id"]
    code, env_resolved = run_json(["resolve", "support-env:prod", "--spec", SPEC, *store_arg])
    assert (code, env_resolved["handle"]["environment_id"]) == (0, env["environment_id"])
    code, text = run(["resolve", "support-bot:prod", *store_arg])
    assert code == 0
    assert agent["agent_id"] in text
    assert len(claude_emu.requests) == seen  # resolve reads the store only


def test_unknown_tag_and_bad_reference_exit_codes(
    claude_emu: ClaudeEmulator, store_arg: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = run_json(["resolve", "support-bot:nope", *store_arg])
    assert code == 3
    assert doc == {
        "ok": False,
        "command": "resolve",
        "exit": 3,
        "error": {"code": "unknown_tag", "message": "no tag 'support-bot:nope'"},
    }
    assert run(["resolve", "no-colon", *store_arg])[0] == 2
    assert "invalid_reference" in capsys.readouterr().err
    assert not claude_emu.requests


def test_tag_moves_a_pointer_and_refuses_an_unprovisioned_version(
    claude_emu: ClaudeEmulator, store_arg: list[str], tmp_path: Path
) -> None:
    code, text = run(["tag", SPEC, "prod", *store_arg])
    assert code == 3
    assert text == ""
    run_json(["provision", SPEC, *store_arg])
    first = _variant(tmp_path, "v2")
    code, doc = run_json(["provision", str(first), *store_arg])
    v2 = doc["handles"][1]["digest"][:8]
    code, tagged = run_json(["tag", SPEC, "prod", *store_arg])
    assert (code, tagged["ref"], tagged["previous"]) == (0, "support-bot:prod", None)
    code, moved = run_json(["tag", SPEC, "prod", "--digest", v2, *store_arg])
    assert (code, moved["digest8"], moved["previous"]) == (0, v2, tagged["digest8"])
    assert run_json(["resolve", "support-bot:prod", *store_arg])[1]["handle"]["digest"][:8] == v2
    code, env_tag = run_json(["tag", SPEC, "stable", "--environment", *store_arg])
    assert (code, env_tag["kind"]) == (0, "environment")
    assert run(["tag", SPEC, "prod", "--digest", "deadbeef", *store_arg])[0] == 3
    assert run(["tag", SPEC, "prod", "--digest", "XYZ", *store_arg])[0] == 2
    code, text = run(["tag", SPEC, "canary", *store_arg])
    assert code == 0
    assert "support-bot:canary" in text


def _variant(tmp_path: Path, prompt: str) -> Path:
    text = Path(SPEC).read_text(encoding="utf-8")
    marker = 'system_prompt = "'
    assert marker in text
    path = tmp_path / f"claude-{prompt}.toml"
    path.write_text(text.replace(marker, f"{marker}{prompt}: ", 1), encoding="utf-8")
    return path


def _three_versions(
    claude_emu: ClaudeEmulator, store_arg: list[str], tmp_path: Path
) -> list[dict[str, Any]]:
    agents = []
    for i, prompt in enumerate(("v1", "v2")):
        code, doc = run_json(["provision", str(_variant(tmp_path, prompt)), *store_arg])
        assert code == 0
        agents.append(doc["handles"][1])
        claude_emu.state.agents[doc["handles"][1]["agent_id"]]["created_at"] = (
            f"2026-01-0{i + 1}T00:00:00Z"
        )
    code, doc = run_json(["provision", SPEC, *store_arg])
    agents.append(doc["handles"][1])
    claude_emu.state.agents[doc["handles"][1]["agent_id"]]["created_at"] = "2026-01-03T00:00:00Z"
    return agents  # oldest first; the example's own version is the newest


def test_ls_then_prune_dry_run_lists_without_archiving_then_prune_archives(
    claude_emu: ClaudeEmulator, store_arg: list[str], tmp_path: Path
) -> None:
    v1, v2, v3 = _three_versions(claude_emu, store_arg, tmp_path)
    code, listing = run_json(["ls", SPEC, "--keep", "1", *store_arg])
    assert code == 0
    agents, envs = listing["bases"]
    assert [v["name"] for v in agents["versions"]] == [v3["name"], v2["name"], v1["name"]]
    assert [v["prune"] for v in agents["versions"]] == ["keep", "archive", "archive"]
    assert [v["current"] for v in agents["versions"]] == [True, False, False]
    assert all(v["stored"] for v in agents["versions"])
    assert envs["kind"] == "environment"
    assert len(envs["versions"]) == 1
    code, table = run(["ls", SPEC, "--keep", "1", *store_arg])
    assert code == 0
    assert v1["name"] in table
    assert "archive" in table
    code, dry = run_json(["prune", SPEC, "--keep", "1", "--dry-run", *store_arg])
    assert code == 0
    assert dry["reports"][0]["archived"] == [v1["name"], v2["name"]]  # oldest first
    assert dry["reports"][1]["archived"] == []
    assert not archives(claude_emu)
    code, text = run(["prune", SPEC, "--keep", "1", "--dry-run", *store_arg])
    assert code == 0
    assert "would archive" in text
    run_json(["tag", str(_variant(tmp_path, "v1")), "prod", *store_arg])  # the oldest is tagged
    code, done = run_json(["prune", SPEC, "--keep", "1", *store_arg])
    assert code == 0
    assert done["reports"][0]["archived"] == [v2["name"]]
    assert archives(claude_emu) == [f"/v1/agents/{v2['agent_id']}/archive"]
    code, nothing = run_json(["prune", SPEC, "--keep", "1", *store_arg])
    assert (code, nothing["reports"][0]["archived"]) == (0, [])  # nothing to do is success
    code, listing = run_json(["ls", SPEC, *store_arg])
    assert [v["tags"] for v in listing["bases"][0]["versions"]] == [[], ["prod"]]


def test_a_partial_prune_exits_4_and_reports_what_was_archived(
    claude_emu: ClaudeEmulator, store_arg: list[str], tmp_path: Path
) -> None:
    v1, v2, _ = _three_versions(claude_emu, store_arg, tmp_path)
    claude_emu.faults = ClaudeFaults(
        server_errors=1, server_error_status=400, fault_path=f"/v1/agents/{v2['agent_id']}/archive"
    )
    code, doc = run_json(["prune", SPEC, "--keep", "1", "--only", "agent", *store_arg])
    assert code == 4
    assert doc["ok"] is False
    assert doc["error"]["code"] == "prune_partial"
    (report,) = doc["reports"]
    assert (report["archived"], report["failed"]) == ([v1["name"]], v2["name"])
    assert run(["prune", SPEC, "--keep", "0", *store_arg])[0] == 2
    assert run(["prune", SPEC, *store_arg])[0] == 2  # --keep is required


def test_plain_tables_without_rich(
    claude_emu: ClaudeEmulator, store_arg: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("rich", "rich.table", "rich.console"):
        monkeypatch.setitem(sys.modules, name, None)  # the `cli` extra is not installed
    code, text = run(["provision", SPEC, *store_arg])
    assert code == 0
    assert "provisioned" in text
    assert " | " in text
    assert "support-bot_" in text
