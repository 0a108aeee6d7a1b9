"""``managedloop run --output``: a JSON Schema file or ``module:Type``; the typed result is
printed as JSON after the summary."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from managedloop import cli
from managedloop.testing import ChatEmulator, call, say

from .models import GOOD


def _run(emu: ChatEmulator, *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    argv = ["run", "--base-url", emu.base_url, "--api-key", emu.api_key or "", "--model", "m"]
    code = cli.main([*argv, "--prompt", "weather?", "--no-stream", *extra], out=out)
    return code, out.getvalue()


def test_output_a_type() -> None:
    with ChatEmulator([say(json.dumps(GOOD))]) as emu:
        code, text = _run(emu, "--output", "output.models:Weather")
    assert code == 0
    assert json.loads(text.strip().splitlines()[-1]) == {
        **GOOD,
        "temperature": {"celsius": 21.5, "feels_like": None},
    }


def test_output_a_json_schema_file_through_the_tool(tmp_path: Path) -> None:
    schema = {
        "title": "Answer",
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
    }
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(schema))
    script = [call("final_result", {"answer": "four"}), call("final_result", {"answer": 4})]
    with ChatEmulator(script) as emu:
        code, text = _run(emu, "--output", str(path), "--tools", "output.models:get_forecast")
    assert code == 0
    assert json.loads(text.strip().splitlines()[-1]) == {"answer": 4}
    assert emu.requests[0].tools[1].input_schema == schema  # shown to the model as given
    assert "'four' is not of type 'integer'" in emu.requests[1].tool_results[0].text


@pytest.mark.parametrize("ref", ["nope.json", "output.models:Nope", "not a ref"])
def test_a_bad_output_is_a_usage_error(ref: str, capsys: pytest.CaptureFixture[str]) -> None:
    with ChatEmulator([say("x")]) as emu:
        code, _ = _run(emu, "--output", ref)
    assert code == 2
    assert "--output" in capsys.readouterr().err
    assert emu.requests == []
