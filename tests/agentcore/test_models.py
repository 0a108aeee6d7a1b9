"""The emulator refuses a model id Bedrock refuses as Bedrock does: 400 ValidationException
"The provided model identifier is invalid.", on every request that carries one
(CreateHarness, UpdateHarness, InvokeHarness): a bare Claude API id, and a retired or
unknown id of a provider its table covers."""

from __future__ import annotations

import pytest

import managedloop as ml
from managedloop.testing import AgentCoreEmulator, say
from managedloop.testing._agentcore.models import (
    ACTIVE,
    INVALID_MODEL,
    JUDGED_PROVIDERS,
    OTHER,
    RETIRED,
    model_problem,
)

from .conftest import make_provider

pytestmark = pytest.mark.anyio

RETIRED_ID = "us." + next(iter(RETIRED))


@pytest.mark.parametrize(
    "model",
    [
        RETIRED_ID,
        "anthropic.claude-made-up-v9:0",
        "claude-sonnet-5-5",  # a Claude API id: Bedrock names the model its own way
        "claude-haiku-4-5-20251001",
        "amazon.nova-made-up-v1:0",
    ],
)
async def test_a_retired_or_unknown_id_is_a_validation_exception(model: str) -> None:
    with AgentCoreEmulator([say("hi")]) as emu, make_provider(emu, model=model) as provider:
        with pytest.raises(ml.APIStatusError) as invoked:
            await ml.run(provider, agent=ml.AgentSpec(name="m"), prompt="go")
        with pytest.raises(ml.APIStatusError) as created:
            await provider.provision(
                ml.AgentSpec(name="m", model=model), execution_role_arn=emu.execution_role_arn
            )
    for failure in (invoked.value, created.value):
        assert failure.status == 400
        assert INVALID_MODEL in failure.message


@pytest.mark.parametrize(
    "model",
    [
        *sorted(ACTIVE),
        *sorted(OTHER),
        "us.x",
        "global." + sorted(ACTIVE)[0],
        "us.amazon.nova-pro-v1:0",
        "mistral.any-model-v1:0",  # a provider the table does not cover: not judged
    ],
)
async def test_a_known_id_and_another_providers_id_are_accepted(model: str) -> None:
    with AgentCoreEmulator([say("hi")]) as emu, make_provider(emu, model=model) as provider:
        result = await ml.run(provider, agent=ml.AgentSpec(name="m"), prompt="go")
    assert result.text == "hi"


def test_every_retired_id_has_a_date() -> None:
    import datetime as dt

    for model, date in RETIRED.items():
        assert model.startswith("anthropic.")
        assert dt.date.fromisoformat(date) < dt.date(2026, 12, 3)
        assert model not in ACTIVE


async def test_update_harness_refuses_a_bare_claude_id_too() -> None:
    spec = ml.AgentSpec(name="m", model="us.anthropic.claude-haiku-4-5-20251001-v1:0")
    with AgentCoreEmulator() as emu, make_provider(emu) as provider:
        role = emu.execution_role_arn
        await provider.provision(spec, execution_role_arn=role, update=True, timeout=5)
        with pytest.raises(ml.APIStatusError) as updated:
            await provider.provision(
                ml.AgentSpec(name="m", model="claude-haiku-4-5"),
                execution_role_arn=role,
                update=True,
                timeout=5,
            )
    assert updated.value.status == 400
    assert INVALID_MODEL in updated.value.message


def test_every_table_entry_names_its_source_and_a_judged_provider() -> None:
    for model, source in {**ACTIVE, **OTHER}.items():
        assert source.strip(), model
        assert model.split(".", 1)[0] in JUDGED_PROVIDERS
        assert model_problem(model) is None
        assert model_problem("eu." + model) is None
    assert model_problem("claude-opus-4-7") == INVALID_MODEL
    assert model_problem("anthropic.claude-opus-4-7") is None
    assert model_problem(None) is None  # types are botocore's to judge
