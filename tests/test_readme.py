"""The README's code blocks run as written, each on its own, in a fresh interpreter.

A reader copies one block, not the page: so no README block may lean on another's names
(no ``<!-- docs: continue -->``), and each runs in a new ``python`` process with nothing
imported first. A block written for the real Claude service (``<!-- docs: claude-emulator
-->``) gets the process-wide configuration pointed at a fresh emulator first, as
``tests/test_docs_blocks.py`` does in process.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from test_docs_blocks import Block, blocks, run_chain

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PYTHON_BLOCKS = [b for b in blocks(README) if b.lang == "python"]

# Run in the child: find the block by its line, run it alone (markers honoured), then
# report the names it left, so a test can look at what the block made.
_CHILD = """
import contextlib, io, json, sys
sys.path.insert(0, {tests!r})
from test_docs_blocks import blocks, run_chain
from pathlib import Path
block = next(b for b in blocks(Path({readme!r})) if b.line == {line})
out = io.StringIO()
with contextlib.redirect_stdout(out):
    namespace = run_chain([block])
names = sorted(k for k in namespace if not k.startswith("__"))
print(json.dumps({{"stdout": out.getvalue(), "names": names}}))
"""


def run_alone(block: Block) -> dict[str, Any]:
    """Run ``block`` in a fresh interpreter; its stdout and the names it defined (once per
    block: the tests below look at one run)."""
    return _run_line(block.line)


@functools.cache
def _run_line(line: int) -> dict[str, Any]:
    code = _CHILD.format(tests=str(ROOT / "tests"), readme=str(README), line=line)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, f"README.md:{line} failed alone:\n{proc.stderr}"
    report = json.loads(proc.stdout.splitlines()[-1])
    assert isinstance(report, dict)
    return report


def test_the_readme_has_blocks_and_none_leans_on_another() -> None:
    assert len(PYTHON_BLOCKS) >= 6
    leaning = [b.line for b in PYTHON_BLOCKS if "continue" in b.marks]
    assert leaning == [], "a README block must run on its own: drop <!-- docs: continue -->"


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"README.md:{b.line}" for b in PYTHON_BLOCKS])
def test_each_block_runs_alone_in_a_fresh_interpreter(block: Block) -> None:
    run_alone(block)


def test_quickstart_runs_as_written() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_chain([PYTHON_BLOCKS[0]])
    lines = out.getvalue().splitlines()
    assert lines[0] == "end_turn"
    assert lines[1] == "stop"
    assert lines[2] == "It is sunny in Paris."
    assert "name='get_weather'" in lines[3]
    assert "'city': 'Paris'" in lines[3]
    assert lines[4].startswith("Usage(input_tokens=20, output_tokens=10")


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ("async with ml.start(", ["Hello! / Sunny tomorrow too."]),
        ("BedrockAgentCore(harness_arn=", ["end_turn ['get_weather']"]),
        ("ml.prune_agents_sync(", ["True True", "True True"]),
    ],
)
def test_the_blocks_print_what_their_comments_say(marker: str, expected: list[str]) -> None:
    """Run alone, the block prints what its ``# ...`` comments promise."""
    block = next(b for b in PYTHON_BLOCKS if marker in b.code)
    for line in expected:
        assert f"# {line}" in block.code  # the comment the reader sees says it
    printed = str(run_alone(block)["stdout"]).splitlines()
    assert printed[-len(expected) :] == expected


def test_the_claude_block_provisions_and_runs_alone() -> None:
    block = next(b for b in PYTHON_BLOCKS if "claude-emulator" in b.marks)
    assert {"handle", "result", "agent", "ml"} <= set(run_alone(block)["names"])


def test_readme_opens_with_the_two_commands() -> None:
    text = README.read_text()
    assert "make demo" in text.split("## Quickstart")[0]
    assert "make test" in text.split("## Quickstart")[0]


def test_the_command_lines_name_what_the_examples_define() -> None:
    """``resolve BASE:TAG`` in the README names the base ``examples/claude.toml`` defines."""
    text = README.read_text()
    bases = re.findall(r"managedloop resolve ([\w-]+):", text)
    assert bases
    spec = (ROOT / "examples" / "claude.toml").read_text()
    name = re.search(r'^name = "([^"]+)"', spec, re.M)
    assert name is not None
    assert set(bases) == {name.group(1)}
