"""Issue 21 item 5: the emulator checks every request body against the SDK's own types.

A body that does not meet the ``anthropic.types.beta`` ``*Params`` TypedDict of its route
(an unknown key, a wrong type, a missing required field) is answered ``400
invalid_request_error`` naming the field, in the service's error envelope; a model id the
service does not serve (retired, unknown, misspelled) is ``404 not_found_error``. The
checks are on by default, so the whole suite runs with them; these tests send wrong
bodies on purpose, through the SDK (``extra_body``) and as raw JSON.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import ErrorResponse

from managedloop.testing import ClaudeEmulator
from managedloop.testing._claude import bodies, models
from retired_models import RETIRED

pytestmark = pytest.mark.anyio

TOOL = {
    "type": "custom",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
HEADERS = {"anthropic-beta": "managed-agents-2026-04-01"}


async def _refusal(awaitable: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(anthropic.APIStatusError) as info:
        await awaitable
    body = info.value.body
    assert isinstance(body, dict)
    ErrorResponse.model_validate(body)  # the service's envelope, by the SDK's own type
    return info.value.status_code, body["error"]


async def test_an_unknown_key_is_a_400_naming_it(emu: ClaudeEmulator, client: Any) -> None:
    status, error = await _refusal(
        client.beta.agents.create(
            name="a", model="claude-haiku-4-5", extra_body={"toolz": []}, extra_headers=HEADERS
        )
    )
    assert status == 400
    assert error == {
        "type": "invalid_request_error",
        "message": "toolz: Extra inputs are not permitted",
    }
    assert emu.state.agents == {}  # refused before anything was made


async def test_nested_unknown_keys_wrong_types_and_missing_fields(
    emu: ClaudeEmulator, client: Any
) -> None:
    agent = await client.beta.agents.create(name="a", model="claude-haiku-4-5", tools=[TOOL])
    env = await client.beta.environments.create(name="e")
    sessions = client.beta.sessions
    cases: list[tuple[Any, str]] = [
        (
            client.beta.agents.create(name="b", model="claude-haiku-4-5", tools=[{**TOOL, "x": 1}]),
            "tools.0.x: Extra inputs are not permitted",
        ),
        (
            sessions.create(
                agent={"type": "agent", "id": agent.id, "version": "1"},  # a string, not an int
                environment_id=env.id,
            ),
            "agent.version: Input should be a valid integer",
        ),
        (
            sessions.create(agent=agent.id, environment_id=env.id, vault_ids="vlt_1"),
            "vault_ids: Input should be a valid array",
        ),
        (
            sessions.create(
                agent=agent.id,
                environment_id=env.id,
                resources=[{"type": "file", "file_id": "file_1", "mount": "/x"}],
            ),
            "resources.0.mount: Extra inputs are not permitted",
        ),
        (
            sessions.create(agent=agent.id, environment_id=env.id, extra_body={"betas": ["x"]}),
            "betas: Extra inputs are not permitted",  # a header parameter, not a body key
        ),
    ]
    for call, message in cases:
        status, error = await _refusal(call)
        assert (status, error["type"], error["message"]) == (
            400,
            "invalid_request_error",
            message,
        )
    session = await sessions.create(agent=agent.id, environment_id=env.id)
    status, error = await _refusal(
        sessions.events.send(
            session.id,
            events=[{"type": "user.message", "content": [{"type": "text", "txt": "hi"}]}],  # type: ignore[typeddict-unknown-key]
        )
    )
    assert status == 400
    assert error["message"].startswith("events.0.content.0")
    assert emu.session(session.id).events == []  # nothing was applied


async def test_raw_bodies_missing_and_mistyped(emu: ClaudeEmulator) -> None:
    headers = {**HEADERS, "x-api-key": emu.api_key}
    async with httpx2.AsyncClient(base_url=emu.base_url, headers=headers) as http:
        missing = await http.post("/v1/agents", json={"name": "a"})
        mistyped = await http.post("/v1/agents", json={"name": 7, "model": "claude-haiku-4-5"})
        no_body = await http.post("/v1/sessions", json={})
    assert (missing.status_code, missing.json()["error"]["message"]) == (
        400,
        "model: Field required",
    )
    assert mistyped.status_code == 400
    assert mistyped.json()["error"]["message"] == "name: Input should be a valid string"
    assert no_body.status_code == 400
    assert no_body.json()["error"]["message"] == "agent: Field required"


async def test_checks_can_be_turned_off() -> None:
    with ClaudeEmulator(validate_requests=False) as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            agent = await c.beta.agents.create(
                name="a", model="claude-sonet-4-6", extra_body={"toolz": []}
            )
    assert agent.name == "a"


def test_every_body_route_has_an_sdk_type() -> None:
    """Each route taking a JSON body is in ``BODY_TYPES``, whose types all exist in the
    installed SDK; a new route without one fails here."""
    assert bodies.unchecked_routes() == []
    emu = ClaudeEmulator()
    bodyless = {
        ("POST", "/v1/agents/{id}/archive"),
        ("POST", "/v1/environments/{id}/archive"),
        ("POST", "/v1/sessions/{id}/archive"),
        ("POST", "/v1/deployments/{id}/archive"),
        ("POST", "/v1/deployments/{id}/pause"),
        ("POST", "/v1/deployments/{id}/unpause"),
        ("POST", "/v1/deployments/{id}/run"),
        ("POST", "/v1/files"),  # multipart, not JSON
        ("POST", "/v1/environments/{env}/work/{work_id}/ack"),
    }
    posts = {r for r in emu.routes() if r[0] == "POST"}
    unchecked = sorted(posts - set(bodies.BODY_TYPES) - bodyless)
    assert unchecked == []


# -- model ids -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "model",
    [*RETIRED, "claude-sonet-4-6", "gpt-4o"],
)
async def test_a_retired_or_unknown_model_is_a_404(
    emu: ClaudeEmulator, client: Any, model: str
) -> None:
    status, error = await _refusal(client.beta.agents.create(name="a", model=model))
    assert (status, error) == (404, {"type": "not_found_error", "message": f"model: {model}"})
    status, error = await _refusal(client.beta.agents.create(name="a", model={"id": model}))
    assert status == 404
    assert emu.state.agents == {}


async def test_session_overrides_and_updates_check_the_model(
    emu: ClaudeEmulator, client: Any
) -> None:
    agent = await client.beta.agents.create(name="a", model="claude-haiku-4-5")
    env = await client.beta.environments.create(name="e")
    status, error = await _refusal(
        client.beta.sessions.create(
            agent={"type": "agent_with_overrides", "id": agent.id, "model": "claude-sonnet-4-5"},
            environment_id=env.id,
        )
    )
    assert (status, error["type"]) == (404, "not_found_error")
    status, _ = await _refusal(client.beta.agents.update(agent.id, model="claude-sonnet-4-5"))
    assert status == 404
    updated = await client.beta.agents.update(agent.id, model="claude-sonnet-5-5")
    assert updated.model.id == "claude-sonnet-5-5"


def test_a_deprecated_model_is_served_until_its_date() -> None:
    status = models.CURRENT["claude-opus-4-5"]
    assert status.retires_on is not None
    day_before = status.retires_on - dt.timedelta(days=1)
    assert models.model_problem("claude-opus-4-5", today=day_before) is None
    assert models.model_problem("claude-opus-4-5", today=status.retires_on) is not None


def test_the_tables_do_not_overlap_and_name_their_sources() -> None:
    assert not set(models.CURRENT) & set(RETIRED)
    for retired in RETIRED.values():
        assert retired.source
        assert retired.replacement in models.CURRENT
    assert all(s.source for s in models.CURRENT.values())
