"""The hot path's fast constructors (``managedloop.results.make_*``) build exactly what the
dataclass constructors build: equal objects, every field set, still frozen."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest

from managedloop import results
from managedloop.results import Terminal, ToolResult, ToolUse, TurnResult, Usage


def _same(fast: Any, slow: Any) -> None:
    assert type(fast) is type(slow)
    assert fast == slow
    for f in dataclasses.fields(slow):  # every slot set (an unset one raises here)
        assert getattr(fast, f.name) == getattr(slow, f.name)
    assert repr(fast) == repr(slow)
    assert dataclasses.replace(fast) == slow
    assert copy.copy(fast) == slow
    assert pickle.loads(pickle.dumps(fast)) == slow
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.__setattr__(dataclasses.fields(slow)[0].name, None)


def test_make_tool_use() -> None:
    _same(
        results.make_tool_use("t", "id1", {"a": 1}, "bad", "thread"),
        ToolUse(name="t", id="id1", input={"a": 1}, input_error="bad", thread_id="thread"),
    )
    _same(results.make_tool_use("t", None, {}), ToolUse(name="t"))


def test_make_tool_result() -> None:
    _same(
        results.make_tool_result("x", "text", True),
        ToolResult(tool_use_id="x", text="text", is_error=True),
    )
    _same(results.make_tool_result("x", ""), ToolResult(tool_use_id="x"))


def test_make_usage() -> None:
    _same(
        results.make_usage(3, 4, [{"p": 3}]), Usage(input_tokens=3, output_tokens=4, raw=[{"p": 3}])
    )


def test_make_turn_result() -> None:
    use = ToolUse(name="t", id="1")
    usage = Usage(input_tokens=1)
    fast = results.make_turn_result(
        Terminal.REQUIRES_ACTION, "tool_calls", "hi", [use], usage, [{"e": 1}], True
    )
    slow = TurnResult(
        terminal=Terminal.REQUIRES_ACTION,
        stop_reason="tool_calls",
        text="hi",
        custom_tool_uses=[use],
        usage=usage,
        events=[{"e": 1}],
        host_answered=True,
    )
    _same(fast, slow)
    other = results.make_turn_result(Terminal.END_TURN, "stop", "", [], None, [])
    _same(other, TurnResult(terminal=Terminal.END_TURN, stop_reason="stop"))
    assert (
        other.server_tool_uses
        is not results.make_turn_result(
            Terminal.END_TURN, "stop", "", [], None, []
        ).server_tool_uses
    )  # a fresh default list each time, as default_factory gives


@dataclasses.dataclass(frozen=True, slots=True)
class Two:
    a: int
    b: int


def test_a_field_the_fast_path_does_not_set_fails_at_import() -> None:
    with pytest.raises(RuntimeError, match="does not set every field"):
        results.fast_builder(Two, ("a",))
    with pytest.raises(RuntimeError, match="does not set every field"):
        results.fast_builder(Two, ("b", "a"))  # the fields' order matters too
    built: Any = results.fast_builder(Two, ("a", "b"))()  # a builder is made by calling it
    built.a, built.b = 1, 2
    built.__class__ = Two
    _same(built, Two(1, 2))


class _Initialised:
    def __init__(self) -> None:
        raise AssertionError("a builder must not run a base's __init__")


@dataclasses.dataclass(frozen=True, slots=True)
class WithBase(_Initialised):
    a: int


def test_a_builder_whose_call_would_run_a_bases_init_fails_at_import() -> None:
    with pytest.raises(RuntimeError, match="would run a base's __new__ or __init__"):
        results.fast_builder(WithBase, ("a",))


def test_the_scripted_models_fast_constructors() -> None:
    from managedloop.providers.local import ChatResponse
    from managedloop.testing import ModelRequest
    from managedloop.testing.chat import _response
    from managedloop.testing.script import make_model_request
    from managedloop.tools import ToolDefinition

    tools = [ToolDefinition(name="t")]
    result = ToolResult(tool_use_id="c", text="r")
    messages = [{"role": "user", "content": "hi"}]
    _same(
        make_model_request(3, tools, "hi", [result], messages, "sys", "m"),
        ModelRequest(
            turn=3,
            tools=tools,
            user_text="hi",
            tool_results=[result],
            messages=messages,
            system="sys",
            model="m",
        ),
    )
    message = {"role": "assistant", "content": "x"}
    _same(
        _response(message, "stop", {"prompt_tokens": 1}),
        ChatResponse(message=message, finish_reason="stop", usage={"prompt_tokens": 1}),
    )


def test_the_loops_fast_constructors() -> None:
    from managedloop.hosts import ToolResults, make_tool_results
    from managedloop.session.machine import RunTools, _run_tools

    use, result = ToolUse(name="t", id="1"), ToolResult(tool_use_id="1", text="r")
    fast = make_tool_results([use], [result])
    _same(fast, ToolResults(tool_uses=[use], results=[result]))
    assert fast.decisions is not make_tool_results([], []).decisions  # a fresh dict each
    _same(_run_tools([use], ()), RunTools([use]))


def test_make_session_result() -> None:
    from managedloop.results import SessionResult

    use, usage = ToolUse(name="t", id="1"), Usage(input_tokens=2)
    _same(
        results.make_session_result(
            Terminal.END_TURN, "stop", None, "s", "hi", [use], [], usage, 3, [{"e": 1}], [{}]
        ),
        SessionResult(
            terminal=Terminal.END_TURN,
            stop_reason="stop",
            session_id="s",
            text="hi",
            custom_tool_uses=[use],
            usage=usage,
            turns=3,
            events=[{"e": 1}],
            transcript=[{}],
        ),
    )


def test_a_fresh_request_state_equals_the_dataclass_default() -> None:
    from managedloop.session.machine import _fresh, _Request

    assert _fresh(3) == _Request(reprompts_left=3)
    assert _fresh(3).events is not _fresh(3).events  # fresh containers each time
