"""The emulator refuses a retired or unknown Bedrock model id as Bedrock does: 400
ValidationException "The provided model identifier is invalid.", on every request that
carries one (CreateHarness, UpdateHarness, InvokeHarness)."""

from __future__ import annotations

import pytest

import managedloop as ml
from managedloop.testing import AgentCoreEmulator, say
from managedloop.testing._agentcore.models import ACTIVE, INVALID_MODEL, RETIRED

from .conftest import make_provider

pytestmark = pytest.mark.anyio

RETIRED_ID = "us." + next(iter(RETIRED))


@pytest.mark.parametrize("model", [RETIRED_ID, "anthropic.claude-made-up-v9:0"])
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


@pytest.mark.parametrize("model", [*sorted(ACTIVE), "us.x", "global." + sorted(ACTIVE)[0]])
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
