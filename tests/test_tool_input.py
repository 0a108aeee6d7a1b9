"""Raw tool arguments: one decoder for every host, and a call with unreadable arguments
never runs (issue 7: ``null`` or invalid JSON used to become ``{}`` and run the tool with
its defaults)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import managedloop as ml
from managedloop.handler import MAX_INPUT_DEPTH, decode_tool_input, run_tool_calls
from managedloop.results import SessionInfo, ToolUse

pytestmark = pytest.mark.anyio


def _json_children(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.lists(children, max_size=4) | st.dictionaries(
        st.text(max_size=5), children, max_size=4
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"city": "Paris"}', {"city": "Paris"}),
        (b'{"a": 1}', {"a": 1}),
        ({"a": [1, 2]}, {"a": [1, 2]}),
        ("", {}),
        ("   ", {}),
    ],
)
def test_readable_arguments_decode(raw: object, expected: dict[str, object]) -> None:
    assert decode_tool_input(raw) == (expected, None)


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ('{"city": "Par', "not valid JSON"),
        ("null", "got null"),
        (None, "null"),
        ("[1, 2]", "got list"),
        ("42", "got int"),
        (42, "got int"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper"),
        ('{"a":' * 100 + "1" + "}" * 100, "nested deeper"),
    ],
)
def test_unreadable_arguments_name_the_problem(raw: object, needle: str) -> None:
    value, error = decode_tool_input(raw)
    assert value == {}
    assert error is not None
    assert needle in error


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    text = json.dumps({"s": "[" * (MAX_INPUT_DEPTH * 4) + '\\"{'})
    assert decode_tool_input(text) == (json.loads(text), None)


def test_a_deep_mapping_is_refused_without_recursion() -> None:
    value: dict[str, object] = {}
    inner = value
    for _ in range(50_000):
        inner["a"] = {}
        inner = inner["a"]  # type: ignore[assignment]
    assert decode_tool_input(value)[1] is not None


async def test_a_call_with_an_input_error_is_answered_and_never_runs() -> None:
    ran: list[str] = []

    @ml.tool
    def delete_files(pattern: str = "*") -> str:
        """Delete files."""
        ran.append(pattern)
        return "deleted"

    use = ToolUse(id="t1", name="delete_files", input={}, input_error="arguments were null")
    [result] = await run_tool_calls(ml.Toolset([delete_files]), [use], SessionInfo())
    assert ran == []
    assert result.is_error
    assert result.tool_use_id == "t1"
    assert "arguments were null" in result.text


@pytest.mark.fuzz
@given(st.recursive(st.none() | st.booleans() | st.floats() | st.text(), _json_children))
def test_any_json_value_decodes_to_an_object_or_a_reason(value: object) -> None:
    text = json.dumps(value)
    decoded, error = decode_tool_input(text)
    if isinstance(value, dict):
        assert error is None
        assert decoded == json.loads(text)
    else:
        assert decoded == {}
        assert error


@pytest.mark.fuzz
@given(st.binary() | st.text())
def test_arbitrary_bytes_never_raise(raw: bytes | str) -> None:
    decoded, error = decode_tool_input(raw)
    assert isinstance(decoded, dict)
    assert error is None or isinstance(error, str)
