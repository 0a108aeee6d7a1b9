"""Every emulator route through the ``anthropic`` SDK's strict response validation.

Issue 7: the emulator's agent had ``execution_identity: {"type": "agent"}`` and its
environment ``config`` lacked ``packages``; a client built with
``_strict_response_validation=True`` rejected both. One test sends a request to every route
the emulator serves (enumerated from its route table, so a new route without a call here
fails the test) through a strict client: resources, lists and history pages, the SSE
stream's events, and the error envelope of each failure kind. It uses only SDK calls that
exist since ``anthropic`` 2.10, so it runs on the oldest supported and the newest release.
"""

from __future__ import annotations

import re
from typing import Any

import anthropic
import pytest
from anthropic.types import ErrorResponse
from tests.claude.test_self_hosted_queue import strict_work_round_trip
from tests.webhooks.test_deployments import strict_deployment_round_trip

from managedloop.testing import ClaudeEmulator, ClaudeFaults, call, say
from managedloop.testing._claude.resources import RESOURCES, RefusedError, new_record

pytestmark = pytest.mark.anyio

TOOL = {
    "type": "custom",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _template(method: str, path: str, routes: list[tuple[str, str]]) -> tuple[str, str] | None:
    for route_method, template in routes:
        pattern = re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(template))  # any {name}
        if route_method == method and re.fullmatch(pattern, path):
            return route_method, template
    return None


async def _error_body(awaitable: Any) -> Any:
    with pytest.raises(anthropic.APIStatusError) as info:
        await awaitable
    return info.value.body


async def _session_round_trip(strict: anthropic.AsyncAnthropic, sid: str) -> list[str]:
    """Stream one turn with a custom tool call (user.message -> requires_action -> result
    -> end_turn), every event parsed strictly by the SDK's own stream."""
    stream = await strict.beta.sessions.events.stream(sid)
    sent = await strict.beta.sessions.events.send(
        sid, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
    )
    assert sent.data[0].type == "user.message"
    kinds: list[str] = []
    async with stream:
        async for event in stream:
            kinds.append(event.type)
            if event.type == "agent.custom_tool_use":
                use_id = event.id
            if event.type == "session.status_idle":
                if event.stop_reason.type == "end_turn":
                    break
                await strict.beta.sessions.events.send(
                    sid,
                    events=[
                        {
                            "type": "user.custom_tool_result",
                            "custom_tool_use_id": use_id,
                            "content": [{"type": "text", "text": "Sunny"}],
                        }
                    ],
                )
    return kinds


async def test_every_route_passes_strict_sdk_validation() -> None:
    with ClaudeEmulator([call("get_weather", {"city": "Paris"}), say("Sunny.")]) as emu:
        routes = emu.routes()
        async with anthropic.AsyncAnthropic(
            base_url=emu.base_url,
            api_key=emu.api_key,
            max_retries=0,
            _strict_response_validation=True,
        ) as strict:
            agents, envs, sessions, files = (
                strict.beta.agents,
                strict.beta.environments,
                strict.beta.sessions,
                strict.beta.files,
            )
            agent = await agents.create(name="a", model="claude-sonnet-4-6", tools=[TOOL])  # type: ignore[list-item]
            assert [a.id async for a in agents.list(limit=1)] == [agent.id]
            assert (await agents.retrieve(agent.id)).version == 1
            assert (await agents.update(agent.id, version=1, system="s")).version == 2
            env = await envs.create(name="e")
            assert [e.id async for e in envs.list()] == [env.id]
            assert (await envs.retrieve(env.id)).id == env.id
            session = await sessions.create(agent=agent.id, environment_id=env.id)
            assert [s.id async for s in sessions.list()] == [session.id]
            kinds = await _session_round_trip(strict, session.id)
            assert {"agent.custom_tool_use", "user.custom_tool_result"} <= set(kinds)
            assert (await sessions.retrieve(session.id)).status == "idle"
            # History pages (limit 2: several pages, each validated strictly).
            history = [e.type async for e in sessions.events.list(session.id, limit=2)]
            assert history == [e["type"] for e in emu.events(session.id)]
            upload = await files.upload(file=("in.txt", b"data", "text/plain"))
            resource = await sessions.resources.add(session.id, file_id=upload.id, type="file")
            assert resource.file_id == upload.id
            assert [r.id async for r in sessions.resources.list(session.id)] == [resource.id]
            output = emu.write_output(session.id, "out.txt", "result")
            assert [f.id async for f in files.list(scope_id=session.id)] == [output["id"]]
            assert len([f async for f in files.list()]) == 2
            assert (await files.retrieve_metadata(output["id"])).downloadable is True
            assert await (await files.download(output["id"])).read() == b"result"
            assert (await files.delete(upload.id)).id == upload.id
            assert (await sessions.archive(session.id)).archived_at is not None
            assert (await sessions.delete(session.id)).type == "session_deleted"
            await strict_deployment_round_trip(strict, emu, agent.id, env.id)
            await strict_work_round_trip(strict, emu, agent.id)  # self_hosted work queue
            assert (await agents.archive(agent.id)).archived_at is not None
            assert (await envs.archive(env.id)).archived_at is not None
            assert (await envs.delete(env.id)).type == "environment_deleted"

            # The error envelope of every failure kind the emulator answers.
            bodies = [
                await _error_body(agents.retrieve("agent_missing")),
                await _error_body(envs.retrieve("env_missing")),
                await _error_body(sessions.retrieve("sesn_missing")),
                await _error_body(files.retrieve_metadata("file_missing")),
                await _error_body(sessions.create(agent="agent_missing", environment_id="x")),
            ]
            emu.faults = ClaudeFaults(rate_limit=1)
            bodies.append(await _error_body(agents.list()))
            emu.faults = ClaudeFaults(server_errors=1)
            bodies.append(await _error_body(agents.list()))
            async with strict.copy(api_key="wrong") as unauthorized:
                bodies.append(await _error_body(unauthorized.beta.agents.list()))
        for body in bodies:
            ErrorResponse.model_validate(body)
        assert {b["error"]["type"] for b in bodies} == {
            "not_found_error",
            "rate_limit_error",
            "api_error",
            "authentication_error",
        }

    answered = {_template(r.method, r.path, routes) for r in emu.requests if r.status < 400}
    missing = sorted(set(routes) - answered)
    assert not missing, f"routes never sent through the strict client: {missing}"


def test_every_table_resource_parses_as_its_sdk_type() -> None:
    # The emulator's CRUD table: each row's record, built from only its required fields,
    # validates as the SDK type the row names; without them the create is refused (400)
    # before an id is minted.
    from anthropic.types import beta

    for resource in RESOURCES:
        minted: list[str] = []

        def mint(prefix: str, minted: list[str] = minted) -> str:
            minted.append(prefix + "000001")
            return minted[-1]

        with pytest.raises(RefusedError) as info:
            new_record(resource, {}, mint=mint, now="2026-04-01T00:00:00Z")
        assert info.value.status == 400
        assert minted == []
        body = dict.fromkeys(resource.required, "x")
        record = new_record(resource, body, mint=mint, now="2026-04-01T00:00:00Z")
        parsed = getattr(beta, resource.sdk_type).model_validate(record)
        assert (parsed.id, parsed.type) == (f"{resource.prefix}000001", resource.kind)
