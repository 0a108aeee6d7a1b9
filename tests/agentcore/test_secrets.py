"""AWS credentials never leak (DESIGN.md "Secrets never leak"; §9 conformance/redaction).

One provider with an access key, a secret key and a session token drives everything that
talks, logs or fails: a tool round trip, a failed turn (exception frame), an unauthenticated
call (wrong secret), provisioning with a failure and a rollback, a shell command. Then the
secret key and the session token must appear in no ``repr``, no log record at any level of
any logger (botocore's own included), no exception text or context, no telemetry event,
and nothing the emulator recorded (``emu.requests``).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

import managedloop as ml
from emitted import emitted
from managedloop.providers import BedrockAgentCore
from managedloop.testing import AgentCoreEmulator, AgentCoreFaults, call, say

from .conftest import make_provider

pytestmark = pytest.mark.anyio

TOKEN = "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKENdoNotLeak0123456789"


@ml.tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"found {city}"


AGENT = ml.AgentSpec(name="secrets", tools=[lookup])


def _everything(value: Any) -> str:
    """A textual dump deep enough to catch a secret anywhere inside ``value``."""
    if isinstance(value, BaseException):
        parts = [repr(value), str(value), _everything(getattr(value, "context", {}))]
        return "\n".join([*parts, _everything(value.__cause__), _everything(value.__context__)])
    return repr(value)


async def test_credentials_appear_nowhere(caplog: pytest.LogCaptureFixture) -> None:
    errors: list[BaseException] = []
    emu = AgentCoreEmulator([call("lookup", {"city": "Paris"}), say("done")])
    secret = emu.client_kwargs["aws_secret_access_key"]
    # caplog at DEBUG on the root: every logger, botocore's included
    with emitted() as events, caplog.at_level(logging.DEBUG), emu:
        with make_provider(emu, aws_session_token=TOKEN) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="Paris?")
            assert result.terminal is ml.Terminal.END_TURN

            emu.set_script([say("again")])
            emu.faults = AgentCoreFaults(exception_at=1, exception_type="validationException")
            with pytest.raises(ml.ManagedLoopError) as failed_turn:
                await ml.run(provider, agent=AGENT, prompt="fail")
            errors.append(failed_turn.value)
            emu.faults = AgentCoreFaults()

            emu.faults = AgentCoreFaults(harness_outcome="CREATE_FAILED")
            with pytest.raises(ml.ProvisioningError) as failed_provision:
                await provider.provision(
                    AGENT, execution_role_arn=emu.execution_role_arn, timeout=2
                )
            errors.append(failed_provision.value)
            emu.faults = AgentCoreFaults()

            out = await provider.run_command("echo hi", session_id=result.session_id or "")
            assert out.stdout == "hi\n"
            reprs = [repr(provider), repr(provider.clients), repr(emu), repr(result)]

        kwargs = {**emu.client_kwargs, "aws_secret_access_key": "not-" + secret}
        with BedrockAgentCore(
            harness_arn=emu.harness_arn, harness_tools=[], aws_session_token=TOKEN, **kwargs
        ) as wrong:
            with pytest.raises(ml.AuthenticationError) as denied:
                await ml.run(wrong, agent=AGENT, prompt="hi")
            errors.append(denied.value)
            reprs.append(repr(wrong))

    # The run really was signed with the token (else its absence would prove nothing).
    assert any(k.lower() == "x-amz-security-token" for r in emu.requests for k in r.headers), (
        "the session token header was never sent"
    )
    assert {r.operation for r in emu.requests} >= {
        "InvokeHarness",
        "CreateHarness",
        "DeleteHarness",
        "InvokeAgentRuntimeCommand",
        "Unauthenticated",
    }
    assert len(errors) == 3
    assert events
    assert caplog.records
    logs = "\n".join(
        f"{r.name} {r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records
    )
    haystacks = {
        "reprs": "\n".join(reprs),
        "logs": logs,
        "errors": "\n".join(_everything(e) for e in errors),
        "telemetry": repr(events),
        "emu.requests": repr(emu.requests),
    }
    for where, text in haystacks.items():
        assert secret not in text, f"the secret access key leaked into {where}"
        assert TOKEN not in text, f"the session token leaked into {where}"


async def test_a_dropped_data_plane_connection_leaks_no_credentials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The aiohttp path: its errors (and their causes) and the retry log lines.
    faults = AgentCoreFaults(drop_after=1, times=None)
    with caplog.at_level(logging.DEBUG), AgentCoreEmulator([say("x")], faults=faults) as emu:
        secret = emu.client_kwargs["aws_secret_access_key"]
        with make_provider(emu, aws_session_token=TOKEN) as provider:
            with pytest.raises(ml.TransportError) as dropped:
                await ml.run(provider, agent=ml.AgentSpec(name="secrets"), prompt="hi")
            reprs = [repr(provider.clients), repr(provider.clients.wire())]
    logs = "\n".join(f"{r.name} {r.getMessage()} {r.args!r}" for r in caplog.records)
    for text in (_everything(dropped.value), logs, "\n".join(reprs)):
        assert secret not in text
        assert TOKEN not in text
    assert "connection failed" in str(dropped.value)
    assert any("invoke retry" in r.getMessage() for r in caplog.records)  # the logs were seen
