"""Bad options fail at construction (or entry) with a named error, before any request.

Issue 7 "Bad options that reach the wire": every pattern check is a full match (a
trailing newline was accepted and ``qualifier=DEFAULT%0A`` was sent); unknown keywords are
refused with the accepted list (``foo=`` surfaced at run time as a transport error) while
botocore's own client keywords still reach botocore; wrong types and NaN/infinite
durations are ``invalid_opts``. Also: concurrent first uses share one ``GetHarness``.
"""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

import managedloop as ml
from managedloop.providers import BedrockAgentCore
from managedloop.providers.agentcore import new_runtime_session_id, validate_runtime_session_id
from managedloop.providers.agentcore._ids import harness_id_of, validate_endpoint_name
from managedloop.testing import AgentCoreEmulator, call, say

from .conftest import make_provider

pytestmark = pytest.mark.anyio

ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/h-abc"
SID = "s" * 40


@ml.tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"found {city}"


AGENT = ml.AgentSpec(name="options", tools=[lookup])


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("harness_arn", ARN + "\n"),
        ("harness_arn", ARN + "/x"),
        ("harness_arn", 123),
        ("runtime_session_id", SID + "\n"),
        ("session_id", SID + "\n"),
        ("endpoint_name", "DEFAULT\n"),
        ("endpoint_name", 7),
        ("idle_timeout", math.nan),
        ("idle_timeout", math.inf),
        ("idle_timeout", "5"),
        ("retry_backoff", math.nan),
        ("retry_backoff", math.inf),
        ("retry_backoff", "x"),
        ("retry_backoff", -1),
        ("invoke_retries", True),
        ("timeout_seconds", 1.5),
        ("actor_id", 5),
        ("runtime_user_id", ""),
        ("region_name", 1),
        ("endpoint_url", 1),
        ("system_prompt", 12),
        ("harness_tools", "browser"),
        ("harness_tools", [1]),
    ],
)
def test_bad_options_are_invalid_opts(option: str, value: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        BedrockAgentCore(**{option: value})
    assert info.value.context["option"] == option
    assert info.value.code in ("invalid_opts", "invalid_session_id")


def test_patterns_match_the_whole_value() -> None:
    with pytest.raises(ml.InvalidOptionsError):
        validate_runtime_session_id(SID + "\n")
    with pytest.raises(ml.InvalidOptionsError):
        validate_endpoint_name("DEFAULT\n")
    with pytest.raises(ml.InvalidOptionsError):
        harness_id_of(ARN + "\n")
    with pytest.raises(ml.InvalidOptionsError):
        new_runtime_session_id("demo\n")
    assert harness_id_of(ARN) == "h-abc"


def test_unknown_keywords_are_refused_with_the_accepted_list() -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        BedrockAgentCore(harness_arn=ARN, foo=1)
    err = info.value
    assert err.code == "invalid_opts"
    assert err.context["option"] == "foo"
    for accepted in ("harness_arn", "endpoint_url", "aws_session_token", "verify", "use_ssl"):
        assert accepted in str(err)


def test_botocore_client_keywords_still_reach_botocore(emu: AgentCoreEmulator) -> None:
    with make_provider(emu, verify=False, use_ssl=False, api_version=None) as provider:
        client = provider.clients.data()
        assert client.meta.endpoint_url == emu.endpoint_url


async def test_a_trailing_newline_never_reaches_the_wire(emu: AgentCoreEmulator) -> None:
    with pytest.raises(ml.InvalidOptionsError):
        make_provider(emu, endpoint_name="DEFAULT\n")
    with make_provider(emu, harness_tools=[]) as provider:
        with pytest.raises(ml.InvalidOptionsError):
            await ml.run(provider, agent=AGENT, prompt="x", resume=SID + "\n")
        with pytest.raises(ml.InvalidOptionsError):
            await provider.run_command("true", session_id=SID, qualifier="DEFAULT\n")
        with pytest.raises(ml.InvalidOptionsError):
            await provider.run_command("true", session_id=SID, idle_timeout=math.nan)
        with pytest.raises(ml.InvalidOptionsError):
            await provider.run_command("true", session_id=SID, timeout=math.inf)  # type: ignore[arg-type]
    assert emu.requests == []


@pytest.mark.parametrize(
    ("option", "value"),
    [("timeout", math.nan), ("timeout", math.inf), ("poll_interval", math.nan), ("max_polls", -1)],
)
async def test_provision_durations_refuse_nan_and_infinity(
    emu: AgentCoreEmulator, option: str, value: Any
) -> None:
    with make_provider(emu) as provider, pytest.raises(ml.InvalidOptionsError) as info:
        await provider.provision(
            AGENT, execution_role_arn=emu.execution_role_arn, **{option: value}
        )
    assert info.value.context["option"] == option
    assert emu.requests == []


async def test_provision_refuses_a_role_arn_with_a_newline(emu: AgentCoreEmulator) -> None:
    role = emu.execution_role_arn + "\nx"  # (surrounding whitespace is stripped, by design)
    with make_provider(emu) as provider, pytest.raises(ml.InvalidOptionsError) as info:
        await provider.provision(AGENT, execution_role_arn=role)
    assert info.value.context["option"] == "execution_role_arn"
    assert emu.requests == []


# --------------------------------------------------------------------------- GetHarness once

N = 50


async def test_concurrent_first_uses_share_one_get_harness(emu: AgentCoreEmulator) -> None:
    emu.set_script([say("hi")] * (N + 1))
    with make_provider(emu) as provider:
        results: list[ml.SessionResult] = []

        async def one() -> None:
            results.append(await ml.run(provider, agent=AGENT, prompt="x"))

        async with anyio.create_task_group() as tg:
            for _ in range(N):
                tg.start_soon(one)
        assert len(results) == N
        await ml.run(provider, agent=AGENT, prompt="again")  # cached from now on
    assert len(emu.operations("GetHarness")) == 1
    assert len(emu.operations("InvokeHarness")) == N + 1


async def test_a_failed_get_harness_is_shared_then_retried(emu: AgentCoreEmulator) -> None:
    emu.set_script([say("hi")] * 2)
    with make_provider(emu) as provider:
        inner = provider.control_call
        calls: list[str] = []
        gate = anyio.Event()

        async def failing_once(operation: str, **kw: Any) -> Any:
            calls.append(operation)
            if len(calls) == 1:
                await gate.wait()  # hold the first call until every waiter is queued
                raise ml.TransportError("boom", code="transport_error")
            return await inner(operation, **kw)

        provider.control_call = failing_once  # type: ignore[method-assign]
        errors: list[BaseException] = []

        async def one() -> None:
            try:
                await ml.run(provider, agent=AGENT, prompt="x")
            except ml.ProviderError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(one)
            while len(provider._harness_flights) == 0:
                await anyio.sleep(0)
            for _ in range(50):  # let every other task reach the shared wait
                await anyio.sleep(0)
            gate.set()
        assert calls == ["get_harness"]  # one call for ten concurrent first uses
        assert len(errors) == 10
        assert {getattr(e, "code", None) for e in errors} == {"harness_tools_unavailable"}
        result = await ml.run(provider, agent=AGENT, prompt="retry")  # not cached: retried
    assert result.text == "hi"
    assert calls == ["get_harness", "get_harness"]
    assert len(emu.operations("GetHarness")) == 1


async def test_harness_tools_skip_get_harness(emu: AgentCoreEmulator) -> None:
    emu.set_script([call("lookup", {"city": "P"}), say("done")])
    with make_provider(emu, harness_tools=[]) as provider:
        result = await ml.run(provider, agent=AGENT, prompt="x")
    assert result.text == "done"
    assert emu.operations("GetHarness") == []
