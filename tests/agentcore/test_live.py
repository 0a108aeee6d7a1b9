"""Live smoke test against the real service (runs only with credentials and a harness).

Set ``AGENTCORE_LIVE_HARNESS_ARN`` (and AWS credentials via the usual chain, plus
``AWS_REGION``) to run it: ``pytest -m live tests/agentcore/test_live.py``.
"""

from __future__ import annotations

import os

import pytest

import managedloop as ml
from weather import get_weather

pytestmark = [pytest.mark.live, pytest.mark.anyio]

ARN = os.environ.get("AGENTCORE_LIVE_HARNESS_ARN")
HAS_KEYS = bool(os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE"))


@pytest.mark.skipif(
    not (ARN and HAS_KEYS), reason="needs AWS credentials and AGENTCORE_LIVE_HARNESS_ARN"
)
async def test_live_tool_round_trip() -> None:
    from managedloop.providers import BedrockAgentCore

    agent = ml.AgentSpec(
        name="live", system_prompt="Use get_weather, then answer.", tools=[get_weather]
    )
    with BedrockAgentCore(harness_arn=ARN, timeout_seconds=300, max_iterations=10) as provider:
        result = await ml.run(provider, agent=agent, prompt="Weather in Paris?", timeout=600)
        assert result.terminal is ml.Terminal.END_TURN
        again = await ml.run(
            provider, agent=agent, prompt="Which city did I ask about?", resume=result, timeout=600
        )
    assert again.session_id == result.session_id
