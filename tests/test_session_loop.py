"""The session loop against scripted fake hosts (no server).

Reference §9 lines covered here: session_loop_test, session_live_test, session_info_test,
session_metadata_test, session_requires_action_recovery_test, session_resilience_test,
session_resume_test, session_send_event_test, session_terminal_tool_test,
session_text_delta_test, session_timeout_cancel_test, session_transcript_test,
session_turn_guard_test, session/state_test (as LoopOptions defaults).

Deliberate changes from the reference (and why):

* library-made stops are *results*, not errors: max_turns, a guard halt, a token budget,
  an unresolvable requires_action and a missing terminal tool return a ``SessionResult``
  with ``reason`` set and the partial text/tool uses/usage/events kept;
* ``max_turns=N`` allows exactly N turns (the reference ran turn N+1 before tripping);
* a missing terminal tool keeps the host's raw ``stop_reason`` verbatim and says
  ``reason="no_terminal_tool"`` instead of overwriting ``stop_reason``;
* a turn guard returns ``None`` (continue) or a reason string (halt);
* a reattach redrive adds the redriven tool uses to ``custom_tool_uses`` (the reference
  forgot them, §11 item 5);
* a resumed session with nothing pending and no prompt raises ``nothing_to_send`` at once
  instead of waiting for the timeout;
* an exception in ``handle_event`` fails the request with that exception (and the
  connection is closed) rather than being swallowed: a broken observer should not go
  unnoticed (§11 item 15 decided: not caught, but torn down cleanly; live sessions hand it
  to ``result()`` like every other failure, §11 item 16);
* reconnects happen inside a host's connection (Claude), so the reference's
  ``session_reconnect_test`` / ``session_reconnect_default_test`` lines and "a fresh live
  session does not re-deliver its kickoff prompt after a reconnect" are pinned in the
  Claude host's tests; the core only needs the session id a connection reports (pinned
  here: a changed id reaches the next tool call's ``SessionInfo``);
* the "guard halts on the streaming path too" line has no counterpart: there is one loop
  for every host.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import managedloop as ml
from emitted import emitted
from fakes import FakeHost, OutcomeHost, TextDelta, stop, text, tool
from managedloop.hosts import RESTART, RawInput, ToolResults, UserMessage
from managedloop.session.machine import LoopOptions, reprompt_text

pytestmark = pytest.mark.anyio


class Recorder:
    """A handler recording calls and events."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any], ml.SessionInfo]] = []
        self.events: list[tuple[dict[str, Any], ml.SessionInfo]] = []
        self.answers = answers or {}

    def handle_tool_call(self, name: str, input: dict[str, Any], info: ml.SessionInfo) -> Any:
        self.calls.append((name, input, info))
        answer = self.answers.get(name, f"{name} ok")
        if isinstance(answer, Exception):
            raise answer
        return answer

    def handle_event(self, event: dict[str, Any], info: ml.SessionInfo) -> None:
        self.events.append((event, info))


AGENT = ml.AgentSpec(name="a")


def tool_then_text() -> list[Any]:
    t1 = [tool("lookup", {"q": "x"}, id="u1"), stop("requires_action")]
    t2 = [text("the answer"), stop("end_turn")]
    return [t1, t2]


async def test_requires_action_tool_resume_end_turn() -> None:
    turns = tool_then_text()
    host = FakeHost(turns)
    handler = Recorder()
    result = await ml.run(host, agent=AGENT, handler=handler, prompt="go")
    assert result.terminal is ml.Terminal.END_TURN
    assert result.stop_reason == "end_turn"
    assert result.reason is None
    assert result.turns == 2
    assert [u.id for u in result.custom_tool_uses] == ["u1"]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (2, 2)
    assert len(result.usage.raw) == 2
    assert result.events == [*turns[0], *turns[1]]
    assert result.text == "the answer"
    assert [(c[0], c[1]) for c in handler.calls] == [("lookup", {"q": "x"})]
    assert host.inputs[0] == UserMessage("go")
    resume = host.inputs[1]
    assert isinstance(resume, ToolResults)
    assert resume.results == [ml.ToolResult(tool_use_id="u1", text="lookup ok")]
    assert host.closed == 1


