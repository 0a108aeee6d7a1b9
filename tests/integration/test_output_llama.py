"""``output=`` against the real peer (``python -m llama_cpp.server``, SmolLM2-135M): the
server accepts the native strategy's ``response_format`` (json_object + schema, which it
turns into a grammar) and the tool strategy's output tool, and each session ends in a
documented way: a validated instance, or ``output_invalid`` with the payload and errors.
How often the weak model gets there is measured in ``bench/output.py``, not asserted."""

from __future__ import annotations

import pydantic
import pytest

import managedloop as ml
from managedloop.providers import Local

from ._peer import HAVE_MODEL, INSTALL

if not HAVE_MODEL:
    pytest.skip(f"the llama.cpp peer needs {INSTALL}", allow_module_level=True)

from .test_llama_server import server  # noqa: F401 (the module's server fixture)

pytestmark = pytest.mark.timeout(300)


class Capital(pydantic.BaseModel):
    country: str = pydantic.Field(max_length=32)
    capital: str = pydantic.Field(max_length=32)


def _provider(base_url: str, seed: int) -> Local:
    return Local(
        model="smollm2",
        base_url=base_url,
        api_key=None,
        profile="llama.cpp",
        max_retries=0,
        model_config={"temperature": 0.8, "seed": seed, "max_tokens": 128},
    )


@pytest.mark.parametrize("strategy", ["native", "tool"])
def test_the_server_takes_each_strategy_and_the_session_ends_as_documented(
    server: str,  # noqa: F811 (the fixture)
    strategy: str,
) -> None:
    agent = ml.AgentSpec(name="capital", system_prompt="Answer in JSON.")
    result = ml.run_sync(
        _provider(server, 0),
        agent=agent,
        prompt="What is the capital of France?",
        output=Capital,
        output_strategy=strategy,
        max_turns=3,
    )
    assert result.output_strategy == strategy
    if result.output is not None:
        assert isinstance(result.output, Capital)
        assert Capital.model_validate(result.output.model_dump()) == result.output
        assert result.reason is None
    else:  # the weak model never produced a valid one: named, with what it produced
        assert result.reason in {"output_invalid", "max_turns", None}
        if result.reason == "output_invalid":
            assert result.output_failure is not None
            assert result.output_failure.errors
