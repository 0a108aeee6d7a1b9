"""telemetry.attach_span: a span hook hears each span's start and stop, with its own
metadata and the state its start returned; what it raises is logged, never the span's."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import managedloop as ml
from managedloop import telemetry


def test_a_hook_hears_start_and_stop_with_its_state() -> None:
    seen: list[Any] = []

    def start(meta: Any, tags: Any) -> Any:
        seen.append(("start", dict(meta), tags))
        return "state"

    def stop(state: Any, duration: float, extra: Any, exc: Any) -> None:
        seen.append(("stop", state, duration >= 0, dict(extra), exc))

    handle = telemetry.attach_span("tool", start, stop)
    try:
        assert telemetry.span_enabled("tool")
        assert not telemetry.enabled("tool.start")  # a hook is not an event listener
        with telemetry.session_scope({"provider": "local"}):
            with telemetry.span("tool", {"tool": "t"}) as extra:
                extra["is_error"] = False
            with pytest.raises(KeyError), telemetry.span("tool", {"tool": "u"}):
                raise KeyError("x")
    finally:
        assert telemetry.detach(handle)
    assert not telemetry.span_enabled("tool")
    assert seen[0] == ("start", {"tool": "t"}, {"provider": "local"})
    assert seen[1] == ("stop", "state", True, {"is_error": False}, None)
    assert seen[2][0] == "start"
    assert seen[3][:4] == ("stop", "state", True, {})
    assert isinstance(seen[3][4], KeyError)


def test_a_start_returning_none_gets_no_stop_and_detaching_midway_still_stops() -> None:
    stops: list[Any] = []
    states = iter([None, "second"])
    handle = telemetry.attach_span(
        "session.turn", lambda _m, _t: next(states), lambda s, *_: stops.append(s)
    )
    with telemetry.span("session.turn", {}):
        pass
    with telemetry.span("session.turn", {}):
        telemetry.detach(handle)  # the span that started while attached still stops
    assert stops == ["second"]


def test_what_a_hook_raises_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def start(_m: Any, _t: Any) -> Any:
        raise RuntimeError("start broke")

    def stop(*_a: Any) -> None:
        raise RuntimeError("stop broke")

    seen: list[str] = []
    broken = telemetry.attach_span("tool", start, stop)
    fine = telemetry.attach_span("tool", lambda _m, _t: "ok", lambda s, *_: seen.append(s))
    stopping = telemetry.attach_span("tool", lambda _m, _t: "ok", stop)
    try:
        with caplog.at_level(logging.ERROR, "managedloop.telemetry"), telemetry.span("tool", {}):
            pass
    finally:
        for handle in (broken, fine, stopping):
            telemetry.detach(handle)
    assert seen == ["ok"]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("span hook" in m for m in messages) == 2, messages


def test_an_unknown_span_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown telemetry span"):
        telemetry.attach_span("nope", lambda *_: None, lambda *_: None)


def test_open_and_close_span_hand_a_lone_hook_the_result_itself() -> None:
    """The session's turns and tool calls: open_span/close_span; a lone hook gets the
    body's result object (no stop dict is built: ``fields`` is not called), ``None`` and
    the exception on a failure; a start returning ``None`` gets no stop."""
    seen: list[Any] = []
    fields_calls: list[Any] = []
    result = ml.ToolResult(tool_use_id="c", text="ok")

    def fields(stop: Any) -> dict[str, Any]:
        fields_calls.append(stop)
        return {"is_error": False}

    states = iter(["one", "two", None])
    handle = telemetry.attach_span(
        "tool",
        lambda meta, tags: next(states),
        lambda state, seconds, stop, exc: seen.append((state, seconds >= 0, stop, exc)),
    )
    try:
        telemetry.close_span(telemetry.open_span("tool", {"tool": "t"}), result, None, fields)
        failure = KeyError("x")
        telemetry.close_span(telemetry.open_span("tool", {"tool": "t"}), None, failure, fields)
        opened = telemetry.open_span("tool", {"tool": "t"})
        assert opened is None  # the start said to skip it
        telemetry.close_span(opened, result, None, fields)
    finally:
        telemetry.detach(handle)
    assert seen == [("one", True, result, None), ("two", True, None, failure)]
    assert fields_calls == []


def test_listeners_of_an_open_span_get_its_stop_fields_and_hooks_the_result() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    stops: list[Any] = []
    result = ml.ToolResult(tool_use_id="c", text="ok")
    listener = telemetry.attach(lambda name, _m, meta: events.append((name, dict(meta))))
    hook = telemetry.attach_span(
        "tool", lambda _m, _t: "s", lambda s, _d, stop, _e: stops.append(stop)
    )
    try:
        with telemetry.session_scope({"provider": "local"}):
            opened = telemetry.open_span("tool", {"tool": "t"})
            telemetry.close_span(opened, result, None, lambda r: {"is_error": r.is_error})
            opened = telemetry.open_span("tool", {"tool": "u"})
            telemetry.close_span(opened, None, ValueError("no"), lambda r: {"is_error": r.is_error})
    finally:
        telemetry.detach(listener)
        telemetry.detach(hook)
    assert stops == [result, None]
    assert [name for name, _ in events] == [
        "managedloop.tool.start",
        "managedloop.tool.stop",
        "managedloop.tool.start",
        "managedloop.tool.exception",
    ]
    assert events[1][1] == {"provider": "local", "tool": "t", "is_error": False}
    assert events[3][1] == {"provider": "local", "tool": "u", "kind": "ValueError", "code": None}


def test_a_lone_hook_that_raises_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_a: Any) -> Any:
        raise RuntimeError("broke")

    handle = telemetry.attach_span("tool", lambda _m, _t: "s", broken)
    try:
        with caplog.at_level(logging.ERROR, "managedloop.telemetry"):
            telemetry.close_span(telemetry.open_span("tool", {}), None)
        starting = telemetry.attach_span("session.turn", broken, broken)
        try:
            with caplog.at_level(logging.ERROR, "managedloop.telemetry"):
                assert telemetry.open_span("session.turn", {}) is None
        finally:
            telemetry.detach(starting)
    finally:
        telemetry.detach(handle)
    assert sum("span hook" in r.getMessage() for r in caplog.records) == 2
