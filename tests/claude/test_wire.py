"""Pure pieces: the SSE decoder, event builders, normalize, consolidation.

Reference §9 lines covered here:

* ``sse_test``: one frame; several frames in one buffer; a trailing partial frame kept;
  CRLF (also split across chunks); multi-line ``data:``; comments, pings and data-less
  frames ignored; undecodable JSON skipped. *Changed on purpose:* an undecodable frame is
  counted and logged, not dropped silently (the issue: no event is dropped silently); a
  frame's type comes from its JSON ``type``, and the SSE ``event:`` name only fills a
  missing one; ``event: error`` raises.
* ``event_test``: user_message, custom_tool_result (is_error), define_outcome
  (max_iterations only when an int), classify -> ``terminal_of`` (end_turn,
  requires_action, retries_exhausted, satisfied / max_iterations_reached / failed).
  *Changed:* an unknown idle type and ``session.error`` map to ``terminated`` (the
  uniform ``Terminal`` has three values; the raw stop reason is kept verbatim).
  tool_confirmation allow/deny: ``test_provider.py``.
* ``consolidate_test``: unanswered_tool_uses. Dedupe lives inside the connection and is
  pinned by the fault matrix (``test_reconnect.py``). *Not ported:*
  ``pending_requires_action`` (unused by the reference's Session).
* ``providers/claude_managed_agents_test`` (normalize lines): usage summed / None;
  requires_action uses in event_ids order with the raw stop_reason; a use not named is
  not surfaced; the most recent idle wins; terminal mapping; terminated / error; idle with
  null or missing stop_reason; unseen ids -> no uses; text joins messages with a newline and
  blocks with "" (thinking skipped), "" without messages, text alongside requires_action;
  server tool uses (input default {}); thesis guard; raw events verbatim; turn_boundary;
  outcome verdicts; span.outcome_evaluation_end is not a boundary; pending_tool_uses over
  a history with a stale idle.
* ``conformance cma_inbound``: the golden end_turn / requires_action / terminated shapes.
* ``client_test``: list_all_events follows ``next_page`` and stops on a repeated cursor;
  the reconnect backoff (§13: base x 2^min(n, 7)).
"""

from __future__ import annotations

import pytest

import managedloop as ml
from managedloop.providers.claude._sse import SSEDecoder, StreamErrorFrameError
from managedloop.providers.claude._wire import (
    custom_tool_result,
    define_outcome,
    ends_turn,
    normalize,
    terminal_of,
    unanswered_tool_uses,
    user_message,
)

T = ml.Terminal
pytestmark = pytest.mark.anyio


def idle(kind: str, ids: list[str] | None = None) -> dict:
    stop: dict = {"type": kind}
    if ids is not None:
        stop["event_ids"] = ids
    return {"type": "session.status_idle", "id": f"i-{kind}", "stop_reason": stop}


def use(i: str, name: str = "t", **kw: object) -> dict:
    return {"type": "agent.custom_tool_use", "id": i, "name": name, "input": {"a": 1}, **kw}


def msg(*texts: str) -> dict:
    return {"type": "agent.message", "content": [{"type": "text", "text": t} for t in texts]}


# -- SSE -----------------------------------------------------------------------------------
def test_sse_frames_partial_crlf_multiline_comments() -> None:
    d = SSEDecoder()
    assert d.feed(b'event: a\ndata: {"type":"x","n":1}\n\n') == [{"type": "x", "n": 1}]
    assert d.feed(b'data: {"type":"y"}\n\ndata: {"ty') == [{"type": "y"}]
    assert d.feed(b'pe":"z"}\r') == []
    assert d.feed(b"\n\r\n") == [{"type": "z"}]  # CRLF split across chunks
    assert d.feed(b'data: {"type":\ndata: "m"}\n\n') == [{"type": "m"}]
    assert d.feed(b": heartbeat\n\nevent: ping\ndata: {}\n\nid: 3\n\n") == []


def test_sse_keeps_frames_without_event_line_and_types_untyped() -> None:
    d = SSEDecoder()
    # the SDK's stream helper drops a frame without `event:`; we keep it
    assert d.feed(b'data: {"type":"session.future"}\n\n') == [{"type": "session.future"}]
    assert d.feed(b'event: agent.message\ndata: {"content":[]}\n\n') == [
        {"type": "agent.message", "content": []}
    ]


