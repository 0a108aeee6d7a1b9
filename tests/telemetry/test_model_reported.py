"""The model telemetry names is the one the host says it sends (the connection's
``model``), not one the session layer works out from the provider's attributes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import managedloop as ml
from managedloop import telemetry
from managedloop.providers import BedrockAgentCore, Local
from managedloop.testing import AgentCoreEmulator, ChatEmulator, ScriptedChatModel, say

pytestmark = pytest.mark.anyio


@pytest.fixture
def models() -> Iterator[dict[str, list[Any]]]:
    """The ``model`` of each session.turn.start and session.request.stop event."""
    seen: dict[str, list[Any]] = {"turn": [], "request": []}

    def listener(name: str, _m: Any, meta: Any) -> None:
        key = "turn" if name.endswith("turn.start") else "request"
        seen[key].append(meta.get("model"))

    names = ["managedloop.session.turn.start", "managedloop.session.request.stop"]
    handle = telemetry.attach(listener, names)
    try:
        yield seen
    finally:
        telemetry.detach(handle)


async def test_local_reports_its_model_config_fallback(models: dict[str, list[Any]]) -> None:
    chat = ScriptedChatModel([say("hi")])
    spec = ml.AgentSpec(name="a", model_config={"model": "from-config"})
    await ml.run(Local(chat=chat), agent=spec, prompt="x")
    assert chat.requests[0].model == "from-config"  # what was sent ...
    assert models == {"turn": ["from-config"], "request": ["from-config"]}  # ... is named


async def test_local_reports_the_model_without_the_anthropic_prefix(
    models: dict[str, list[Any]],
) -> None:
    with ChatEmulator([say("hi")]) as emu:
        provider = Local(
            model="anthropic:claude-test", base_url=emu.anthropic_base_url, api_key=emu.api_key
        )
        await ml.run(provider, agent=ml.AgentSpec(name="a"), prompt="x")
    assert emu.requests[0].model == "claude-test"  # what the Messages API was sent
    assert models == {"turn": ["claude-test"], "request": ["claude-test"]}


async def test_a_live_request_names_the_connection_model(models: dict[str, list[Any]]) -> None:
    chat = ScriptedChatModel([say("one"), say("two")])
    async with ml.start(Local(model="m2", chat=chat), agent=ml.AgentSpec(model="other")) as s:
        await s.send("a")
        await s.result()
        await s.send("b")
        await s.result()
    assert models == {"turn": ["m2", "m2"], "request": ["m2", "m2"]}


async def test_agentcore_reports_its_model_union(
    models: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    union = {"bedrockModelConfig": {"modelId": "us.anthropic.claude-sonnet-4-6"}}
    with AgentCoreEmulator([say("ok")]) as emu:
        async with BedrockAgentCore(
            harness_arn=emu.harness_arn, model=union, retry_backoff=0.0, **emu.client_kwargs
        ) as provider:
            await ml.run(provider, agent=ml.AgentSpec(name="a", model="spec-model"), prompt="x")
    assert emu.agent.requests[0].model == "us.anthropic.claude-sonnet-4-6"
    sent = "us.anthropic.claude-sonnet-4-6"
    assert models == {"turn": [sent], "request": [sent]}


async def test_without_a_reported_model_the_spec_model_is_named(
    models: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with AgentCoreEmulator([say("ok")]) as emu:
        async with BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        ) as provider:
            await ml.run(provider, agent=ml.AgentSpec(name="a", model="spec-model"), prompt="x")
    assert models == {"turn": ["spec-model"], "request": ["spec-model"]}
