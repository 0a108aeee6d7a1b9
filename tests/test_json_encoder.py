"""``managedloop._json.encoder`` is ``json.JSONEncoder(**options).encode``: the same text
for every value and the same error for what JSON cannot hold."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from managedloop._json import encoder

OPTIONS: list[dict[str, Any]] = [
    {},
    {"ensure_ascii": False},
    {"sort_keys": True, "default": str},
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8) | st.integers() | st.booleans(), inner, max_size=4)
    ),
    max_leaves=25,
)


def _slow(options: dict[str, Any]) -> Any:
    return json.JSONEncoder(separators=(",", ":"), **options).encode


@pytest.mark.fuzz
@given(json_values)
def test_same_text_as_json_encoder(value: Any) -> None:
    for options in OPTIONS:
        assert _outcome(encoder(**options), value) == _outcome(_slow(options), value)


def _outcome(encode: Any, value: Any) -> Any:
    try:
        return encode(value)
    except TypeError as exc:  # sort_keys over keys of mixed types
        return type(exc), str(exc)


def _error(encode: Any, value: Any) -> tuple[type[BaseException], str]:
    with pytest.raises(Exception) as info:
        encode(value)
    return info.type, str(info.value)


def test_same_errors_as_json_encoder() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    mixed_keys = {"a": 1, 2: 3}
    for value, options in [
        (cycle, {}),
        ({"x": object()}, {}),
        (mixed_keys, {"sort_keys": True, "default": str}),
    ]:
        assert _error(encoder(**options), value) == _error(_slow(options), value)
    # the cycle check is fresh per call: a failed call leaves nothing behind
    encode = encoder()
    shared = {"k": "v"}
    with pytest.raises(TypeError):
        encode({"shared": shared, "bad": object()})
    assert encode([shared, shared]) == '[{"k":"v"},{"k":"v"}]'


def test_default_hook_and_bare_strings() -> None:
    assert encoder(sort_keys=True, default=str)({"b": {1}, "a": "é"}) == '{"a":"\\u00e9","b":"{1}"}'
    assert encoder(ensure_ascii=False)("é\n") == '"é\\n"'


def test_cycles_and_too_deep_values_fail_as_json_encoder_does() -> None:
    """The encoder is built once without the cycle check; what recurses too far is encoded
    again by the checking one, so the error is JSONEncoder's own."""
    cycle: dict[str, Any] = {}
    cycle["self"] = {"inner": [cycle]}
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]

    class Loop:  # the default hook hands back the object that needed it: a cycle too
        pass

    loop = Loop()
    for value, options in [
        (cycle, {}),
        (cycle, {"sort_keys": True, "default": str}),
        (deep, {}),
        (loop, {"default": lambda o: [o]}),
    ]:
        assert _error(encoder(**options), value) == _error(_slow(options), value)
    encode = encoder()
    assert encode({"after": "a failure"}) == '{"after":"a failure"}'  # nothing left behind
