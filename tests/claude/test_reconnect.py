"""Reconnect without loss or duplicates; idempotent sends; the fault matrix.

Reference §9 lines covered here:

* ``session_reconnect_test``: a drop -> reconnect -> pending tools re-run -> end_turn.
  *Changed on purpose:* a ``run`` reconnects too (the issue: a session whose stream
  drops reconnects); only exhausted reconnects raise ``stream_dropped`` with the partial
  result.
* ``session_requires_action_recovery_live_shape_test``: several uses resumed in one POST,
  then a stale idle re-referencing one of them. *Changed:* a result the history shows
  never landed (``lose_results``) is re-sent from the connection's store, never
  recomputed (issue 7: a tool runs at most once per tool-use id); a POST whose every
  result was lost is found by the echo timeout or the next reconnect and re-sent within a
  bound (``result_not_recorded`` after ``RESULT_RESENDS``); a result that did land is not
  sent twice (``stale_idle``, ``stale_idle_early``); never an empty events POST
  (``split_requires_action``).
* ``session_resume_test``: resume with a prompt when idle delivers it; resume
  mid-requires_action redispatches the pending tool and does not deliver the prompt; a
  fresh session never re-sends its kickoff after a drop (every matrix run); ``resumed``
  is honest. (The max_turns reset on a resume-delivered message is a core rule.)
* ``session_test`` resume lines: history listed with ``limit=100`` and paged
  (``next_page`` -> ``page``) before redriving.
* ``consolidate_test`` dedupe: the fault matrix asserts no event lost or repeated in
  ``SessionResult.events`` for a drop after every event index (reset and clean EOF).
* Issue 3 item 2: idempotent sends (SDK retry off, 429 retry-after, 5xx before and after
  the server applied the events), 5xx bursts on the stream reconnect, session
  termination, slow streams with heartbeats.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anthropic
import pytest

import managedloop as ml
from managedloop.testing import ClaudeEmulator, ClaudeFaults, call, calls, say
from weather import get_time, get_weather

from .conftest import make_provider, wire_messages, wire_results

pytestmark = pytest.mark.anyio

SPEC = ml.AgentSpec(name="matrix", tools=[get_weather, get_time])
SCRIPT = [
    calls(
        ("get_weather", {"city": "A"}), ("get_time", {"city": "B"}), ("get_weather", {"city": "C"})
    ),
    say("all done"),
]


async def _run_once(emu: ClaudeEmulator, faults: ClaudeFaults, **run: Any) -> tuple[Any, Any]:
    emu.faults = faults
    emu.agent.script = list(SCRIPT)
    emu.agent.requests.clear()
    emu.agent._ids = iter(range(1, 10**6))  # type: ignore[assignment]
    async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
        handle = await ml.provision(make_provider(client), SPEC)
        provider = make_provider(client, agent=handle, environment=handle)
        result = await ml.run(provider, agent=SPEC, prompt="Go", timeout=20, **run)
    session = emu.state.sessions[result.session_id]
    return result, session


def _check(emu: ClaudeEmulator, result: Any, session: Any) -> None:
    assert result.terminal is ml.Terminal.END_TURN, result
    assert result.text == "all done"
    sid = session.id
    answered = Counter(wire_results(emu, sid))
    uses = [e["id"] for e in session.events if e["type"] == "agent.custom_tool_use"]
    assert len(uses) == 3
    assert answered == Counter(uses), "every tool use answered exactly once on the wire"
    assert wire_messages(emu, sid) == ["Go"], "the kickoff prompt is sent once"
    history_ids = [e["id"] for e in session.events]
    result_ids = [e["id"] for e in result.events]
    assert sorted(result_ids) == sorted(history_ids), "no event lost, none duplicated"
    assert len(set(result_ids)) == len(result_ids)
    assert [u.name for u in result.custom_tool_uses] == ["get_weather", "get_time", "get_weather"]


async def test_clean_run_baseline() -> None:
    with ClaudeEmulator() as emu:
        result, session = await _run_once(emu, ClaudeFaults())
        _check(emu, result, session)
        assert len(session.events) > 12


@pytest.mark.parametrize("clean_close", [False, True], ids=["reset", "clean-eof"])
async def test_fault_matrix_drop_after_every_event(clean_close: bool) -> None:
    with ClaudeEmulator() as emu:
        _, baseline = await _run_once(emu, ClaudeFaults())
        total = len(baseline.events)
        dropped = 0
        for n in range(total + 1):
            faults = ClaudeFaults(drop_stream_after=(n,), clean_close=clean_close)
            result, session = await _run_once(emu, faults)
            _check(emu, result, session)
            dropped += n in faults.used_drops
            stream_opens = [
                r for r in emu.requests if r.path == f"/v1/sessions/{session.id}/events/stream"
            ]
            assert len(stream_opens) == (2 if n in faults.used_drops else 1)
        assert dropped == total  # every index up to the last event really dropped a stream


async def test_double_drop_and_stale_idle_and_split() -> None:
    with ClaudeEmulator() as emu:
        faults = ClaudeFaults(drop_stream_after=(3, 9), stale_idle=True, split_requires_action=True)
        result, session = await _run_once(emu, faults)
        _check(emu, result, session)
        idles = [e for e in session.events if e["type"] == "session.status_idle"]
        assert len(idles) >= 4  # split + stale idles were really emitted


async def test_stale_idle_is_not_answered_twice() -> None:
    with ClaudeEmulator() as emu:
        result, session = await _run_once(emu, ClaudeFaults(stale_idle=True))
        _check(emu, result, session)
        stale = [
            e
            for e in session.events
            if e["type"] == "session.status_idle"
            and e["stop_reason"]["type"] == "requires_action"
            and len(e["stop_reason"]["event_ids"]) == 1
        ]
        assert stale, "the emulator emitted a stale idle"
        assert result.turns == 2


async def test_requires_action_referencing_earlier_batch() -> None:
    """Sliding window: later idles name tool uses whose events came in an earlier batch."""
    with ClaudeEmulator() as emu:
        result, session = await _run_once(emu, ClaudeFaults(split_requires_action=True))
        _check(emu, result, session)
        assert result.turns == 4  # one requires_action per call, then the answer
        posts = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/events")]
        assert all(r.json["events"] for r in posts)  # never an empty events POST


async def test_rate_limited_send_is_retried_after_retry_after() -> None:
    with ClaudeEmulator() as emu:
        faults = ClaudeFaults(
            rate_limit=2, retry_after="0", fault_path="/events", fault_method="POST"
        )
        result, session = await _run_once(emu, faults)
        _check(emu, result, session)
        statuses = [
            r.status for r in emu.requests if r.method == "POST" and r.path.endswith("/events")
        ]
        assert statuses.count(429) == 2


async def test_ambiguous_send_failures_do_not_duplicate() -> None:
    """The server applies the events and answers 500: nothing may be sent twice."""
    with ClaudeEmulator() as emu:
        result, session = await _run_once(emu, ClaudeFaults(accept_then_fail=2))
        _check(emu, result, session)
        statuses = [
            r.status for r in emu.requests if r.method == "POST" and r.path.endswith("/events")
        ]
        assert statuses == [500, 500]  # both sends landed; history showed it; no re-POST


async def test_send_5xx_before_accept_is_resent_once() -> None:
    with ClaudeEmulator() as emu:
        faults = ClaudeFaults(server_errors=1, fault_path="/events", fault_method="POST")
        result, session = await _run_once(emu, faults)
        _check(emu, result, session)
        posts = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/events")]
        statuses = [r.status for r in posts]
        assert statuses.count(500) == 1, statuses
        failed = statuses.index(500)
        assert not posts[failed].applied  # refused before anything was delivered
        # Resent once: the very next send is the same body, accepted; and no send, that
        # one included, went out twice after it was accepted.
        assert posts[failed + 1].status == 200
        assert posts[failed + 1].json == posts[failed].json
        accepted = [repr(r.json) for r in posts if r.status == 200]
        assert len(accepted) == len(set(accepted)), statuses
        assert len(posts) == len(accepted) + 1


async def test_event_send_uses_no_sdk_retry() -> None:
    with ClaudeEmulator() as emu:
        faults = ClaudeFaults(server_errors=50, fault_path="/events", fault_method="POST")
        with pytest.raises(ml.APIStatusError) as info:
            await _run_once(emu, faults)
        posts = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/events")]
        assert len(posts) == 5  # our own bounded attempts, each a single HTTP attempt
        assert info.value.status == 500


async def test_stream_5xx_burst_on_reconnect() -> None:
    with ClaudeEmulator() as emu:
        faults = ClaudeFaults(drop_stream_after=(4,), fault_path="/events/stream")
        emu.faults = faults
        emu.agent.script = list(SCRIPT)

        def first(request: Any) -> Any:
            faults.server_errors = 4  # armed after the first stream opened: hits the reconnect
            return SCRIPT[0]

        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            handle = await ml.provision(make_provider(client), SPEC)
            provider = make_provider(client, agent=handle, environment=handle)
            emu.agent.script = [first, SCRIPT[1]]
            result = await ml.run(provider, agent=SPEC, prompt="Go", timeout=20)
        session = emu.state.sessions[result.session_id]
        _check(emu, result, session)
        opens = [r.status for r in emu.requests if r.path.endswith("/events/stream")]
        assert opens[:5] == [200, 500, 500, 500, 500]
        assert len(opens) == 6


async def test_reconnects_exhausted_raise_stream_dropped() -> None:
    with ClaudeEmulator() as emu:
        emu.agent.script = [say("x")]
        async with anthropic.AsyncAnthropic(
            base_url=emu.base_url, api_key=emu.api_key, max_retries=0
        ) as client:
            handle = await ml.provision(make_provider(client), SPEC)
            provider = make_provider(client, agent=handle, environment=handle, max_reconnects=2)
            emu.faults = ClaudeFaults(
                drop_stream_after=(1,), server_errors=100, fault_path="/events/stream"
            )
            emu.faults.server_errors = 0
            async with ml.start(provider, agent=SPEC) as session:
                emu.faults.server_errors = 100
                await session.send("hi")
                with pytest.raises(ml.TransportError) as info:
                    await session.result()
        assert info.value.code == "stream_dropped"
        assert info.value.partial_result is not None


async def test_terminated_session_is_a_result() -> None:
    with ClaudeEmulator() as emu:
        emu.faults = ClaudeFaults(terminate_after=5)
        emu.agent.script = list(SCRIPT)
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            handle = await ml.provision(make_provider(client), SPEC)
            provider = make_provider(client, agent=handle, environment=handle)
            result = await ml.run(provider, agent=SPEC, prompt="Go", timeout=10)
        assert result.terminal is ml.Terminal.TERMINATED
        assert result.events[-1]["type"] == "session.status_terminated"


async def test_slow_stream_still_completes() -> None:
    with ClaudeEmulator() as emu:
        result, session = await _run_once(emu, ClaudeFaults(event_delay=0.005, heartbeat=0.002))
        _check(emu, result, session)


async def test_resume_mid_requires_action_redrives_without_prompt() -> None:
    with ClaudeEmulator() as emu:
        emu.agent.script = [call("get_weather", {"city": "Oslo"}), say("done")]
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            handle = await ml.provision(make_provider(client), SPEC)
            provider = make_provider(client, agent=handle, environment=handle)
            # Drive the session to requires_action without answering (a crashed client).
            session_obj = await client.beta.sessions.create(
                agent=handle.agent_id, environment_id=handle.environment_id
            )
            await client.beta.sessions.events.send(
                session_obj.id,
                events=[{"type": "user.message", "content": [{"type": "text", "text": "Go"}]}],
            )
            for _ in range(200):
                state = emu.state.sessions[session_obj.id]
                if state.events[-1]["type"] == "session.status_idle":
                    break
                import anyio

                await anyio.sleep(0.01)
            result = await ml.run(provider, agent=SPEC, prompt="ignored", resume=session_obj.id)
        assert result.terminal is ml.Terminal.END_TURN
        assert result.text == "done"
        assert wire_messages(emu, session_obj.id) == ["Go"]  # the prompt was not injected
        assert len(wire_results(emu, session_obj.id)) == 1
        assert [u.name for u in result.custom_tool_uses] == ["get_weather"]


async def test_resume_pages_full_history() -> None:
    with ClaudeEmulator() as emu:
        emu.agent.script = [say(f"m{i}") for i in range(60)]
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            handle = await ml.provision(make_provider(client), SPEC)
            provider = make_provider(client, agent=handle, environment=handle)
            async with ml.start(provider, agent=SPEC, prompt="p0") as live:
                await live.result()
                for i in range(1, 25):
                    await live.send(f"p{i}")
                    await live.result()
                sid = live.session_id
            before = len(emu.requests)
            again = await ml.run(provider, agent=SPEC, prompt="last", resume=sid)
        lists = [
            r for r in emu.requests[before:] if r.method == "GET" and r.path.endswith("/events")
        ]
        assert len(lists) >= 2
        assert lists[0].query["limit"] == ["100"]
        assert lists[1].query["page"] == ["page_100"]
        assert again.text == "m25"
        assert again.turns == 1
        assert again.events[0]["type"] == "user.message"


async def test_resumed_flag_is_honest() -> None:
    with ClaudeEmulator() as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            handle = await ml.provision(make_provider(client), SPEC)
            provider = make_provider(client, agent=handle, environment=handle)
            async with ml.start(provider, agent=SPEC, prompt="a") as live:
                first = await live.result()
                assert live.resumed is False
            async with ml.start(provider, agent=SPEC, resume=first) as again:
                assert again.resumed is True
                await again.send("b")
                second = await again.result()
        assert second.session_id == first.session_id


async def test_stale_idle_before_the_echo_is_checked_in_the_history() -> None:
    """A requires_action idle names a result we sent whose echo has not arrived yet: the
    history (not our own word) shows it landed, so the idle is stale and is skipped."""
    with ClaudeEmulator() as emu:
        result, session = await _run_once(emu, ClaudeFaults(stale_idle_early=True))
        _check(emu, result, session)
        assert result.turns == 2
        sid = session.id
        results_post = next(
            i
            for i, r in enumerate(emu.requests)
            if r.method == "POST"
            and r.path == f"/v1/sessions/{sid}/events"
            and r.json
            and r.json["events"][0]["type"] == "user.custom_tool_result"
        )
        history_reads = [
            r
            for r in emu.requests[results_post:]
            if r.method == "GET" and r.path == f"/v1/sessions/{sid}/events"
        ]
        assert history_reads, "the stale idle was dismissed without consulting the history"


def _counting_spec() -> tuple[ml.AgentSpec, Counter[str]]:
    """SPEC's tools, counting each run by its input (a tool use has a distinct city)."""
    runs: Counter[str] = Counter()

    @ml.tool(name="get_weather")
    def weather(city: str) -> str:
        """Current weather for a city."""
        runs[city] += 1
        return f"Sunny in {city}"

    @ml.tool(name="get_time")
    def time_of(city: str) -> str:
        """Local time in a city."""
        runs[city] += 1
        return f"Noon in {city}"

    return ml.AgentSpec(name="matrix", tools=[weather, time_of]), runs


