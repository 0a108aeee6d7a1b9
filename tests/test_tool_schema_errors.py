"""A tool parameter whose type has no JSON Schema is named, with advice that applies to a
tool (issue 26 item 6), not pydantic's model-config hints."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import managedloop as ml


class Thing:
    """A plain class: pydantic cannot describe it."""


def test_the_parameter_without_a_schema_is_named_without_pydantic_hints() -> None:
    with pytest.raises(ml.ToolDefinitionError) as info:

        @ml.tool
        def lookup(city: str, thing: Thing, count: int = 1) -> str:
            """Look up."""
            return city

    error = info.value
    assert error.code == "invalid_tool_definition"
    assert error.context == {"tool": "lookup", "param": "thing"}
    assert "parameter 'thing'" in error.message
    assert "arbitrary_types_allowed" not in error.message
    assert "pydantic-core" not in error.message
    assert "errors.pydantic.dev" not in error.message


def test_a_type_that_fails_only_at_schema_time_is_named_too() -> None:
    with pytest.raises(ml.ToolDefinitionError) as info:

        @ml.tool
        def apply(name: str, fn: Callable[[int], int]) -> str:
            """Apply."""
            return name

    assert info.value.context["param"] == "fn"
    assert "errors.pydantic.dev" not in info.value.message
