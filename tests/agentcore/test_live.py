"""Live smoke test against the real service (runs only with credentials and a harness).

Set ``AGENTCORE_LIVE_HARNESS_ARN``, AWS credentials (``AWS_ACCESS_KEY_ID``/
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, a web identity or container credentials) and
``AWS_REGION``, then ``make test-live`` (every live test of every host) or
``pytest -m live -rs tests/agentcore/test_live.py``. ``AWS_ENDPOINT_URL_BEDROCK_AGENTCORE``
(botocore's own setting) points it elsewhere, e.g. at ``managedloop emulate agentcore``.

The AgentCore conftest leaves this module's environment alone (its isolation would strip
the credentials), and whether it can run is decided when it runs, with the missing pieces
named in the skip reason (``-rs`` prints it). ``test_live_gate.py`` proves both ways.
"""

from __future__ import annotations

import os

import pytest

import managedloop as ml
from weather import get_weather

pytestmark = [pytest.mark.live, pytest.mark.anyio]

_CREDENTIALS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def missing() -> list[str]:
    """What the live test lacks, read from the environment now (never at import)."""
    out = []
    if not os.environ.get("AGENTCORE_LIVE_HARNESS_ARN"):
        out.append("AGENTCORE_LIVE_HARNESS_ARN")
    if not any(os.environ.get(name) for name in _CREDENTIALS):
        out.append("AWS credentials (" + " | ".join(_CREDENTIALS) + ")")
    if not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
        out.append("AWS_REGION")
    return out


async def test_live_tool_round_trip() -> None:
    lacking = missing()
    if lacking:
        pytest.skip("live AgentCore test needs " + ", ".join(lacking))
    from managedloop.providers import BedrockAgentCore

    arn = os.environ["AGENTCORE_LIVE_HARNESS_ARN"]
    agent = ml.AgentSpec(
        name="live", system_prompt="Use get_weather, then answer.", tools=[get_weather]
    )
    with BedrockAgentCore(harness_arn=arn, timeout_seconds=300, max_iterations=10) as provider:
        result = await ml.run(provider, agent=agent, prompt="Weather in Paris?", timeout=600)
        assert result.terminal is ml.Terminal.END_TURN
        assert "get_weather" in [u.name for u in result.custom_tool_uses]
        again = await ml.run(
            provider, agent=agent, prompt="Which city did I ask about?", resume=result, timeout=600
        )
    assert again.session_id == result.session_id