def _recorded_results(session: Any) -> Counter[str]:
    return Counter(
        e["custom_tool_use_id"] for e in session.events if e["type"] == "user.custom_tool_result"
    )


async def _run_counting(
    emu: ClaudeEmulator,
    faults: ClaudeFaults,
    counting: tuple[ml.AgentSpec, Counter[str]] | None = None,
    **provider_options: Any,
) -> tuple[Any, Any, Counter[str]]:
    spec, runs = counting or _counting_spec()
    emu.faults = faults
    emu.agent.script = list(SCRIPT)
    async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
        handle = await ml.provision(make_provider(client), spec)
        provider = make_provider(client, agent=handle, environment=handle, **provider_options)
        result = await ml.run(provider, agent=spec, prompt="Go", timeout=20)
    return result, emu.state.sessions[result.session_id], runs


async def test_result_that_never_landed_is_resent_not_recomputed() -> None:
    """The API acknowledged a tool result but lost it and names the call again: the stored
    result is re-sent (the tool does not run again) and the session goes on. Every other
    use is answered once; the server ends with exactly one result per use."""
    with ClaudeEmulator() as emu:
        result, session, runs = await _run_counting(emu, ClaudeFaults(lose_results=1))
    assert result.terminal is ml.Terminal.END_TURN, result
    assert result.text == "all done"
    assert runs == Counter({"A": 1, "B": 1, "C": 1}), "each tool ran once"
    uses = [e["id"] for e in session.events if e["type"] == "agent.custom_tool_use"]
    wire = Counter(wire_results(emu, session.id))
    assert wire == Counter({uses[0]: 2, uses[1]: 1, uses[2]: 1})
    assert _recorded_results(session) == Counter(uses)
    assert [u.id for u in result.custom_tool_uses] == uses  # no duplicate in the result
    assert wire_messages(emu, session.id) == ["Go"]
    assert sorted(e["id"] for e in result.events) == sorted(e["id"] for e in session.events)


