"""Issue 21 item 6: no retired Claude model id anywhere users look, and current defaults.

The retired ids come from ``tests/retired_models.py``, outside every scanned folder (the
emulator's table in ``src/`` holds only the ids the service serves). A match is the id as a
whole token: a Bedrock id that embeds it (``us.anthropic.claude-sonnet-4-5-20250929-v1:0``)
is Bedrock's own, with its own lifecycle, and is not this table's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from managedloop.cli import demo_agent
from managedloop.providers.claude import DEFAULT_MODEL
from managedloop.testing._claude import models
from retired_models import RETIRED

ROOT = Path(__file__).resolve().parent.parent
SCANNED = [ROOT / "src", ROOT / "examples", ROOT / "docs", ROOT / "README.md"]
SUFFIXES = {".py", ".md", ".toml", ".txt", ".yml", ".yaml", ".json", ".cfg", ".ini"}


def _files() -> list[Path]:
    out: list[Path] = []
    for place in SCANNED:
        found = [place] if place.is_file() else sorted(place.rglob("*"))
        out += [p for p in found if p.is_file() and p.suffix in SUFFIXES]
    return out


def _pattern(ids: list[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
    return re.compile(rf"(?<![\w.-])(?:{alternatives})(?![\w.-])")


def test_no_retired_model_id_in_src_examples_docs_or_readme() -> None:
    pattern = _pattern(list(RETIRED))
    files = _files()
    assert len(files) > 50  # the scan reaches the tree (a moved folder must not pass it)
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {match.group(0)}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in pattern.finditer(line)
    ]
    assert hits == []


def test_the_scan_catches_a_retired_id() -> None:
    pattern = _pattern(list(RETIRED))
    assert pattern.search('model = "claude-sonnet-4-5"')
    assert pattern.search("AgentSpec(model='anthropic:claude-sonnet-4-5-20250929')")
    assert not pattern.search('model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"')
    assert not pattern.search('model = "claude-sonnet-4-5x"')


@pytest.mark.parametrize("model", [DEFAULT_MODEL, demo_agent().model])
def test_defaults_name_a_current_active_model(model: str | None) -> None:
    assert model is not None
    status = models.CURRENT.get(model)
    assert status is not None, f"{model} is not a model the service serves"
    assert status.status == "active", f"{model} is {status.status}"
