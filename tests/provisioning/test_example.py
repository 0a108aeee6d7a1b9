"""The README's "Provisioning lifecycle" worked example runs as written
(``examples/ensure_tag_prune.py``, offline against the ClaudeEmulator; its own asserts
pin a store hit making no request, tag/resolve, and prune keeping the tagged version)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ensure_tag_prune.py"


def test_the_lifecycle_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "environment: support_env_" in out
    assert "agent: support_bot_" in out
    assert "run: end_turn" in out
    assert "prune would archive: []" in out