def test_sse_undecodable_is_counted_not_silent(caplog: pytest.LogCaptureFixture) -> None:
    d = SSEDecoder()
    assert d.feed(b"data: not json\n\ndata: [1]\n\n") == []
    assert d.undecodable == 2
    assert "not a JSON object" in caplog.text


def test_sse_error_frame_raises() -> None:
    with pytest.raises(StreamErrorFrameError) as info:
        SSEDecoder().feed(b'event: error\ndata: {"type":"error","error":{"type":"overloaded"}}\n\n')
    assert info.value.body["error"]["type"] == "overloaded"


# -- builders ------------------------------------------------------------------------------
def test_builders() -> None:
    assert user_message("hi") == {
        "type": "user.message",
        "content": [{"type": "text", "text": "hi"}],
    }
    assert custom_tool_result("e1", "ok") == {
        "type": "user.custom_tool_result",
        "custom_tool_use_id": "e1",
        "content": [{"type": "text", "text": "ok"}],
        "is_error": False,
    }
    assert custom_tool_result("e1", "bad", True)["is_error"] is True
    with_max = define_outcome(ml.Outcome(description="d", rubric="r", max_iterations=4))
    assert with_max["max_iterations"] == 4
    assert with_max["rubric"] == {
        "type": "text",
        "content": "r",
    }
    assert "max_iterations" not in define_outcome(ml.Outcome(description="d", rubric="r"))


# -- classification and normalize ----------------------------------------------------------
def test_terminal_mapping() -> None:
    assert terminal_of("end_turn") is T.END_TURN
    assert terminal_of("requires_action") is T.REQUIRES_ACTION
    assert terminal_of("satisfied") is T.END_TURN
    assert terminal_of("max_iterations_reached") is T.END_TURN
    for other in ("retries_exhausted", "failed", "budget_reached", "anything", None):
        assert terminal_of(other) is T.TERMINATED


def test_boundaries() -> None:
    assert ends_turn(idle("end_turn"))
    assert ends_turn({"type": "session.status_terminated"})
    assert ends_turn({"type": "session.error", "error": {"retry_status": {"type": "terminal"}}})
    assert not ends_turn({"type": "session.error", "error": {"retry_status": {"type": "retrying"}}})
    assert not ends_turn(msg("x"))
    assert not ends_turn(use("u"))
    assert not ends_turn({"type": "span.outcome_evaluation_end", "result": "needs_revision"})


def test_normalize_usage_sum_and_none() -> None:
    spans = [
        {"type": "span.model_request_end", "model_usage": {"input_tokens": 10, "output_tokens": 5}},
        {"type": "span.model_request_end", "model_usage": {"input_tokens": 3, "output_tokens": 7}},
    ]
    tr = normalize([*spans, idle("end_turn")])
    assert tr.usage is not None
    assert (tr.usage.input_tokens, tr.usage.output_tokens) == (13, 12)
    assert len(tr.usage.raw) == 2
    assert normalize([idle("end_turn")]).usage is None


def test_normalize_requires_action_order_and_filtering() -> None:
    events = [
        use("e1", "a"),
        use("e2", "b"),
        use("e3", "c"),
        msg("thinking"),
        idle("requires_action", ["e2", "e1"]),
    ]
    tr = normalize(events)
    assert tr.terminal is T.REQUIRES_ACTION
    assert [u.id for u in tr.custom_tool_uses] == ["e2", "e1"]  # event_ids order; e3 not named
    assert tr.stop_reason == {"type": "requires_action", "event_ids": ["e2", "e1"]}
    assert tr.text == "thinking"
    assert tr.events == events  # raw, verbatim


def test_normalize_resolves_earlier_batches_and_skips_answered() -> None:
    earlier = {"e1": use("e1", "a"), "e2": use("e2", "b")}
    tr = normalize([idle("requires_action", ["e1", "e2", "zz"])], earlier, answered={"e1"})
    assert [u.id for u in tr.custom_tool_uses] == ["e2"]
    assert normalize([idle("requires_action", ["zz"])]).custom_tool_uses == []


