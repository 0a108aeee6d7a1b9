"""Raw tool arguments: one decoder for every host, and a call with unreadable arguments
never runs (issue 7: ``null`` or invalid JSON used to become ``{}`` and run the tool with
its defaults)."""

from __future__ import annotations

import json
from typing import Any

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


@pytest.mark.parametrize("levels", [MAX_INPUT_DEPTH - 2, MAX_INPUT_DEPTH - 1, MAX_INPUT_DEPTH])
def test_the_shallow_fast_path_keeps_the_limits_of_the_full_checks(levels: int) -> None:
    # Fewer brackets than the limit skips both depth walks (the hot path); at and past the
    # limit both run, so a text and the same value decoded from a mapping agree.
    text = '{"a":' * levels + "1" + "}" * levels
    value = json.loads(text)
    from_text, from_value = decode_tool_input(text), decode_tool_input(value)
    assert from_text == from_value
    if levels < MAX_INPUT_DEPTH:
        assert from_text == (value, None)
    else:  # the innermost value sits one level past the limit
        assert from_text[1] is not None
        assert "nested deeper" in from_text[1]


def test_a_decoded_object_is_handed_over_and_a_given_mapping_copied() -> None:
    given_input = {"city": "Paris"}
    decoded, error = decode_tool_input(given_input)
    assert error is None
    assert decoded == given_input
    assert decoded is not given_input


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


# -- properties (issue 7): what a tool returns always becomes an encodable result ---------

# Text as a model or a tool can produce it: any code point, lone surrogates included
# (hypothesis' text() leaves out the surrogate category by default).
_any_char = st.characters() | st.integers(0xD800, 0xDFFF).map(chr)
_wild_text = st.lists(_any_char, max_size=40).map("".join)
_json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _wild_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_wild_text, children, max_size=4)
    ),
    max_leaves=20,
)


class _Returns:
    """A handler whose every call returns (or raises) a fixed value."""

    def __init__(self, value: object, *, raise_it: bool = False) -> None:
        self.value = value
        self.raise_it = raise_it

    def handle_tool_call(self, name: str, input: dict[str, object], info: object) -> object:
        if self.raise_it:
            raise ValueError(self.value)
        return self.value


async def _served(handler: object) -> ml.ToolResult:
    [result] = await run_tool_calls(handler, [ToolUse(id="p", name="t")], SessionInfo())
    return result


@pytest.mark.fuzz
@given(_json_like)
async def test_any_returned_value_becomes_an_encodable_result(value: object) -> None:
    result = await _served(_Returns(value))
    assert isinstance(result.text, str)
    result.text.encode("utf-8")  # never UnicodeEncodeError on any wire
    assert result.tool_use_id == "p"


@pytest.mark.fuzz
@given(_wild_text, st.booleans())
async def test_any_text_result_or_error_message_is_encodable(text: str, as_error: bool) -> None:
    if as_error:
        result = await _served(_Returns(text, raise_it=True))
        assert result.is_error
    else:
        result = await _served(_Returns(ml.ToolResult(tool_use_id="x", text=text)))
        assert not result.is_error
    result.text.encode("utf-8")
    if not as_error and not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert result.text == text  # encodable text passes through untouched


@pytest.mark.fuzz
@given(_wild_text | st.binary() | _json_like.map(json.dumps))
def test_decode_tool_input_never_raises(raw: str | bytes) -> None:
    decoded, error = decode_tool_input(raw)
    assert isinstance(decoded, dict)
    assert error is None or (isinstance(error, str) and decoded == {})


@pytest.mark.fuzz
@given(st.integers(0, 3 * MAX_INPUT_DEPTH), st.sampled_from("[{"), _wild_text)
def test_deep_or_truncated_nesting_is_refused_not_raised(
    depth: int, opener: str, tail: str
) -> None:
    raw = (opener if opener == "[" else '{"a":') * depth + tail
    decoded, error = decode_tool_input(raw)
    assert isinstance(decoded, dict)
    if depth > MAX_INPUT_DEPTH:
        assert error is not None


def _json_outcome(loads: Any, text: str) -> Any:
    try:
        return "ok", repr(loads(text))
    except (ValueError, RecursionError) as exc:
        return type(exc), str(exc)


@pytest.mark.fuzz
@given(
    st.text(alphabet='{}[]",: \n\r\t\ufeff0123456789.eE-+truefalsnNaI\\u', max_size=30)
    | st.builds(
        json.dumps,
        st.recursive(
            st.none() | st.floats() | st.text(max_size=5),
            lambda i: st.lists(i, max_size=3) | st.dictionaries(st.text(max_size=3), i, max_size=3),
            max_leaves=10,
        ),
    )
)
def test_the_argument_decoder_reads_json_as_json_loads(text: str) -> None:
    """handler._loads (json.loads without its Python frames) gives json.loads's value or
    its error, message included (the message reaches the model in the input error)."""
    from managedloop.handler import _loads

    assert _json_outcome(_loads, text) == _json_outcome(json.loads, text)
