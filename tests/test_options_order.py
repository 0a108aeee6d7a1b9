"""``prepare`` checks options in one fixed order, so the first bad option named is stable.

Starting from a call where every option is bad, each step names the next option in the
documented order; putting a good value there moves the error on to the one after.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import managedloop as ml
from fakes import FakeHost
from managedloop.session.options import prepare

# (option named by the error, the bad value, a good value); in prepare's order.
ORDER: list[tuple[str, Any, Any]] = [
    ("bogus", 1, None),  # an unknown option: removed to fix it
    ("provider", object(), FakeHost([])),
    ("turn_guard", 3, None),
    ("agent", None, ml.AgentSpec(name="a")),
    ("prompt", "", "hi"),
    ("require_terminal_tool", "yes", False),
    ("terminal_tool", "", None),
    ("outcome", 5, None),
    ("max_turns", 0, 50),
    ("max_concurrent_tools", 0, 8),
    ("max_total_tokens", 0, None),
    ("max_input_tokens", 0, None),
    ("max_output_tokens", 0, None),
    ("max_reprompts", -1, 2),
    ("tool_timeout", math.nan, None),
    ("timeout", math.nan, None),
    ("telemetry_metadata", [], None),
    ("handler", object(), None),
    ("resume", 3, None),
]
_ARGS = {"provider", "agent", "prompt", "timeout"}


def _call(values: dict[str, Any]) -> None:
    args = {k: v for k, v in values.items() if k in _ARGS}
    options = {k: v for k, v in values.items() if k not in _ARGS}
    prepare(args.pop("provider"), options=options, **args)


def test_the_first_bad_option_is_named_in_a_fixed_order() -> None:
    values = {name: bad for name, bad, _ in ORDER}
    for name, _, good in ORDER:
        with pytest.raises(ml.InvalidOptionsError) as info:
            _call(values)
        assert info.value.context["option"] == name
        if name == "bogus":
            del values[name]
        else:
            values[name] = good
    _call(values)  # every option good: no error
