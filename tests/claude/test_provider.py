"""The provider end to end through the real anthropic SDK against the emulator.

Reference §9 lines covered here:

* ``session_test``: full cycle (create body with environment_id, tool call, POST of
  ``user.custom_tool_result`` with is_error false, end_turn); a failing tool posts
  is_error true. Resume lines: ``test_reconnect.py``.
* ``run_to_completion_test``: tool use -> requires_action -> resume -> end_turn with the
  ``agent.custom_tool_use`` in the events; no terminal within ``timeout`` ->
  ``SessionTimeoutError`` with the partial result (the stream is torn down).
* ``session_outcome_test``: define_outcome kickoff with max_iterations; needs_revision is
  not terminal; satisfied -> end_turn, turns 1; failed -> terminated; no max_iterations
  key when absent. (outcome_unsupported / invalid outcome shapes: core tests.)
* ``session_send_event_test``: the raw event goes out verbatim as ``[event]``; the second
  turn's events do not repeat the first's. (request_response -> unsupported: core.)
* ``providers/claude_managed_agents_test``: kickoff / user input build user.message;
  outcome wins over prompt; an Outcome and a dict behave the same; supports_outcomes;
  resume_input builds custom_tool_result events with the error flag and no echo of the
  use; text_delta (message text blocks joined with "", handed to ``handle_event``, never
  recorded); tool_confirmation allow / deny (now an emulated round trip).
  *Changed on purpose:* "exports the streaming callbacks; mode streaming" does not apply
  (the loop never asks a host's mode); "open builds its client from model_config
  api_key/base_url" -> credentials come from constructor arguments or the config module,
  never from an agent spec's model_config.
* ``stream_test`` / ``telemetry_test``: connected, events, done with the caller's tags;
  request start/stop (method, path, status 200); a non-2xx on open is a named error
  (``create_session_failed`` / ``invalid_session_id``).
* Issue 3 beyond §9: the DESIGN snippet (``run_sync`` with a config-built client; the
  verbatim ``client=`` form on one loop), client ownership, server tools observe-only,
  interrupts, multiagent thread ids, unknown event types kept raw, agent/spec tool drift
  (``agent_tools_mismatch``).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import anthropic
import pytest

import managedloop as ml
from emitted import emitted
from managedloop.providers import ClaudeManagedAgents
from managedloop.testing import ClaudeEmulator, Fail, Grade, ToolCall, call, calls, say
from weather import get_time, get_weather

from .conftest import WEATHER, make_provider, provisioned, wire_results

pytestmark = pytest.mark.anyio


def test_import_managedloop_does_not_import_anthropic() -> None:
    code = (
        "import sys, managedloop; from managedloop.providers import ClaudeManagedAgents; "
        "import managedloop.testing; assert 'anthropic' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_design_snippet_run_sync_and_resume() -> None:
    """DESIGN.md's snippet with the sync face: every ``*_sync`` call runs on a fresh event
    loop, so the provider builds its own client per loop and closes it (no ResourceWarning
    escapes: warnings are errors). A passed ``client=`` is for one loop: see the next test.
    """
    with ClaudeEmulator() as emu:
        auth = {"api_key": emu.api_key, "bearer_token_file": None, "base_url": emu.base_url}
        handle = ml.provision_sync(ClaudeManagedAgents(**auth), WEATHER)
        provider = ClaudeManagedAgents(agent=handle, environment=handle, **auth)
        result = ml.run_sync(provider, agent=WEATHER, prompt="Weather in Paris?")
        assert result.terminal is ml.Terminal.END_TURN
        assert result.stop_reason == {"type": "end_turn"}
        assert result.text == "Done. Sunny in example"
        assert [u.name for u in result.custom_tool_uses] == ["get_weather"]
        assert result.custom_tool_uses[0].input == {"city": "example"}
        assert result.usage.input_tokens == 20
        assert result.usage.output_tokens == 10
        assert result.turns == 2
        assert result.session_id
        assert result.session_id.startswith("sesn_")
        assert result.transcript is None
        again = ml.run_sync(provider, agent=WEATHER, prompt="And Rome?", resume=result)
        assert again.session_id == result.session_id
        assert again.text == "You said: And Rome?"
        assert again.turns == 1
        # the resumed request's events are its own: none of the first request's
        assert not {e["id"] for e in again.events} & {e["id"] for e in result.events}
        assert len(emu.state.sessions) == 1


async def test_design_snippet_with_a_client_on_one_loop() -> None:
    """DESIGN.md's snippet verbatim (``client=`` an ``AsyncAnthropic``), on one loop: the
    caller owns the client and closes it; run, resume and a live session all work."""
    with ClaudeEmulator() as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            handle = await ml.provision(ClaudeManagedAgents(client=client), WEATHER)
            provider = ClaudeManagedAgents(client=client, agent=handle, environment=handle)
            result = await ml.run(provider, agent=WEATHER, prompt="Weather in Paris?")
            again = await ml.run(provider, agent=WEATHER, prompt="And Rome?", resume=result)
            async with ml.start(provider, agent=WEATHER, prompt="hi") as live:
                await live.result()
                await live.send("more")
                follow = await live.result()
            assert not client.is_closed()  # never closed for the caller
    assert result.text == "Done. Sunny in example"
    assert again.text == "You said: And Rome?"
    assert follow.text == "You said: more"


def test_passed_client_serves_run_sync_calls_and_stays_unbound() -> None:
    """DESIGN.md's snippet as written: ``client=`` an ``AsyncAnthropic`` and ``run_sync``
    twice (``resume=``). Each sync call's loop is thrown away, so a copy of the caller's
    client with its own pool serves it and is closed with it: the caller's client is never
    bound to a dead loop, and no socket is left behind (warnings are errors here)."""
    with ClaudeEmulator() as emu:
        client = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key)
        provider = ClaudeManagedAgents(client=client)
        first = ml.run_sync(provider, agent=WEATHER, prompt="Weather in Paris?")
        again = ml.run_sync(provider, agent=WEATHER, prompt="And Rome?", resume=first)
        other = ml.run_sync(ClaudeManagedAgents(client=client), agent=WEATHER, prompt="z")
    assert first.terminal is ml.Terminal.END_TURN
    assert again.session_id == first.session_id
    assert again.text == "You said: And Rome?"
    assert other.terminal is ml.Terminal.END_TURN
    assert not client.is_closed()  # the caller's client is the caller's to close


def test_passed_client_on_a_closed_loop_is_a_named_error() -> None:
    """The caller's own client used on two loops by hand (two ``asyncio.run``): its pool
    belongs to the first. We say so up front instead of failing inside the HTTP pool. (The
    client here keeps no idle socket, so the first loop's end leaks nothing.)"""
    import asyncio

    import httpx2

    with ClaudeEmulator() as emu:
        client = anthropic.AsyncAnthropic(
            base_url=emu.base_url,
            api_key=emu.api_key,
            http_client=httpx2.AsyncClient(limits=httpx2.Limits(max_keepalive_connections=0)),
        )
        provider = ClaudeManagedAgents(client=client)
        first = asyncio.run(ml.run(provider, agent=WEATHER, prompt="x"))
        assert first.terminal is ml.Terminal.END_TURN
        with pytest.raises(ml.InvalidOptionsError) as info:
            asyncio.run(ml.run(provider, agent=WEATHER, prompt="y"))
        assert info.value.code == "client_loop_closed"
        # tracked per client, not per provider: a second provider on it is refused too
        with pytest.raises(ml.InvalidOptionsError) as info:
            asyncio.run(ml.run(ClaudeManagedAgents(client=client), agent=WEATHER, prompt="z"))
        assert info.value.code == "client_loop_closed"
        assert len(emu.state.sessions) == 1  # refused before any request


async def test_provider_built_client_is_closed_after_each_use(emu: ClaudeEmulator) -> None:
    provider = ClaudeManagedAgents(
        api_key=emu.api_key, bearer_token_file=None, base_url=emu.base_url, reconnect_backoff=0
    )
    handle = await ml.provision(provider, WEATHER)
    first = provider.client
    await ml.run(provider, agent=handle, prompt="x")
    assert first.is_closed()  # the last lease on this loop ended: closed, not leaked
    async with provider:  # pinned: one client for every session inside
        pinned = provider.client
        await ml.run(provider, agent=handle, prompt="a")
        await ml.run(provider, agent=handle, prompt="b")
        assert provider.client is pinned
        assert not pinned.is_closed()
    assert pinned.is_closed()


async def test_run_with_parallel_tool_calls(emu: ClaudeEmulator, client: Any) -> None:
    spec = ml.AgentSpec(name="w2", tools=[get_weather, get_time])
    emu.agent.script = [
        calls(("get_weather", {"city": "Paris"}), ("get_time", {"city": "Rome"}), text="Checking."),
        say("Sunny and noon."),
    ]
    provider = await provisioned(client, spec)
    result = await ml.run(provider, agent=spec, prompt="Go")
    assert result.terminal is ml.Terminal.END_TURN
    assert result.text == "Sunny and noon."
    assert [u.name for u in result.custom_tool_uses] == ["get_weather", "get_time"]
    results = emu.agent.requests[1].tool_results
    assert [r.text for r in results] == ["Sunny in Paris", "Noon in Rome"]
    # both results went out in ONE POST
    posts = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/events")]
    assert len(posts) == 2
    assert len(posts[1].json["events"]) == 2
    assert sorted(wire_results(emu)) == sorted(u.id for u in result.custom_tool_uses)


async def test_stream_opened_before_first_send(emu: ClaudeEmulator, client: Any) -> None:
    provider = await provisioned(client)
    await ml.run(provider, agent=WEATHER, prompt="Go")
    paths = [(r.method, r.path) for r in emu.requests if "/v1/sessions" in r.path]
    stream = next(i for i, (m, p) in enumerate(paths) if p.endswith("/events/stream"))
    send = next(i for i, (m, p) in enumerate(paths) if m == "POST" and p.endswith("/events"))
    assert stream < send
    create = next(r for r in emu.requests if r.path == "/v1/sessions")
    assert create.json["environment_id"].startswith("env_")
    assert create.headers["anthropic-beta"] == "managed-agents-2026-04-01"


async def test_tool_error_posts_is_error(emu: ClaudeEmulator, client: Any) -> None:
    @ml.tool
    def broken(x: int) -> str:
        """Always fails."""
        raise ml.ToolError("no such thing")

    spec = ml.AgentSpec(name="broken", tools=[broken])
    emu.agent.script = [call("broken", {"x": 1}), say("ok")]
    provider = await provisioned(client, spec)
    await ml.run(provider, agent=spec, prompt="Go")
    sent = [e for e in emu.sent_events() if e["type"] == "user.custom_tool_result"]
    assert sent[0]["is_error"] is True
    assert sent[0]["content"] == [{"type": "text", "text": "no such thing"}]


async def test_server_tools_are_observe_only(emu: ClaudeEmulator, client: Any) -> None:
    emu.agent.script = [
        ml.testing.Reply(
            tool_calls=[
                ToolCall(name="web_search", input={"q": "x"}, server=True),
                ToolCall(name="get_weather", input={"city": "Oslo"}),
            ]
        ),
        say("done"),
    ]
    provider = await provisioned(client)
    result = await ml.run(provider, agent=WEATHER, prompt="Go")
    assert [u.name for u in result.server_tool_uses] == ["web_search"]
    assert [u.name for u in result.custom_tool_uses] == ["get_weather"]
    assert len(wire_results(emu)) == 1


async def test_session_error_is_a_terminated_result(emu: ClaudeEmulator, client: Any) -> None:
    emu.agent.script = [Fail(message="model exploded", kind="model_overloaded_error")]
    provider = await provisioned(client)
    result = await ml.run(provider, agent=WEATHER, prompt="Go")
    assert result.terminal is ml.Terminal.TERMINATED
    assert result.stop_reason == {"type": "retries_exhausted"}
    errors = [e for e in result.events if e["type"] == "session.error"]
    assert errors[0]["error"]["message"] == "model exploded"


async def test_outcome_graded_session(emu: ClaudeEmulator, client: Any) -> None:
    emu.agent.script = [
        say("draft"),
        Grade(result="needs_revision", explanation="too short"),
        say("final"),
        Grade(result="satisfied", explanation="good"),
    ]
    provider = await provisioned(client)
    outcome = ml.Outcome(description="Write it", rubric="Is it good?", max_iterations=2)
    result = await ml.run(provider, agent=WEATHER, outcome=outcome)
    assert result.terminal is ml.Terminal.END_TURN
    assert result.turns == 1
    assert result.text == "draft\nfinal"
    sent = emu.sent_events()
    assert sent == [
        {
            "type": "user.define_outcome",
            "description": "Write it",
            "rubric": {"type": "text", "content": "Is it good?"},
            "max_iterations": 2,
        }
    ]
    verdicts = [e["result"] for e in result.events if e["type"] == "span.outcome_evaluation_end"]
    assert verdicts == ["needs_revision", "satisfied"]


async def test_outcome_failed_is_terminated(emu: ClaudeEmulator, client: Any) -> None:
    emu.agent.script = [say("x"), Grade(result="failed", explanation="rubric n/a")]
    provider = await provisioned(client)
    result = await ml.run(provider, agent=WEATHER, outcome={"description": "d", "rubric": "r"})
    assert result.terminal is ml.Terminal.TERMINATED
    assert "max_iterations" not in emu.sent_events()[0]


async def test_start_with_follow_ups_and_events(emu: ClaudeEmulator, client: Any) -> None:
    provider = await provisioned(client)
    seen: list[str] = []
    async with ml.start(provider, agent=WEATHER, prompt="Weather?") as session:
        first = await session.result()
        assert first.text == "Done. Sunny in example"
        await session.send("thanks")
        second = await session.result()
        assert second.text == "You said: thanks"
        assert second.turns == 1
        await session.send("bye")
        third = await session.result()
        assert third.text == "You said: bye"
        seen = [e["type"] for e in third.events]
        assert session.session_id == first.session_id
    assert seen.count("user.message") == 1
    assert [m for m in emu.sent_events() if m["type"] == "user.message"].__len__() == 3


async def test_send_event_raw_and_tool_confirmation_builder(
    emu: ClaudeEmulator, client: Any
) -> None:
    from managedloop.providers.claude._wire import tool_confirmation

    provider = await provisioned(client)
    async with ml.start(provider, agent=WEATHER, prompt="hi") as session:
        await session.result()
        await session.send_event(
            {"type": "user.message", "content": [{"type": "text", "text": "raw"}]}
        )
        raw = await session.result()
        assert raw.text == "You said: raw"
    assert tool_confirmation("sevt_1", allow=False, deny_message="no") == {
        "type": "user.tool_confirmation",
        "tool_use_id": "sevt_1",
        "result": "deny",
        "deny_message": "no",
    }


async def test_interrupt_live_session(emu: ClaudeEmulator, client: Any) -> None:
    import anyio

    emu.faults.event_delay = 0.05
    emu.agent.script = [say("a " * 5), say("never")]
    provider = await provisioned(client)
    async with ml.start(provider, agent=WEATHER, prompt="long job") as session:
        await anyio.sleep(0.02)
        await session.interrupt()
        result = await session.result()
    assert result.terminal is ml.Terminal.END_TURN
    assert any(e["type"] == "user.interrupt" for e in emu.sent_events())


async def test_multiagent_thread_id_carried(emu: ClaudeEmulator, client: Any) -> None:
    provider = await provisioned(client)
    emu.agent.script = [call("get_weather", {"city": "Lima"}), say("ok")]
    async with ml.start(provider, agent=WEATHER) as session:
        # a subagent's calls are cross-posted to the primary stream with its thread id
        emu.call(lambda: setattr(emu.session(), "thread_id", "sthr_child"))
        await session.send("go")
        result = await session.result()
    assert result.custom_tool_uses[0].thread_id == "sthr_child"
    sent = [e for e in emu.sent_events() if e["type"] == "user.custom_tool_result"]
    assert "session_thread_id" not in sent[0]  # the server routes by id; never echoed back


async def test_agent_spec_provisions_on_the_fly(emu: ClaudeEmulator, client: Any) -> None:
    provider = make_provider(client)
    r1 = await ml.run(provider, agent=WEATHER, prompt="a")
    r2 = await ml.run(provider, agent=WEATHER, prompt="b")
    assert r1.terminal is r2.terminal is ml.Terminal.END_TURN
    assert len(emu.state.agents) == 1
    assert len(emu.state.environments) == 1


async def test_agent_as_raw_ids_and_dict(emu: ClaudeEmulator, client: Any) -> None:
    handle = await ml.provision(make_provider(client), WEATHER)
    provider = make_provider(client, environment=handle.environment_id)
    result = await ml.run(provider, agent=handle.agent_id, prompt="x")
    assert result.terminal is ml.Terminal.END_TURN
    provider2 = make_provider(client)
    result2 = await ml.run(provider2, agent=handle.to_dict(), prompt="y")
    assert result2.terminal is ml.Terminal.END_TURN


async def test_a_bare_agent_id_without_an_environment_is_refused(
    emu: ClaudeEmulator, client: Any
) -> None:
    """An agent id names no environment: the run says so before creating a session
    (it used to send the agent id as the environment id)."""
    handle = await ml.provision(make_provider(client), WEATHER)
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.run(make_provider(client), agent=handle.agent_id, prompt="x")
    assert info.value.context["option"] == "environment"
    assert emu.state.sessions == {}


async def test_create_session_failure_is_named(emu: ClaudeEmulator, client: Any) -> None:
    provider = make_provider(client, agent="agent_missing", environment="env_missing")
    with pytest.raises(ml.ProviderError) as info:
        await ml.run(provider, agent="agent_missing", prompt="x")
    assert info.value.code == "create_session_failed"
    assert info.value.context["status"] == 404


async def test_reattach_to_unknown_session(emu: ClaudeEmulator, client: Any) -> None:
    provider = await provisioned(client)
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.run(provider, agent=WEATHER, prompt="x", resume="sesn_nope")
    assert info.value.code == "invalid_session_id"


async def test_telemetry_requests_and_stream(emu: ClaudeEmulator, client: Any) -> None:
    provider = await provisioned(client)
    with emitted() as events:
        result = await ml.run(
            provider, agent=WEATHER, prompt="x", telemetry_metadata={"tenant": "acme"}
        )
    got = [(n, m) for n, _, m in events]
    names = [n for n, _ in got]
    starts = [m for n, m in got if n == "managedloop.request.start"]
    assert {"method": "post", "path": "/v1/sessions", "tenant": "acme"}.items() <= starts[0].items()
    stops = [m for n, m in got if n == "managedloop.request.stop"]
    assert all(m["status"] == 200 for m in stops)
    connected = [m for n, m in got if n == "managedloop.stream.connected"]
    assert connected[0]["session_id"] == result.session_id
    assert connected[0]["tenant"] == "acme"
    assert "managedloop.stream.done" in names
    assert any(
        m.get("type") == "session.status_idle" and m.get("tenant") == "acme"
        for n, m in got
        if n == "managedloop.stream.event"
    )
    assert emu.api_key not in repr(got)


async def test_http_error_maps_to_api_status_error(emu: ClaudeEmulator, client: Any) -> None:
    provider = await provisioned(client)
    emu.faults.server_errors = 10
    emu.faults.fault_path = "/events"
    emu.faults.fault_method = "POST"
    with pytest.raises(ml.APIStatusError) as info:
        await ml.run(provider, agent=WEATHER, prompt="x")
    assert info.value.code == "http_error"
    assert info.value.status == 500
    assert info.value.partial_result is not None


async def test_unknown_event_types_are_kept_raw(emu: ClaudeEmulator, client: Any) -> None:
    provider = await provisioned(client)

    def step(_: Any) -> Any:
        emu.session().emit({"type": "session.some_future_event", "payload": 1})
        return say("ok")

    emu.agent.script = [step]
    result = await ml.run(provider, agent=WEATHER, prompt="x")
    future = [e for e in result.events if e["type"] == "session.some_future_event"]
    assert future == [future[0]]
    assert future[0]["payload"] == 1


async def test_spec_tools_differing_from_the_agent_is_a_named_error(
    emu: ClaudeEmulator, client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A provider bound to a provisioned agent, run with a spec whose tools differ: the
    spec and the agent drifted apart, so the run fails before anything is sent."""
    provider = await provisioned(client)  # the agent has get_weather only
    drifted = ml.AgentSpec(name="weather", tools=[get_weather, get_time])
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.run(provider, agent=drifted, prompt="x")
    assert info.value.code == "agent_tools_mismatch"
    assert info.value.context["spec_only"] == ["get_time"]
    assert info.value.context["agent_only"] == []
    assert not any(r.method == "POST" and r.path.endswith("/events") for r in emu.requests)
    # the same tools run fine, and without a drift warning
    with caplog.at_level("WARNING", logger="managedloop.providers.claude"):
        ok = await ml.run(provider, agent=WEATHER, prompt="x")
    assert ok.terminal is ml.Terminal.END_TURN
    assert "differs" not in caplog.text


async def test_same_tool_names_with_a_changed_schema_warn(
    emu: ClaudeEmulator, client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    @ml.tool(name="get_weather")
    def weather_v2(city: str, units: str = "C") -> str:
        """Current weather for a city, in units."""
        return f"Sunny in {city} ({units})"

    provider = await provisioned(client)
    changed = ml.AgentSpec(name="weather", tools=[weather_v2])
    with caplog.at_level("WARNING", logger="managedloop.providers.claude"):
        result = await ml.run(provider, agent=changed, prompt="x")
    assert result.terminal is ml.Terminal.END_TURN
    assert "'get_weather' differs between the agent and the AgentSpec" in caplog.text


@pytest.mark.parametrize("allow", [True, False], ids=["allow", "deny"])
async def test_tool_confirmation_round_trip(emu: ClaudeEmulator, client: Any, allow: bool) -> None:
    """A server tool held for confirmation (permission ``ask``) parks the session on
    ``requires_action`` naming the ``agent.tool_use``; ``send_event`` with the public
    builder allows or denies it and the session carries on."""
    from managedloop.providers.claude import tool_confirmation

    emu.confirm_tools = frozenset({"web_search"})
    emu.agent.script = [
        ml.testing.Reply(
            text="searching",
            tool_calls=[ToolCall(name="web_search", input={"q": "x"}, server=True)],
        ),
        say("found it"),
    ]
    provider = await provisioned(client)
    async with ml.start(provider, agent=WEATHER, prompt="search") as live:
        held = await live.result()
        (ask,) = [e for e in held.events if e["type"] == "agent.tool_use"]
        assert ask["evaluated_permission"] == "ask"
        assert held.stop_reason == {"type": "requires_action", "event_ids": [ask["id"]]}
        assert [u.id for u in held.server_tool_uses] == [ask["id"]]
        assert held.custom_tool_uses == []
        # The host waits on a confirmation only the caller can give: still requires_action,
        # with the pending decision in the result; the live session stays open for it.
        assert held.terminal is ml.Terminal.REQUIRES_ACTION
        assert held.reason == "approval_required"
        assert held.pending is not None
        (request,) = held.pending.approvals
        assert (request.id, request.source, request.verdict) == (ask["id"], "host", "ask")
        await live.send_event(tool_confirmation(ask["id"], allow=allow, deny_message="not now"))
        done = await live.result()
    assert done.terminal is ml.Terminal.END_TURN
    assert done.text == "found it"
    (result_event,) = [e for e in done.events if e["type"] == "agent.tool_result"]
    assert result_event["tool_use_id"] == ask["id"]
    assert result_event["is_error"] is (not allow)
    sent = [e for e in emu.sent_events() if e["type"] == "user.tool_confirmation"]
    assert sent == [tool_confirmation(ask["id"], allow=allow, deny_message="not now")]
    from .test_emulator import _validate_all

    assert {"user.tool_confirmation", "agent.tool_result"} <= _validate_all(emu.events())


async def test_text_delta_reaches_handle_event(emu: ClaudeEmulator, client: Any) -> None:
    """Each agent.message's text (its blocks joined with no separator) is handed to
    ``handle_event`` as a text delta; it is never recorded in ``SessionResult.events``."""
    emu.agent.script = [say("hi there")]
    seen: list[dict[str, Any]] = []

    class Handler:
        async def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
            return "unused"

        def handle_event(self, event: dict[str, Any], info: Any) -> None:
            seen.append(event)

    provider = await provisioned(client)
    result = await ml.run(provider, agent=WEATHER, prompt="x", handler=Handler())
    deltas = [e["text"] for e in seen if e["type"] == "managedloop.text_delta"]
    assert deltas == ["hi there"]
    assert not any(e["type"] == "managedloop.text_delta" for e in result.events)
    assert [e["id"] for e in seen if "id" in e] == [e["id"] for e in result.events]


async def test_send_event_is_verbatim_and_turn_events_are_not_repeated(
    emu: ClaudeEmulator, client: Any
) -> None:
    provider = await provisioned(client)
    raw = {"type": "user.message", "content": [{"type": "text", "text": "raw"}]}
    async with ml.start(provider, agent=WEATHER, prompt="hi") as session:
        first = await session.result()
        await session.send_event(raw)
        second = await session.result()
    assert emu.sent_events()[-1] == raw  # exactly as given, one event, one POST
    last_post = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/events")][-1]
    assert last_post.json == {"events": [raw]}
    assert not {e["id"] for e in first.events} & {e["id"] for e in second.events}
    assert [e["type"] for e in second.events].count("user.message") == 1


async def test_run_timeout_tears_down_and_keeps_the_partial_result(
    emu: ClaudeEmulator, client: Any
) -> None:
    emu.faults.event_delay = 0.2  # slower than the run's budget
    emu.agent.script = [say("slow")]
    provider = await provisioned(client)
    with pytest.raises(ml.SessionTimeoutError) as info:
        await ml.run(provider, agent=WEATHER, prompt="x", timeout=0.3)
    partial = info.value.partial_result
    assert partial is not None
    assert partial.session_id is not None
    assert any(e["type"] == "user.message" for e in partial.events)


def test_normalize_session_error_and_terminated_keep_their_reason() -> None:
    from managedloop.providers.claude._wire import normalize

    error = {"type": "session.error", "error": {"type": "billing_error", "message": "m"}}
    tr = normalize([error])
    assert tr.terminal is ml.Terminal.TERMINATED
    assert tr.stop_reason == error["error"]
    gone = normalize([{"type": "session.status_terminated", "stop_reason": {"type": "error"}}])
    assert gone.terminal is ml.Terminal.TERMINATED
    assert gone.stop_reason == {"type": "error"}


def test_sync_calls_from_two_threads_share_one_provider() -> None:
    """``run_sync`` from two threads at once: two loops, one built client each, each closed
    by its own loop (no ResourceWarning escapes)."""
    import threading

    with ClaudeEmulator() as emu:
        emu.faults.event_delay = 0.01  # keep both sessions open at the same time
        provider = ClaudeManagedAgents(
            api_key=emu.api_key, bearer_token_file=None, base_url=emu.base_url
        )
        handle = ml.provision_sync(provider, WEATHER)
        results: list[Any] = []

        def worker(prompt: str) -> None:
            results.append(ml.run_sync(provider, agent=handle, prompt=prompt))

        threads = [threading.Thread(target=worker, args=(p,)) for p in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert [r.terminal for r in results] == [ml.Terminal.END_TURN] * 2
        assert provider._clients._clients == {}  # every loop's client was closed
