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


def test_the_readme_blocks_run_in_order_and_do_what_they_say() -> None:
    """The quickstart, the live session, the Claude block (written for the real service,
    run against an emulator: see tests/test_docs_blocks.py) and the AgentCore block, as
    one chain in one namespace."""
    from test_docs_blocks import CHAINS, run_chain

    chain = next(c for c in CHAINS if c[0].path == README)  # the first: the host blocks
    assert len(chain) == 4
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        namespace = run_chain(chain)
    assert out.getvalue().splitlines()[5] == "Hello! / Sunny tomorrow too."
    assert getattr(namespace["handle"], "agent_id", "").startswith("agent_")
    result = namespace["result"]  # the last block's: AgentCore
    assert getattr(result, "terminal", None) == "end_turn"
    assert [u.name for u in getattr(result, "custom_tool_uses", [])] == ["get_weather"]
    assert len(getattr(result, "session_id", "")) >= 33  # an AgentCore runtime session id
