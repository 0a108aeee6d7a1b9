"""Malformed endpoints and regions are refused at construction (hostile review, finding 3)."""

from __future__ import annotations

from typing import Any

import pytest

import managedloop as ml
from managedloop.providers.agentcore import BedrockAgentCore

from ._peer import ARN

# ------------------------------------------------------------------ 3. options


@pytest.mark.parametrize(
    "options",
    [
        {"endpoint_url": "http://u:pw@127.0.0.1:abc"},
        {"endpoint_url": "http://user:pass@127.0.0.1:9"},
        {"endpoint_url": "ftp://127.0.0.1:9"},
        {"endpoint_url": "http://127.0.0.1:99999"},
        {"endpoint_url": "http:///path"},
        {"endpoint_url": "http://127.0.0.1:9\n"},
        {"endpoint_url": "127.0.0.1:9"},
        {"control_endpoint_url": "https://user:pass@127.0.0.1"},
        {"region_name": "us-east-1\n"},
        {"region_name": "evil.com/"},
        {"region_name": "US-EAST-1"},
    ],
)
def test_a_malformed_endpoint_or_region_is_invalid_opts(options: dict[str, Any]) -> None:
    kwargs: dict[str, Any] = {
        "region_name": "us-east-1",
        "aws_access_key_id": "AKIAEXAMPLE",
        "aws_secret_access_key": "s" * 40,
        **options,
    }
    with pytest.raises(ml.InvalidOptionsError) as info:
        BedrockAgentCore(harness_arn=ARN, **kwargs)
    assert info.value.code == "invalid_opts"
    assert info.value.context["option"] == next(iter(options))
    for secret in ("pw", "pass"):
        assert f":{secret}@" not in str(info.value)


def test_a_region_from_the_environment_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "evil.com/")
    with pytest.raises(ml.InvalidOptionsError) as info:
        BedrockAgentCore(
            harness_arn=ARN, aws_access_key_id="AKIAEXAMPLE", aws_secret_access_key="s" * 40
        )
    assert info.value.context["option"] == "region_name"


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9", "https://bedrock-agentcore.us-east-1.amazonaws.com", "http://[::1]:80/"],
)
def test_well_formed_endpoints_are_accepted(url: str) -> None:
    provider = BedrockAgentCore(harness_arn=ARN, endpoint_url=url, region_name="eu-west-3")
    assert provider.clients.endpoint_url == url
