"""The README's quickstart runs as written and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def test_quickstart_runs_as_written() -> None:
    text = README.read_text()
    quickstart = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(quickstart, "README quickstart", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0] == "end_turn"
    assert lines[1] == "stop"
    assert lines[2] == "It is sunny in Paris."
    assert "name='get_weather'" in lines[3]
    assert "'city': 'Paris'" in lines[3]
    assert lines[4].startswith("Usage(input_tokens=20, output_tokens=10")


def test_readme_opens_with_the_two_commands() -> None:
    text = README.read_text()
    assert "make demo" in text.split("## Quickstart")[0]
    assert "make test" in text.split("## Quickstart")[0]


def test_agentcore_snippet_runs_against_the_emulator() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    snippet = next(b for b in blocks if "AgentCoreEmulator" in b)
    namespace: dict[str, object] = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(blocks[0], "README quickstart", "exec"), namespace)
    exec(compile(snippet, "README agentcore", "exec"), namespace)
    result = namespace["result"]
    assert getattr(result, "terminal", None) == "end_turn"
    assert [u.name for u in getattr(result, "custom_tool_uses", [])] == ["get_weather"]


def test_claude_snippet_runs_against_the_emulator() -> None:
    import managedloop as ml
    from managedloop.testing import ClaudeEmulator

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    snippet = next(b for b in blocks if "ClaudeManagedAgents()" in b)
    namespace: dict[str, object] = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(blocks[0], "README quickstart", "exec"), namespace)
    with ClaudeEmulator() as emu:
        ml.configure(api_key=emu.api_key, bearer_token_file=None, base_url=emu.base_url)
        exec(compile(snippet, "README claude", "exec"), namespace)
    result = namespace["result"]
    assert getattr(result, "terminal", None) == "end_turn"
    assert [u.name for u in getattr(result, "custom_tool_uses", [])] == ["get_weather"]
    assert getattr(namespace["handle"], "agent_id", "").startswith("agent_")
