"""telemetry.attach_span: a span hook hears each span's start and stop, with its own
metadata and the state its start returned; what it raises is logged, never the span's."""

from __future__ import annotations

import logging
from typing import Any

import pytest

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
