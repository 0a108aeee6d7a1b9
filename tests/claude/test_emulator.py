"""The emulator itself: SDK-type conformance of every event, framing, auth, pagination.

Issue 3 item 6: every emitted event validates against the ``anthropic`` SDK's own event
models (including tool confirmations, in ``test_provider.py``), the SDK's stream helper
decodes our framing, the API key / bearer token and the beta header are checked, lists
page, and the fault shapes (split / stale idles, 429 with retry-after) are what they say.
Reference §9 ``qa/provisioning_smoke_test`` (Claude): provision, run, teardown over the
emulator is ``test_provisioning.py`` + ``test_provider.py``.
"""

from __future__ import annotations

import typing
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types.beta.sessions import BetaManagedAgentsStreamSessionEvents

import managedloop as ml
from managedloop.testing import (
    ClaudeEmulator,
    ClaudeFaults,
    Fail,
    Grade,
    Reply,
    ToolCall,
    call,
    say,
)

from .conftest import WEATHER, provisioned

pytestmark = pytest.mark.anyio


def _variants() -> dict[str, Any]:
    union = typing.get_args(BetaManagedAgentsStreamSessionEvents)[0]
    out = {}
    for model in typing.get_args(union):
        literal = model.model_fields["type"].annotation
        out[typing.get_args(literal)[0]] = model
    return out


VARIANTS = _variants()


def _validate_all(events: list[dict[str, Any]]) -> set[str]:
    kinds = set()
    for event in events:
        model = VARIANTS.get(event["type"])
        assert model is not None, f"emitted a type the SDK does not know: {event['type']}"
        model.model_validate(event)  # strict pydantic validation of the shape
        kinds.add(event["type"])
    return kinds


async def test_every_emitted_event_parses_into_sdk_types(emu: ClaudeEmulator, client: Any) -> None:
    emu.agent.script = [
        Reply(
            text="looking",
            tool_calls=[
                ToolCall(name="web_search", input={"q": "x"}, server=True),
                ToolCall(name="get_weather", input={"city": "Paris"}),
            ],
        ),
        say("first answer"),
        say("draft"),
        Grade(result="needs_revision", explanation="more"),
        say("final"),
        Grade(result="satisfied"),
        Fail(message="boom", kind="internal_error"),
    ]
    provider = await provisioned(client)
    async with ml.start(provider, agent=WEATHER, prompt="go") as live:
        await live.result()
        await live.send_outcome({"description": "d", "rubric": "r", "max_iterations": 3})
        await live.result()
        await live.send("fail now")
        await live.result()
        await live.interrupt()
    kinds = _validate_all(emu.events())
    assert {
        "user.message",
        "session.status_running",
        "span.model_request_start",
        "agent.message",
        "agent.tool_use",
        "agent.tool_result",
        "agent.custom_tool_use",
        "span.model_request_end",
        "session.status_idle",
        "user.custom_tool_result",
        "user.define_outcome",
        "span.outcome_evaluation_start",
        "span.outcome_evaluation_end",
        "session.error",
        "user.interrupt",
    } <= kinds


async def test_terminated_and_deleted_events_parse(emu: ClaudeEmulator, client: Any) -> None:
    emu.faults.terminate_after = 4
    provider = await provisioned(client)
    await ml.run(provider, agent=WEATHER, prompt="go")
    sid = emu.session().id
    emu.faults.terminate_after = None
    emu.call(lambda: emu.session(sid).__setattr__("status", "idle"))
    await client.beta.sessions.delete(sid)
    # the deleted session is gone from the state; its last events were validated on the way
    assert sid not in emu.state.sessions