async def test_every_result_of_a_post_lost_is_resent_after_the_echo_timeout() -> None:
    """All three results of one POST acknowledged and dropped: no echo and no idle ever
    follows. Once the echo is overdue the connection reopens the stream, reconciles the
    history and re-sends the three stored results; the tools ran once each, the host
    records each result once, and the run ends instead of waiting out the idle timeout.
    (Any echo timeout is correct: an early check finds the results landed and re-sends
    nothing, so the small value only keeps the test fast.)"""
    with ClaudeEmulator() as emu:
        result, session, runs = await _run_counting(
            emu, ClaudeFaults(lose_results=3), result_echo_timeout=0.05
        )
    assert result.terminal is ml.Terminal.END_TURN, result
    assert result.text == "all done"
    assert runs == Counter({"A": 1, "B": 1, "C": 1})
    uses = [e["id"] for e in session.events if e["type"] == "agent.custom_tool_use"]
    assert _recorded_results(session) == Counter(uses), "each result recorded exactly once"
    assert Counter(wire_results(emu, session.id)) == Counter(dict.fromkeys(uses, 2))
    assert wire_messages(emu, session.id) == ["Go"]
    assert sorted(e["id"] for e in result.events) == sorted(e["id"] for e in session.events)


async def test_lost_results_are_resent_after_a_reconnect() -> None:
    """The stream drops right as the results POST arrives and every result is lost: the
    reconnect's history page shows none of them, so they are re-sent at once (the echo
    timeout is far away: only the reconnect can find them)."""
    posts = Counter[str]()

    def cut_on_results(method: str, path: str) -> None:
        if method == "POST" and path.endswith("/events"):
            posts["events"] += 1
            if posts["events"] == 2:  # the kickoff message, then the results
                sid = path.split("/")[3]
                emu.state.sessions[sid].close_streams()

    with ClaudeEmulator() as emu:
        faults = ClaudeFaults(lose_results=3, before_request=cut_on_results)
        result, session, runs = await _run_counting(emu, faults, result_echo_timeout=3600)
    assert result.terminal is ml.Terminal.END_TURN, result
    assert runs == Counter({"A": 1, "B": 1, "C": 1})
    uses = [e["id"] for e in session.events if e["type"] == "agent.custom_tool_use"]
    assert _recorded_results(session) == Counter(uses)
    opens = [r for r in emu.requests if r.path == f"/v1/sessions/{session.id}/events/stream"]
    assert len(opens) == 2


