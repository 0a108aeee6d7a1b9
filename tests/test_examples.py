"""The runnable examples in examples/ run offline as ``python examples/NAME.py`` and print
what they say (each against the loopback emulators, in a fresh interpreter, warnings as
errors). docs/examples.md includes these files, so the page shows what is run here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# Generous: a cold interpreter importing the anthropic SDK and botocore on a loaded
# two-core machine; the examples themselves take well under a second each.
RUN_TIMEOUT = 50


def run_example(name: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        cwd=EXAMPLES.parent,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout.splitlines()


def test_claude_lifecycle() -> None:
    out = run_example("claude_lifecycle.py")
    assert re.fullmatch(r"agent: support_[0-9a-f]{8} True", out[0])
    assert out[1:4] == [
        "terminal: end_turn",
        "stop_reason: {'type': 'end_turn'}",
        "text: ada@example.com is on the Pro plan, active since 2021.",
    ]
    assert out[4] == "tools: [('lookup_customer', {'email': 'ada@example.com'})]"
    assert out[5] == "usage: 20 10"
    assert out[6] == "session: True turns: 2"
    assert out[7] == "artifacts: [('summary.txt', b'Pro plan, active.')]"
    assert out[8] == "teardown: {'agent': 'ok', 'environment': 'ok'}"
    assert len(out) == 9


def test_agentcore_lifecycle() -> None:
    out = run_example("agentcore_lifecycle.py")
    assert re.fullmatch(r"harness: weather_agent_[0-9a-f]{8} READY", out[0])
    assert out[1:] == [
        "bad session id: invalid_session_id",
        "terminal: end_turn stop_reason: end_turn",
        "text: It is sunny in Paris.",
        "tools: [('get_weather', {'city': 'Paris'})]",
        "same session: True",
        "reattached: True Still sunny in Paris.",
        "teardown: DELETING",
    ]


def test_one_handler_every_host() -> None:
    out = run_example("one_handler_every_host.py")
    hosts = [line.split()[0] for line in out[:3]]
    assert hosts == ["local", "claude", "agentcore"]
    for line in out[:3]:
        assert "terminal=end_turn turns=2 text='Pro plan.'" in line
        assert "tools=[('lookup_customer', 'ada@example.com')]" in line
    assert out[0].endswith("raw_stop_reason='stop'")
    assert out[1].endswith("raw_stop_reason={'type': 'end_turn'}")
    assert out[2].endswith("raw_stop_reason='end_turn'")
    assert out[3] == "events seen by handle_event: ['agentcore', 'claude', 'local']"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_every_example_file_has_a_test(path: Path) -> None:
    tested = {
        "claude_lifecycle.py",
        "agentcore_lifecycle.py",
        "one_handler_every_host.py",
        "temporal_local.py",
        "ensure_tag_prune.py",  # run by tests/provisioning/test_example.py
    }
    assert path.name in tested, f"examples/{path.name} has no test in tests/test_examples.py"


def test_temporal_local() -> None:
    out = run_example("temporal_local.py")
    assert out[0] == "waiting for: ['refund']"
    assert out[1] == "terminal: end_turn"
    assert out[2] == "tools: ['refund']"
    assert re.fullmatch(r"answered: \['refunded .+'\]", out[3])
    assert len(out) == 4