async def test_immediate_end_turn_runs_no_tools() -> None:
    handler = Recorder()
    result = await ml.run(FakeHost([[text("hi"), stop()]]), agent=AGENT, handler=handler)
    assert (result.terminal, result.turns, result.text) == (ml.Terminal.END_TURN, 1, "hi")
    assert handler.calls == []


async def test_default_prompt_is_begin() -> None:
    host = FakeHost([[stop()]])
    await ml.run(host, agent=AGENT, handler=Recorder())
    assert host.inputs == [UserMessage("Begin.")]


async def test_tools_of_the_agent_spec_serve_calls_by_default() -> None:
    @ml.tool
    def lookup(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    host = FakeHost(tool_then_text())
    result = await ml.run(host, agent=ml.AgentSpec(tools=[lookup]), prompt="go")
    resume = host.inputs[1]
    assert isinstance(resume, ToolResults)
    assert resume.results[0].text == "found x"
    assert host.connections[0].request.tools[0].name == "lookup"
    assert result.terminal is ml.Terminal.END_TURN


async def test_tool_calls_of_one_turn_run_concurrently_in_model_order() -> None:
    running = 0
    peak = 0

    class Slow:
        async def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await anyio.sleep(0.01 * (5 - int(name[1:])))  # later calls finish first
            running -= 1
            return name

    uses = [tool(f"t{i}", id=f"u{i}") for i in range(5)]
    host = FakeHost([[*uses, stop("requires_action")], [stop()]])
    await ml.run(host, agent=AGENT, handler=Slow(), max_concurrent_tools=3)
    resume = host.inputs[1]
    assert isinstance(resume, ToolResults)
    assert [r.text for r in resume.results] == ["t0", "t1", "t2", "t3", "t4"]
    assert [r.tool_use_id for r in resume.results] == ["u0", "u1", "u2", "u3", "u4"]
    assert peak == 3


async def test_handler_info_and_events() -> None:
    handler = Recorder()
    agent = ml.AgentSpec(name="a", model_config={"metadata": {"tenant": "t1"}})
    result = await ml.run(
        FakeHost(tool_then_text()),
        agent=agent,
        handler=handler,
        telemetry_metadata={"team": "x"},
    )
    info = handler.calls[0][2]
    assert info == ml.SessionInfo(
        session_id="fake_session", provider="fake", metadata={"team": "x", "tenant": "t1"}
    )
    raw = [e for e, _ in handler.events if e["type"] != "managedloop.text_delta"]
    assert raw == result.events
    assert all(i.session_id == "fake_session" for _, i in handler.events)


async def test_text_delta_follows_its_raw_event_and_is_not_recorded() -> None:
    handler = Recorder()
    host = FakeHost([[text("hello"), TextDelta("extra"), TextDelta(""), stop()]])
    result = await ml.run(host, agent=AGENT, handler=handler)
    seen = [e for e, _ in handler.events]
    assert seen == [
        {"type": "text", "text": "hello"},
        {"type": "managedloop.text_delta", "text": "hello"},
        {"type": "managedloop.text_delta", "text": "extra"},
        {"type": "stop", "terminal": "end_turn"},
    ]
    assert all(e["type"] != "managedloop.text_delta" for e in result.events)


async def test_restart_discards_the_turn_buffer_but_not_deliveries() -> None:
    handler = Recorder()
    host = FakeHost([[text("partial"), RESTART, text("whole"), stop()]])
    result = await ml.run(host, agent=AGENT, handler=handler)
    assert result.events == [{"type": "text", "text": "whole"}, stop()]
    assert result.text == "whole"
    assert {"type": "text", "text": "partial"} in [e for e, _ in handler.events]


async def test_events_with_a_repeated_id_are_all_kept() -> None:
    """The loop de-duplicates nothing (managedloop.hosts, invariant 2): de-duplication is
    the host's, so two events sharing an "id" are both delivered and recorded."""
    handler = Recorder()
    dup = {"type": "text", "id": "e1", "text": "a"}
    host = FakeHost([[dup, dict(dup), stop()]])
    result = await ml.run(host, agent=AGENT, handler=handler)
    assert result.events == [dup, dup, stop()]
    assert [e for e, _ in handler.events if e.get("id") == "e1"] == [dup, dup]


async def test_zero_tool_requires_action_ends_without_an_empty_resume() -> None:
    host = FakeHost([[text("hm"), stop("requires_action")]])
    result = await ml.run(host, agent=AGENT, handler=Recorder())
    assert result.terminal is ml.Terminal.TERMINATED
    assert result.reason == "unresolved_requires_action"
    assert result.stop_reason == "requires_action"
    assert result.text == "hm"
    assert len(host.inputs) == 1  # nothing else was sent


async def test_server_tools_held_for_confirmation_are_requires_action() -> None:
    """A requires_action turn whose only tool uses are the host's own (held for a
    confirmation only the caller can give) is not 'unresolved': it waits on the caller."""
    host = FakeHost([[text("searching"), stop("requires_action")]])
    original_open = host.open

    async def open_with_server_tool(request: Any) -> Any:
        conn = await original_open(request)
        normalize = conn.normalize

        def with_server_use(events: Any) -> ml.TurnResult:
            turn = normalize(events)
            return ml.TurnResult(
                terminal=turn.terminal,
                stop_reason=turn.stop_reason,
                text=turn.text,
                server_tool_uses=[ml.ToolUse(id="srv1", name="web_search")],
                usage=turn.usage,
                events=turn.events,
            )

        conn.normalize = with_server_use  # type: ignore[method-assign]
        return conn

    host.open = open_with_server_tool  # type: ignore[method-assign]
    result = await ml.run(host, agent=AGENT, handler=Recorder())
    assert result.terminal is ml.Terminal.REQUIRES_ACTION
    assert result.reason == "tool_confirmation_required"
    assert [u.id for u in result.server_tool_uses] == ["srv1"]
    assert len(host.inputs) == 1  # nothing was sent on the caller's behalf


async def test_tool_uses_telemetry_per_turn() -> None:
    with emitted() as seen:
        await ml.run(
            FakeHost(tool_then_text()),
            agent=AGENT,
            handler=Recorder(),
            telemetry_metadata={"tenant": "t", "terminal": "caller value loses"},
        )
    uses = [(m, md) for n, m, md in seen if n == "managedloop.session.tool_uses"]
    assert uses[0][0] == {"tool_use_count": 1}
    assert uses[0][1]["tool_use_ids"] == ["u1"]
    assert uses[0][1]["tenant"] == "t"
    terminal = [md for n, _, md in seen if n == "managedloop.session.terminal"]
    assert terminal[0]["terminal"] == "end_turn"  # library keys win over caller tags
    assert terminal[0]["tenant"] == "t"
    assert terminal[0]["provider"] == "fake"
    tools = [md for n, _, md in seen if n == "managedloop.tool.stop"]
    assert tools[0]["tool"] == "lookup"
    assert tools[0]["is_error"] is False
    assert tools[0]["session_id"] == "fake_session"
    events = [md for n, _, md in seen if n == "managedloop.stream.event"]
    assert [e["type"] for e in events] == ["tool", "stop", "text", "stop"]


async def test_a_new_session_id_reaches_the_next_tool_call() -> None:
    """A connection that reattaches under a new id (a reconnect) is seen by the handler."""
    host = FakeHost()

    def reconnecting_turn(_: Any) -> list[Any]:
        host.connections[0].session_id = "sess_after_reconnect"
        return [tool("lookup", id="u2"), stop("requires_action")]

    host.turns = [[tool("lookup", id="u1"), stop("requires_action")], reconnecting_turn, [stop()]]
    handler = Recorder()
    result = await ml.run(host, agent=AGENT, handler=handler)
    assert [info.session_id for _, _, info in handler.calls] == [
        "fake_session",
        "sess_after_reconnect",
    ]
    assert result.session_id == "sess_after_reconnect"


async def test_a_non_mapping_event_does_not_crash_the_session() -> None:
    handler = Recorder()
    with emitted(["managedloop.stream.event"]) as seen:
        result = await ml.run(
            FakeHost([["not a mapping", {"messageStart": {"role": "assistant"}}, stop()]]),
            agent=AGENT,
            handler=handler,
            telemetry_metadata={"tenant": "t"},
        )
    assert result.terminal is ml.Terminal.END_TURN
    assert result.events[0] == "not a mapping"
    assert handler.events[0][0] == "not a mapping"
    # stream.event: the type is the envelope key for Converse-style events; caller tags merged
    assert [md["type"] for _, _, md in seen] == [None, "messageStart", "stop"]
    assert all(md["tenant"] == "t" for _, _, md in seen)


async def test_a_raising_handle_event_fails_the_request_and_closes_the_host() -> None:
    class BrokenObserver(Recorder):
        def handle_event(self, event: dict[str, Any], info: ml.SessionInfo) -> None:
            raise ValueError("observer bug")

    host = FakeHost(tool_then_text())
    with pytest.raises(ValueError, match="observer bug"):
        await ml.run(host, agent=AGENT, handler=BrokenObserver())
    assert host.closed == 1
    assert len(host.inputs) == 1  # nothing more was sent after the failure


# -- failures ---------------------------------------------------------------------------


async def test_open_failure_surfaces_verbatim() -> None:
    boom = ml.ProviderError("boom", code="create_session_failed")
    with pytest.raises(ml.ProviderError) as info:
        await ml.run(FakeHost(open_error=boom), agent=AGENT, handler=Recorder())
    assert info.value is boom


async def test_a_raising_host_becomes_a_provider_error_with_the_partial_result() -> None:
    host = FakeHost([[text("so far"), RuntimeError("kaput")]])
    with pytest.raises(ml.ProviderError) as info:
        await ml.run(host, agent=AGENT, handler=Recorder())
    assert info.value.code == "provider_error"
    assert "kaput" in str(info.value)
    partial = info.value.partial_result
    assert partial is not None
    assert partial.events == [{"type": "text", "text": "so far"}]
    assert host.closed == 1


async def test_named_host_errors_pass_through_with_partial_result() -> None:
    err = ml.TransportError("dropped", code="stream_dropped")
    host = FakeHost([*tool_then_text()[:1], [err]])
    with pytest.raises(ml.TransportError) as info:
        await ml.run(host, agent=AGENT, handler=Recorder())
    assert info.value.code == "stream_dropped"
    assert info.value.partial_result is not None
    assert info.value.partial_result.turns == 1
    assert [u.id for u in info.value.partial_result.custom_tool_uses] == ["u1"]


async def test_timeout_tears_down_the_blocked_turn() -> None:
    host = FakeHost(block=True)
    with pytest.raises(ml.SessionTimeoutError) as info:
        await ml.run(host, agent=AGENT, handler=Recorder(), timeout=0.1)
    assert info.value.code == "timeout"
    assert isinstance(info.value, TimeoutError)
    assert info.value.partial_result is not None
    assert host.closed == 1


def test_run_sync_returns_the_same_result() -> None:
    result = ml.run_sync(FakeHost(tool_then_text()), agent=AGENT, handler=Recorder())
    assert result.text == "the answer"


async def test_run_sync_inside_a_loop_is_a_named_error() -> None:
    with pytest.raises(ml.ManagedLoopError) as info:
        ml.run_sync(FakeHost(), agent=AGENT, handler=Recorder())
    assert info.value.code == "sync_in_event_loop"


# -- guards, budgets, max_turns ----------------------------------------------------------


def loops(n: int) -> list[Any]:
    return [[tool("again", id=f"u{i}"), stop("requires_action")] for i in range(n)]


async def test_max_turns_allows_exactly_n_turns() -> None:
    host = FakeHost(loops(5))
    result = await ml.run(host, agent=AGENT, handler=Recorder(), max_turns=3)
    assert result.terminal is ml.Terminal.TERMINATED
    assert result.reason == "max_turns"
    assert result.turns == 3
    assert len(host.inputs) == 3
    # u2 came in the turn that used up the budget: it never ran, so it is not listed
    assert [u.id for u in result.custom_tool_uses] == ["u0", "u1"]


async def test_turn_guard_continue_halts_and_payload() -> None:
    payloads: list[ml.GuardInput] = []

    def guard(state: ml.GuardInput) -> str | None:
        payloads.append(state)
        return None

    result = await ml.run(
        FakeHost(tool_then_text()), agent=AGENT, handler=Recorder(), turn_guard=guard
    )
    assert (result.terminal, result.turns) == (ml.Terminal.END_TURN, 2)
    first = payloads[0]
    assert first.turns == 1
    assert first.session_id == "fake_session"
    assert (first.usage.input_tokens, first.usage.output_tokens, len(first.usage.raw)) == (1, 1, 1)


async def test_turn_guard_halt_is_a_terminated_result() -> None:
    host = FakeHost(loops(5))
    result = await ml.run(
        host,
        agent=AGENT,
        handler=Recorder(),
        turn_guard=lambda s: "budget_exceeded" if s.turns >= 2 else None,
    )
    assert (result.terminal, result.reason, result.turns) == (
        ml.Terminal.TERMINATED,
        "budget_exceeded",
        2,
    )


async def test_guard_wins_over_max_turns_on_the_same_turn() -> None:
    result = await ml.run(
        FakeHost(loops(3)), agent=AGENT, handler=Recorder(), max_turns=1, turn_guard=lambda s: "g"
    )
    assert result.reason == "g"


async def test_token_budget_is_a_guard() -> None:
    result = await ml.run(FakeHost(loops(5)), agent=AGENT, handler=Recorder(), max_total_tokens=5)
    assert (result.reason, result.turns, result.usage.total_tokens) == ("token_budget", 3, 6)
    result = await ml.run(FakeHost(loops(5)), agent=AGENT, handler=Recorder(), max_output_tokens=1)
    assert (result.reason, result.turns) == ("token_budget", 2)
    result = await ml.run(FakeHost(loops(5)), agent=AGENT, handler=Recorder(), max_input_tokens=3)
    assert (result.reason, result.turns) == ("token_budget", 4)


async def test_budget_composes_with_a_user_guard() -> None:
    result = await ml.run(
        FakeHost(loops(5)),
        agent=AGENT,
        handler=Recorder(),
        max_total_tokens=100,
        turn_guard=lambda s: "mine" if s.turns == 2 else None,
    )
    assert result.reason == "mine"


# -- terminal tool -----------------------------------------------------------------------


async def test_terminal_tool_reprompts_then_gives_up() -> None:
    payload_turns: list[int] = []
    host = FakeHost([[text("no")], [text("no")], [text("still no"), stop()]])
    host.turns = [[text("no"), stop()], [text("no"), stop()], [text("still no"), stop()], [stop()]]
    result = await ml.run(
        host,
        agent=AGENT,
        handler=Recorder(),
        require_terminal_tool=True,
        terminal_tool="submit",
        turn_guard=lambda s: payload_turns.append(s.turns),
    )
    assert result.terminal is ml.Terminal.END_TURN
    assert result.reason == "no_terminal_tool"
    assert result.stop_reason == "end_turn"  # the raw value stays verbatim
    assert result.turns == 3
    assert host.inputs[1:] == [UserMessage(reprompt_text("submit"), reprompt=True)] * 2
    assert reprompt_text("submit") == (
        "You returned a response without calling submit. You MUST call submit now to finish "
        "— produce the result via submit."
    )
    assert payload_turns == [1, 2, 3]
    assert len(host.turns) == 1  # no further turn was asked for


async def test_terminal_tool_after_a_reprompt_finishes_normally() -> None:
    host = FakeHost(
        [
            [text("no"), stop()],
            [tool("submit", id="s1"), stop("requires_action")],
            [text("done"), stop()],
        ]
    )
    result = await ml.run(
        host, agent=AGENT, handler=Recorder(), require_terminal_tool=True, terminal_tool="submit"
    )
    assert (result.reason, result.stop_reason, result.turns) == (None, "end_turn", 3)


async def test_terminal_tool_in_the_first_turn_needs_no_reprompt() -> None:
    host = FakeHost([[tool("submit", id="s1"), stop("requires_action")], [stop()]])
    result = await ml.run(
        host, agent=AGENT, handler=Recorder(), require_terminal_tool=True, terminal_tool="submit"
    )
    assert (result.reason, result.turns) == (None, 2)


async def test_zero_reprompts_gives_up_at_once_and_spec_supplies_the_tool() -> None:
    agent = ml.AgentSpec(name="a", tools=[ml.ToolDefinition(name="submit")], terminal_tool="submit")
    result = await ml.run(
        FakeHost([[stop()]]),
        agent=agent,
        handler=Recorder(),
        require_terminal_tool=True,
        max_reprompts=0,
    )
    assert (result.reason, result.turns) == ("no_terminal_tool", 1)


# -- option validation (before anything is opened) ---------------------------------------


@pytest.mark.parametrize(
    ("options", "code", "option"),
    [
        ({"max_turns": 0}, "invalid_opts", "max_turns"),
        ({"max_turns": True}, "invalid_opts", "max_turns"),
        ({"turn_guard": 3}, "invalid_turn_guard", "turn_guard"),
        ({"require_terminal_tool": True}, "terminal_tool_required", "terminal_tool"),
        ({"outcome": {"description": "d", "rubric": "r"}}, "outcome_unsupported", "outcome"),
        ({"outcome": "be good"}, "invalid_opts", "outcome"),
        ({"bogus": 1}, "invalid_opts", "bogus"),
        ({"max_concurrent_tools": 0}, "invalid_opts", "max_concurrent_tools"),
        ({"tool_timeout": -1}, "invalid_opts", "tool_timeout"),
        ({"timeout": 0}, "invalid_opts", "timeout"),
        ({"max_total_tokens": 0}, "invalid_opts", "max_total_tokens"),
        ({"max_reprompts": -1}, "invalid_opts", "max_reprompts"),
        ({"handler": object()}, "invalid_opts", "handler"),
        ({"resume": 42}, "invalid_opts", "resume"),
        ({"resume": ml.SessionResult()}, "invalid_opts", "resume"),
        ({"telemetry_metadata": []}, "invalid_opts", "telemetry_metadata"),
        ({"agent": None}, "invalid_opts", "agent"),
        # issue 7: none of these may reach the wire or raise without a code
        ({"timeout": float("nan")}, "invalid_opts", "timeout"),
        ({"timeout": float("inf")}, "invalid_opts", "timeout"),
        ({"tool_timeout": float("nan")}, "invalid_opts", "tool_timeout"),
        ({"tool_timeout": float("inf")}, "invalid_opts", "tool_timeout"),
        ({"tool_timeout": "5"}, "invalid_opts", "tool_timeout"),
        ({"resume": ""}, "invalid_session_id", "resume"),
        ({"resume": "  "}, "invalid_session_id", "resume"),
        ({"prompt": 123}, "invalid_opts", "prompt"),
        ({"prompt": ""}, "invalid_opts", "prompt"),
        ({"agent": 12345}, "invalid_opts", "agent"),
        ({"agent": ""}, "invalid_opts", "agent"),
        ({"agent": b"agent"}, "invalid_opts", "agent"),
        ({"agent": ["a"]}, "invalid_opts", "agent"),
        ({"max_turns": 1.5}, "invalid_opts", "max_turns"),
        ({"max_turns": "3"}, "invalid_opts", "max_turns"),
        ({"max_concurrent_tools": 2.0}, "invalid_opts", "max_concurrent_tools"),
        ({"max_output_tokens": True}, "invalid_opts", "max_output_tokens"),
        ({"require_terminal_tool": "yes"}, "invalid_opts", "require_terminal_tool"),
        ({"terminal_tool": 5}, "invalid_opts", "terminal_tool"),
        ({"terminal_tool": ""}, "invalid_opts", "terminal_tool"),
        ({"max_reprompts": 1.0}, "invalid_opts", "max_reprompts"),
        ({"telemetry_metadata": {1: "x"}}, "invalid_opts", "telemetry_metadata"),
        ({"outcome": {"description": 1, "rubric": "r"}}, "invalid_opts", "outcome"),
        (
            {"outcome": {"description": "d", "rubric": "r", "max_iterations": True}},
            "invalid_opts",
            "outcome",
        ),
    ],
)
async def test_bad_options_fail_before_open(
    options: dict[str, Any], code: str, option: str
) -> None:
    host = FakeHost([[stop()]])
    kwargs: dict[str, Any] = {"agent": AGENT, "handler": Recorder(), **options}
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.run(host, **kwargs)
    assert info.value.code == code
    assert info.value.context["option"] == option
    assert host.connections == []
    with pytest.raises(ml.InvalidOptionsError):
        ml.start(host, **kwargs)


async def test_a_live_sessions_follow_up_text_is_checked_before_sending() -> None:
    host = FakeHost([[stop()]])
    async with ml.start(host, agent=AGENT, handler=Recorder()) as session:
        with pytest.raises(ml.InvalidOptionsError) as info:
            await session.send(123)  # type: ignore[arg-type]
        assert info.value.context["option"] == "text"
    assert host.inputs == []


async def test_not_a_provider_is_refused() -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.run(object(), agent=AGENT)  # type: ignore[arg-type]
    assert info.value.context["option"] == "provider"


async def test_outcome_kickoff_on_a_host_that_supports_it() -> None:
    host = OutcomeHost([[stop()]])
    outcome = {"description": "d", "rubric": "r", "max_iterations": 2}
    await ml.run(host, agent=AGENT, handler=Recorder(), outcome=outcome, prompt="ignored")
    first = host.inputs[0]
    assert first.outcome == ml.Outcome(description="d", rubric="r", max_iterations=2)  # type: ignore[union-attr]


# -- resume / reattach -------------------------------------------------------------------


async def test_resume_with_a_prompt_delivers_it() -> None:
    host = FakeHost([[text("again"), stop()]])
    previous = ml.SessionResult(session_id="s-old")
    result = await ml.run(host, agent=AGENT, handler=Recorder(), resume=previous, prompt="more")
    assert host.connections[0].request.session_id == "s-old"
    assert host.inputs == [UserMessage("more")]
    assert result.session_id == "s-old"


async def test_resume_mid_requires_action_redrives_pending_and_skips_the_prompt() -> None:
    pending = [ml.ToolUse(id="p1", name="lookup", input={"q": "y"})]
    host = FakeHost([[text("finished"), stop()]], pending=pending)
    handler = Recorder()
    result = await ml.run(host, agent=AGENT, handler=handler, resume="s-old", prompt="ignored")
    assert [c[1] for c in handler.calls] == [{"q": "y"}]
    resume = host.inputs[0]
    assert isinstance(resume, ToolResults)
    assert [r.tool_use_id for r in resume.results] == ["p1"]
    assert len(host.inputs) == 1
    assert result.text == "finished"
    assert [u.id for u in result.custom_tool_uses] == ["p1"]


async def test_resume_with_nothing_to_do_is_a_named_error() -> None:
    with pytest.raises(ml.ManagedLoopError) as info:
        await ml.run(FakeHost([]), agent=AGENT, handler=Recorder(), resume="s-old")
    assert info.value.code == "nothing_to_send"


async def test_transcript_is_copied_into_the_result() -> None:
    host = FakeHost([[stop()]], transcript=[{"role": "user", "content": "hi"}])
    result = await ml.run(host, agent=AGENT, handler=Recorder())
    assert result.transcript == [{"role": "user", "content": "hi"}]
    assert (await ml.run(FakeHost([[stop()]]), agent=AGENT, handler=Recorder())).transcript is None


# -- live sessions -----------------------------------------------------------------------


async def test_live_session_follow_up_starts_a_fresh_request() -> None:
    turns = [*tool_then_text(), [tool("lookup", id="u2"), stop("requires_action")], [stop()]]
    host = FakeHost(turns)
    handler = Recorder()
    async with ml.start(host, agent=AGENT, handler=handler) as session:
        assert session.session_id == "fake_session"
        assert session.resumed is False
        await session.send("first")
        first = await session.result()
        await session.send("second")
        second = await session.result()
    assert (first.turns, second.turns) == (2, 2)
    assert [u.id for u in first.custom_tool_uses] == ["u1"]
    assert [u.id for u in second.custom_tool_uses] == ["u2"]
    assert second.usage.total_tokens == 4
    assert second.events == [*turns[2], *turns[3]]
    assert host.inputs[0] == UserMessage("first")
    assert host.inputs[2] == UserMessage("second")
    assert host.closed == 1


async def test_live_session_events_stream_and_prompt_kickoff() -> None:
    host = FakeHost([[text("a"), stop()], [text("b"), stop()]])
    received: list[dict[str, Any]] = []
    async with ml.start(host, agent=AGENT, handler=Recorder(), prompt="go") as session:
        first = await session.result()
        stream = session.events()

        async def collect() -> None:
            async for event in stream:
                received.append(event)
                if event.get("type") == "stop":
                    return

        async with anyio.create_task_group() as tg:
            tg.start_soon(collect)
            await anyio.sleep(0)
            await session.send("more")
            second = await session.result()
    assert first.text == "a"
    assert second.text == "b"
    assert received == [{"type": "text", "text": "b"}, stop()]


async def test_live_session_errors_are_raised_by_result_and_session_survives() -> None:
    host = FakeHost([[RuntimeError("x")], [text("ok"), stop()]])
    async with ml.start(host, agent=AGENT, handler=Recorder()) as session:
        await session.send("one")
        with pytest.raises(ml.ProviderError):
            await session.result()
        await session.send("two")
        assert (await session.result()).text == "ok"


async def test_live_session_redrives_pending_tools_on_reattach() -> None:
    pending = [ml.ToolUse(id="p1", name="lookup")]
    host = FakeHost([[text("done"), stop()]], pending=pending)
    async with ml.start(host, agent=AGENT, handler=Recorder(), resume="s1") as session:
        assert session.resumed is True
        result = await session.result()
    assert result.text == "done"


async def test_a_resume_delivered_message_resets_turns_like_a_follow_up() -> None:
    pending = [ml.ToolUse(id="p1", name="lookup")]
    host = FakeHost([[text("redriven"), stop()], [text("next"), stop()]], pending=pending)
    async with ml.start(host, agent=AGENT, handler=Recorder(), resume="s1", max_turns=1) as session:
        first = await session.result()
        await session.send("and now?")
        second = await session.result()
    assert (first.turns, first.reason, first.text) == (1, None, "redriven")
    assert (second.turns, second.reason, second.text) == (1, None, "next")
    assert isinstance(host.inputs[0], ToolResults)
    assert host.inputs[1] == UserMessage("and now?", final_turn=True)  # max_turns=1


async def test_send_event_on_a_request_response_host_is_unsupported() -> None:
    async with ml.start(FakeHost(), agent=AGENT, handler=Recorder()) as session:
        with pytest.raises(ml.UnsupportedError):
            await session.send_event({"type": "user.tool_confirmation"})
        with pytest.raises(ml.UnsupportedError) as info:
            await session.send_outcome({"description": "d", "rubric": "r"})
        assert info.value.code == "outcome_unsupported"
        with pytest.raises(ml.UnsupportedError):
            await session.interrupt()


async def test_send_event_pushes_the_raw_event_verbatim() -> None:
    host = OutcomeHost([[text("a"), stop()], [text("b"), stop()]])
    async with ml.start(host, agent=AGENT, handler=Recorder(), prompt="go") as session:
        await session.result()
        event = {"type": "user.tool_confirmation", "result": "allow", "tool_use_id": "x"}
        await session.send_event(event)
        second = await session.result()
        await session.send_outcome(ml.Outcome(description="d", rubric="r"))
    assert host.inputs[1] == RawInput([event])
    assert second.events == [{"type": "text", "text": "b"}, stop()]


async def test_a_closed_session_refuses_work() -> None:
    session = ml.start(FakeHost(), agent=AGENT, handler=Recorder())
    with pytest.raises(ml.ManagedLoopError) as info:
        await session.send("x")
    assert info.value.code == "session_closed"
    async with session:
        pass
    await session.close()  # idempotent
    with pytest.raises(ml.ManagedLoopError):
        await session.send("x")


def test_loop_option_defaults() -> None:
    opts = LoopOptions()
    assert (opts.max_turns, opts.max_reprompts, opts.turn_guard) == (50, 2, None)
    assert (opts.require_terminal_tool, opts.terminal_tool) == (False, None)