async def test_a_result_the_host_never_records_fails_by_name() -> None:
    """A host that acknowledges and drops every re-send too: after RESULT_RESENDS re-sends
    the session fails with result_not_recorded (bounded), and the tool still ran once."""
    from managedloop.providers.claude._connection import RESULT_RESENDS

    counting = _counting_spec()
    with ClaudeEmulator() as emu:
        with pytest.raises(ml.ProviderError) as info:
            await _run_counting(
                emu, ClaudeFaults(lose_results=100), counting, result_echo_timeout=0.01
            )
        session = emu.session()
    assert info.value.code == "result_not_recorded"
    assert counting[1] == Counter({"A": 1, "B": 1, "C": 1})
    assert info.value.partial_result is not None
    uses = [e["id"] for e in session.events if e["type"] == "agent.custom_tool_use"]
    sends = RESULT_RESENDS + 1  # the first send, then every re-send
    assert Counter(wire_results(emu, session.id)) == Counter(dict.fromkeys(uses, sends))
    assert _recorded_results(session) == Counter()


async def test_the_connection_itself_yields_each_event_once_across_a_drop() -> None:
    """The connection's own guarantee, the only de-duplication there is (the loop keeps
    every event): the history paged after a reconnect repeats events already yielded."""
    from managedloop.hosts import OpenRequest, UserMessage

    with ClaudeEmulator() as emu:
        emu.agent.script = [say("x")]
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            handle = await ml.provision(make_provider(client), SPEC)
            provider = make_provider(client, agent=handle, environment=handle)
            emu.faults = ClaudeFaults(drop_stream_after=(3,))
            conn = await provider.open(OpenRequest(agent=handle))
            try:
                got = [e async for e in conn.turn(UserMessage("Go"))]
            finally:
                await conn.aclose()
        assert emu.faults.used_drops == {3}
        ids = [e["id"] for e in got if isinstance(e, dict)]
        assert ids == [e["id"] for e in emu.events()]  # each once, in history order