def test_normalize_most_recent_boundary_and_odd_idles() -> None:
    tr = normalize([idle("requires_action", ["x"]), msg("a"), idle("end_turn")])
    assert tr.terminal is T.END_TURN
    for stop in (None, "missing"):
        ev = {"type": "session.status_idle"}
        if stop is None:
            ev["stop_reason"] = None
        tr = normalize([ev])
        assert tr.terminal is T.TERMINATED
        assert tr.custom_tool_uses == []
    assert normalize([{"type": "session.status_terminated"}]).terminal is T.TERMINATED
    assert normalize([msg("x")]).terminal is T.TERMINATED  # no status event at all


def test_normalize_text_and_server_tools() -> None:
    thinking = {
        "type": "agent.message",
        "content": [{"type": "thinking"}, {"type": "text", "text": "b"}],
    }
    tr = normalize([msg("hi ", "there"), thinking, idle("end_turn")])
    assert tr.text == "hi there\nb"
    assert normalize([idle("end_turn")]).text == ""
    server = {"type": "agent.tool_use", "id": "s1", "name": "bash"}
    tr = normalize([server, use("c1"), idle("requires_action", ["c1"])])
    assert [u.name for u in tr.server_tool_uses] == ["bash"]
    assert tr.server_tool_uses[0].input == {}
    assert [u.id for u in tr.custom_tool_uses] == ["c1"]  # thesis guard


def test_normalize_thread_ids() -> None:
    tr = normalize([use("c1", session_thread_id="sthr_1"), idle("requires_action", ["c1"])])
    assert tr.custom_tool_uses[0].thread_id == "sthr_1"


def test_outcome_verdicts() -> None:
    def graded(result: str) -> ml.Terminal:
        ev = {"type": "span.outcome_evaluation_end", "result": result}
        return normalize([ev, idle("end_turn")]).terminal

    assert graded("satisfied") is T.END_TURN
    assert graded("max_iterations_reached") is T.END_TURN
    assert graded("failed") is T.TERMINATED


def test_unanswered_tool_uses() -> None:
    history = [
        use("e1"),
        use("e2"),
        use("e3"),
        idle("requires_action", ["e1", "e2", "e3"]),
        {"type": "user.custom_tool_result", "custom_tool_use_id": "e1"},
        idle("requires_action", ["e2"]),  # a stale idle
    ]
    assert [u.id for u in unanswered_tool_uses(history)] == ["e2", "e3"]
    history += [{"type": "user.custom_tool_result", "custom_tool_use_id": i} for i in ("e2", "e3")]
    assert unanswered_tool_uses(history) == []


async def test_list_all_follows_cursors_and_stops_on_a_repeat() -> None:
    from types import SimpleNamespace

    from managedloop.providers.claude._api import Api, settings

    fake = SimpleNamespace(with_options=lambda **_: None)
    api = Api(fake, settings(api_key="sk-x"))  # type: ignore[arg-type]
    pages = {
        None: (["e1"], "c1"),
        "c1": (["e2"], "c2"),
        "c2": (["e3"], None),
        "loop": (["x"], "loop"),  # a pathological server repeating its cursor
    }
    asked: list[str | None] = []

    def fetch(start: str | None):  # type: ignore[no-untyped-def]
        async def page(cursor: str | None) -> SimpleNamespace:
            asked.append(cursor)
            data, nxt = pages[cursor if cursor is not None else start]
            return SimpleNamespace(data=data, next_page=nxt)

        return page

    assert await api.list_all("/v1/x", fetch(None)) == ["e1", "e2", "e3"]
    assert asked == [None, "c1", "c2"]
    asked.clear()
    assert await api.list_all("/v1/x", fetch("loop")) == ["x", "x"]  # fetched once more
    assert asked == [None, "loop"]


def test_reconnect_backoff_is_capped_exponential() -> None:
    from managedloop.providers.claude._connection import StreamOptions

    policy = StreamOptions(backoff=0.5, max_reconnects=10, idle_timeout=1, sleep=None).reconnect
    assert [policy.ceiling(n) for n in range(3)] == [0.5, 1.0, 2.0]
    assert policy.ceiling(7) == policy.ceiling(30) == 64.0
    assert all(32.0 <= policy.backoff(30) <= 64.0 for _ in range(20))  # jittered below it
