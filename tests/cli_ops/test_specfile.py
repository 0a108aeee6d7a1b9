"""Spec files: every problem is a clear message naming the file and the key, exit code 2,
before any request; secrets are never accepted in the file nor shown; stores by URL."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from managedloop.cli import main
from managedloop.cli.specfile import SpecError, load, open_spec_store, store_label
from managedloop.stores import FileStore, MemoryStore, SQLiteStore
from managedloop.testing import ClaudeEmulator

from .conftest import EXAMPLES

HOST = '[host]\nkind = "claude"\n'
AGENT = '[agent]\nname = "bot"\nsystem_prompt = "hi"\n'

BAD = [
    ("not toml = = 1", "not valid TOML"),
    (HOST + AGENT + 'colour = "blue"\n', "unknown key agent.colour"),
    ("surprise = 1\n" + HOST + AGENT, "unknown top-level key 'surprise'"),
    ('[host]\nkind = "lambda"\n' + AGENT, "host.kind must be one of claude, agentcore"),
    (AGENT, "[host] is required"),
    (HOST, "[agent] is required"),
    (HOST + '[agent]\nsystem_prompt = "x"\n', "agent.name is required"),
    (HOST + 'api_key = "sk-ant-SECRET"\n' + AGENT, "never holds a secret"),
    (HOST + 'password = "hunter2"\n' + AGENT, "never holds a secret"),
    (HOST + 'region = "x"\n' + AGENT, "unknown key host.region for claude"),
    (HOST + "max_retries = -1\n" + AGENT, "host.max_retries must be a number >= 0"),
    (HOST + AGENT + 'effort = "extreme"\n', "agent.effort"),
    (HOST + AGENT + 'tools = ["nosuchmodule_xyz:tool"]\n', "agent.tools: nosuchmodule_xyz:tool"),
    (HOST + AGENT + "tools = [1]\n", "agent.tools is a list"),
    (HOST + AGENT + 'tools = ["json:__name__"]\n', "is str: not a tool, a function"),
    (HOST + AGENT + 'tools = ["json"]\n', "'json' is not module:attr"),
    (HOST + AGENT + '[[agent.tool_definitions]]\nname = "bad name!"\n', "tool_definitions[0]"),
    (HOST + AGENT + '[[agent.tool_definitions]]\nname = "t"\nimpl = "x"\n', "unknown key 'impl'"),
    (
        HOST + AGENT + '[environment]\nruntimes = [{ lang = "Py thon", version = "1" }]\n',
        "environment",
    ),
    ("store = 3\n" + HOST + AGENT, "store must be a non-empty string"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_spec_file_is_exit_2_with_a_clear_message_before_any_request(
    claude_emu: ClaudeEmulator,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    message: str,
) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(text, encoding="utf-8")
    store = ["--store", str(tmp_path / "s.sqlite3")]
    for command in (["provision", str(spec)], ["ls", str(spec)], ["tag", str(spec), "prod"]):
        out = io.StringIO()
        assert main([*command, *store], out=out) == 2
        err = capsys.readouterr().err
        assert message in err
        assert str(spec) in err
        assert "SECRET" not in err
        assert "hunter2" not in err
        assert out.getvalue() == ""
    out = io.StringIO()
    assert main(["provision", str(spec), *store, "--json"], out=out) == 2
    doc = json.loads(out.getvalue())
    assert (doc["ok"], doc["exit"], doc["error"]["code"]) == (False, 2, "invalid_spec")
    assert "SECRET" not in out.getvalue()
    assert not claude_emu.requests


def test_missing_files_unset_keys_and_bad_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["provision", str(tmp_path / "nope.toml")]) == 2
    assert "no such spec file" in capsys.readouterr().err
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # the example names it
    assert main(["provision", str(EXAMPLES / "claude.toml")]) == 2
    assert "ANTHROPIC_API_KEY (host.api_key_env) is not set" in capsys.readouterr().err
    unset = tmp_path / "unset.toml"
    unset.write_text(
        '[host]\nkind = "agentcore"\naccess_key_id_env = "NOPE_UNSET_VAR"\n' + AGENT,
        encoding="utf-8",
    )
    for command in ("provision", "ls"):  # the commands that reach the host need the key
        assert main([command, str(unset), "--store", "memory:"]) == 2
        assert "NOPE_UNSET_VAR (host.access_key_id_env) is not set" in capsys.readouterr().err
    assert main(["prune", str(EXAMPLES / "claude.toml"), "--keep", "x"]) == 2
    assert main(["provision", "--help"]) == 0
    assert "\n  4    partial prune" in capsys.readouterr().out  # the exit-code table is in the help


def test_env_settings_win_and_numbers_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "a.toml"
    spec.write_text(
        '[host]\nkind = "agentcore"\nregion = "us-east-1"\nregion_env = "MY_REGION"\n'
        'timeout_env = "MY_TIMEOUT"\nsecret_access_key_env = "MY_SECRET"\n' + AGENT,
        encoding="utf-8",
    )
    assert load(spec).host_settings == {"region": "us-east-1"}
    monkeypatch.setenv("MY_REGION", "eu-west-3")
    monkeypatch.setenv("MY_TIMEOUT", "12.5")
    loaded = load(spec)
    assert loaded.host_settings == {"region": "eu-west-3", "timeout": 12.5}
    assert loaded.credential_env == {"secret_access_key": "MY_SECRET"}
    monkeypatch.setenv("MY_TIMEOUT", "soon")
    with pytest.raises(SpecError, match=r"\$MY_TIMEOUT must be a number"):
        load(spec)


def test_tools_by_import_path_and_by_definition_are_the_same_agent(tmp_path: Path) -> None:
    (tmp_path / "shop_tools.py").write_text(
        "import managedloop as ml\n\n@ml.tool\ndef lookup(order_id: str) -> str:\n"
        '    """Look an order up."""\n    return order_id\n',
        encoding="utf-8",
    )
    by_path = tmp_path / "p.toml"
    by_path.write_text(HOST + AGENT + 'tools = ["shop_tools:lookup"]\n', encoding="utf-8")
    spec = load(by_path)
    (definition,) = spec.agent.tool_definitions()
    by_def = tmp_path / "d.toml"
    by_def.write_text(
        HOST
        + AGENT
        + "[[agent.tool_definitions]]\n"
        + f"name = {json.dumps(definition.name)}\n"
        + f"description = {json.dumps(definition.description)}\n"
        + f"input_schema = {_toml_inline(definition.input_schema)}\n",
        encoding="utf-8",
    )
    assert load(by_def).agent.digest == spec.agent.digest


def _toml_inline(value: object) -> str:
    if isinstance(value, dict):
        return (
            "{ "
            + ", ".join(f"{json.dumps(k)} = {_toml_inline(v)}" for k, v in value.items())
            + " }"
        )
    if isinstance(value, list):
        return "[" + ", ".join(_toml_inline(v) for v in value) + "]"
    return json.dumps(value)


def test_stores_by_name_relative_to_the_spec_file(tmp_path: Path) -> None:
    spec_dir = tmp_path / "deploy"
    spec_dir.mkdir()
    for store, kind, where in (
        ('"sqlite:state/a.db"', SQLiteStore, spec_dir / "state" / "a.db"),
        ('"file:state/a.json"', FileStore, spec_dir / "state" / "a.json"),
        ('"memory:"', MemoryStore, None),
    ):
        path = spec_dir / "s.toml"
        path.write_text(f"store = {store}\n" + HOST + AGENT, encoding="utf-8")
        opened, label = open_spec_store(load(path), None)
        try:
            assert isinstance(opened, kind)
            if where is not None:
                opened.put("k", {"v": 1})
                assert where.exists()
            assert label == store.strip('"')
        finally:
            opened.close()
    opened, label = open_spec_store(None, f"sqlite:{tmp_path / 'cli.db'}")
    opened.close()
    assert isinstance(opened, SQLiteStore)


def test_import_managedloop_loads_neither_the_commands_nor_rich() -> None:
    code = (
        "import sys, managedloop; "
        "print(any(m == 'rich' or m.startswith(('rich.', 'managedloop.cli')) for m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert done.stdout.strip() == "False"


def test_a_redis_password_is_never_shown() -> None:
    assert (
        store_label("redis://user:pw123@db.internal:6380/0")
        == "redis://user:***@db.internal:6380/0"
    )
    assert store_label("rediss://:pw123@db/1") == "rediss://:***@db/1"
    assert store_label("redis://db/0") == "redis://db/0"
    assert store_label("state/agents.sqlite3") == "state/agents.sqlite3"