async def test_events_without_an_id_are_neither_merged_nor_repeated() -> None:
    """The docs warn an event's id may be empty (an interrupt). Deduped by id alone, two
    such events were one: the second was dropped as "seen". Keyed by type and
    processed_at, each is yielded once, including across the reconnect's history page."""
    from managedloop.hosts import OpenRequest, UserMessage

    with ClaudeEmulator() as emu:

        def idless_then_reply(request: Any) -> Any:
            for stamp in ("2026-01-01T00:00:00.000001Z", "2026-01-01T00:00:00.000002Z"):
                emu.session().emit({"type": "agent.thinking", "id": "", "processed_at": stamp})
            return say("x")

        emu.agent.script = [idless_then_reply]
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            handle = await ml.provision(make_provider(client), SPEC)
            provider = make_provider(client, agent=handle, environment=handle)
            emu.faults = ClaudeFaults(drop_stream_after=(5,))  # after both id-less events
            conn = await provider.open(OpenRequest(agent=handle))
            try:
                got = [e async for e in conn.turn(UserMessage("Go"))]
            finally:
                await conn.aclose()
        assert emu.faults.used_drops == {5}
        kinds = [e["type"] for e in got if isinstance(e, dict)]
        assert kinds == [e["type"] for e in emu.events()]
        assert kinds.count("agent.thinking") == 2