async def test_sdk_stream_helper_parses_emulator_frames(emu: ClaudeEmulator, client: Any) -> None:
    """The SDK's own AsyncStream decodes our framing into the right classes."""
    agent = await client.beta.agents.create(name="a", model="claude-haiku-4-5")
    env = await client.beta.environments.create(name="e")
    session = await client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    stream = await client.beta.sessions.events.stream(session.id)
    await client.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
    )
    seen = []
    async with stream:
        async for event in stream:
            assert type(event).__name__.endswith("Event")
            seen.append(event.type)
            if event.type == "session.status_idle":
                break
    assert seen[0] == "user.message"
    assert seen[-1] == "session.status_idle"


async def test_auth_and_beta_header_are_checked(emu: ClaudeEmulator) -> None:
    async with anthropic.AsyncAnthropic(
        base_url=emu.base_url, api_key="wrong", max_retries=0
    ) as bad:
        with pytest.raises(anthropic.AuthenticationError):
            await bad.beta.agents.list()
    async with httpx2.AsyncClient(base_url=emu.base_url) as raw:
        r = await raw.get("/v1/agents", headers={"x-api-key": emu.api_key})
        assert r.status_code == 400
        assert "beta" in r.json()["error"]["message"]
        ok = await raw.get(
            "/v1/agents",
            headers={"x-api-key": emu.api_key, "anthropic-beta": "managed-agents-2026-04-01"},
        )
        assert ok.status_code == 200
    assert all(
        "authorization" not in r.headers and "x-api-key" not in r.headers for r in emu.requests
    )


async def test_event_list_pagination(emu: ClaudeEmulator, client: Any) -> None:
    provider = await provisioned(client)
    await ml.run(provider, agent=WEATHER, prompt="go")
    sid = emu.session().id
    page = await client.beta.sessions.events.list(sid, limit=3)
    assert len(page.data) == 3
    assert page.next_page == "page_3"
    everything = [e.id async for e in client.beta.sessions.events.list(sid, limit=4)]
    assert everything == [e["id"] for e in emu.events()]


async def test_rate_limit_fault_sends_retry_after(emu: ClaudeEmulator, client: Any) -> None:
    emu.faults.rate_limit = 1
    emu.faults.retry_after = "0"
    agents = await client.beta.agents.list()  # the SDK retries the 429 itself
    assert agents.data == []
    assert [r.status for r in emu.requests] == [429, 200]


async def test_split_and_stale_fault_shapes(emu: ClaudeEmulator, client: Any) -> None:
    emu.faults = ClaudeFaults(split_requires_action=True)
    spec = ml.AgentSpec(name="two", tools=list(WEATHER.tools))
    emu.agent.script = [
        Reply(tool_calls=[ToolCall(name="get_weather", input={"city": c}) for c in "AB"]),
        say("ok"),
    ]
    provider = await provisioned(client, spec)
    await ml.run(provider, agent=spec, prompt="go")
    idles = [e["stop_reason"] for e in emu.events() if e["type"] == "session.status_idle"]
    uses = [e["id"] for e in emu.events() if e["type"] == "agent.custom_tool_use"]
    assert idles[0] == {"type": "requires_action", "event_ids": [uses[0]]}
    assert idles[1] == {"type": "requires_action", "event_ids": [uses[1]]}
    assert idles[2] == {"type": "end_turn"}


def test_sync_context_manager_and_default_script() -> None:
    with ClaudeEmulator([call("x")]) as emu:
        assert emu.base_url.startswith("http://127.0.0.1:")
        assert emu.api_key.startswith("sk-ant-emu-")
    assert emu._thread is None


async def test_tool_confirmation_is_validated(emu: ClaudeEmulator, client: Any) -> None:
    agent = await client.beta.agents.create(name="a", model="claude-haiku-4-5")
    env = await client.beta.environments.create(name="e")
    session = await client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    bad = {"type": "user.tool_confirmation", "tool_use_id": "sevt_nope", "result": "allow"}
    strict = client.with_options(max_retries=0)  # shares the fixture's pool: not closed here
    with pytest.raises(anthropic.BadRequestError) as info:
        await strict.beta.sessions.events.send(session.id, events=[bad])  # type: ignore[list-item]
    assert "not awaiting a confirmation" in str(info.value)