async def test_a_landed_result_leaves_nothing_outstanding() -> None:
    """Once every result's echo is seen, nothing is held for re-sending and no echo
    deadline stays armed (a stale one would reopen the stream right after the next batch
    of results, however promptly their echoes came)."""
    from managedloop.hosts import OpenRequest, ToolResults, UserMessage
    from managedloop.results import ToolResult

    with ClaudeEmulator() as emu:
        emu.agent.script = list(SCRIPT)
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            handle = await ml.provision(make_provider(client), SPEC)
            provider = make_provider(client, agent=handle, environment=handle)
            conn = await provider.open(OpenRequest(agent=handle))
            try:
                first = [e async for e in conn.turn(UserMessage("Go"))][-1]
                assert isinstance(first, ml.TurnResult)  # a turn ends with its result
                uses = first.custom_tool_uses
                results = [ToolResult(tool_use_id=u.id, text="ok") for u in uses]
                last = [e async for e in conn.turn(ToolResults(uses, results))][-1]
                assert isinstance(last, ml.TurnResult)
            finally:
                await conn.aclose()
    assert len(uses) == 3
    assert last.terminal is ml.Terminal.END_TURN
    assert conn._results == {}
    assert conn._echo_deadline is None


async def test_a_resend_the_host_refuses_counts_as_recorded() -> None:
    """A lost result is answered by someone else before our re-send lands: the host answers
    the re-send 400 (that use no longer awaits a result). That is "recorded", not a
    failure: the session goes on and the tool ran once."""
    posts = Counter[str]()

    def answer_elsewhere(method: str, path: str) -> None:
        if method == "POST" and path.endswith("/events"):
            posts["events"] += 1
            if posts["events"] == 3:  # message, results (one lost), then our re-send
                session = emu.state.sessions[path.split("/")[3]]
                (lost,) = session.open_calls
                other = {
                    "type": "user.custom_tool_result",
                    "custom_tool_use_id": lost,
                    "content": [{"type": "text", "text": "answered elsewhere"}],
                }
                session.accept([other])

    with ClaudeEmulator() as emu:
        faults = ClaudeFaults(lose_results=1, before_request=answer_elsewhere)
        result, session, runs = await _run_counting(emu, faults)
    assert result.terminal is ml.Terminal.END_TURN, result
    assert runs == Counter({"A": 1, "B": 1, "C": 1})
    uses = [e["id"] for e in session.events if e["type"] == "agent.custom_tool_use"]
    assert _recorded_results(session) == Counter(uses)
    statuses = [r.status for r in emu.requests if r.method == "POST" and r.path.endswith("/events")]
    assert statuses == [200, 200, 400]
