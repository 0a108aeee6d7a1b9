"""Credentials are scrubbed from error text *and* context, on every path (issue 7).

AWS answers a signature mismatch with a 403 whose message echoes the canonical request,
signed headers included, so ``x-amz-security-token:<token>`` arrived in the
``AuthenticationError``'s str, repr, traceback (through the chained botocore error) and
``context['body']``. The emulator answers the same way (its SigV4 check uses AWS's own
wording), so these tests drive the real paths: the data plane (aiohttp + botocore's
parser), the control plane (botocore in a thread), and the text forms a credential can
take (header, query string, JSON, Authorization signature, the literal secret key).
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

import pytest

import managedloop as ml
from managedloop.providers import BedrockAgentCore
from managedloop.providers.agentcore._redact import redact
from managedloop.testing import AgentCoreEmulator

pytestmark = pytest.mark.anyio

# Shaped like a real STS session token: base64 with '+', '/' and '=' padding.
TOKEN = (
    "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQDk3m5Q+eXAMPLE/tokenAbc"
    "dEfGhIjKlMnOpQrStUvWxYz0123456789+/AbCdEfGhIjKlMnOpQrStUvWxYz0123456789aBcD=="
)
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"


def _all_text(exc: BaseException) -> str:
    """Everything a caller could print: str, repr, the full traceback, and the context."""
    parts = [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
    parts.append(repr(getattr(exc, "context", {})))
    seen = exc.__cause__ or exc.__context__
    while seen is not None:
        parts += [str(seen), repr(seen), repr(getattr(seen, "response", ""))]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def _wrong_secret(emu: AgentCoreEmulator, **options: Any) -> BedrockAgentCore:
    kwargs = {**emu.client_kwargs, "aws_secret_access_key": SECRET}
    return BedrockAgentCore(
        harness_arn=emu.harness_arn, aws_session_token=TOKEN, retry_backoff=0, **kwargs, **options
    )


async def test_a_403_echoing_the_canonical_request_on_the_data_plane_is_scrubbed(
    emu: AgentCoreEmulator,
) -> None:
    with (
        _wrong_secret(emu, harness_tools=[]) as provider,
        pytest.raises(ml.AuthenticationError) as info,
    ):
        await ml.run(provider, agent=ml.AgentSpec(), prompt="hi")
    err = info.value
    assert err.status == 403
    body = err.context["body"]["message"]
    assert "Canonical String" in body  # the echo really came back (else this proves nothing)
    assert "x-amz-security-token:<redacted>" in body
    text = _all_text(err)
    assert TOKEN not in text
    assert TOKEN[:40] not in text  # not even a prefix survives
    assert SECRET not in text


async def test_a_403_echoing_the_canonical_request_on_the_control_plane_is_scrubbed(
    emu: AgentCoreEmulator,
) -> None:
    with _wrong_secret(emu) as provider:
        with pytest.raises(ml.AuthenticationError) as info:
            await provider.control_call("get_harness", harnessId=emu.harness_id)
        with pytest.raises(ml.ProviderError) as tools:  # the same 403 behind GetHarness
            await ml.run(provider, agent=ml.AgentSpec(tools=[_echo]), prompt="hi")
    err = info.value
    assert "Canonical String" in err.context["body"]["message"]
    for failure in (err, tools.value):
        text = _all_text(failure)
        assert TOKEN not in text
        assert SECRET not in text


async def test_a_403_during_provisioning_is_scrubbed(emu: AgentCoreEmulator) -> None:
    with _wrong_secret(emu) as provider, pytest.raises(ml.AuthenticationError) as info:
        await provider.provision(
            ml.AgentSpec(name="p"), execution_role_arn=emu.execution_role_arn, timeout=5
        )
    assert TOKEN not in _all_text(info.value)


@ml.tool
def _echo(text: str) -> str:
    """Echo."""
    return text


def test_every_credential_form_is_redacted() -> None:
    samples = {
        "canonical header": f"host:x\nx-amz-security-token:{TOKEN}\nx-amz-date:20260101T0Z",
        "header repr": f"{{'X-Amz-Security-Token': b'{TOKEN}'}}",
        "json": f'{{"X-Amz-Security-Token": "{TOKEN}"}}',
        "query": f"https://h/p?X-Amz-Security-Token={TOKEN}&X-Amz-Date=1",
        "escaped newline": f"'x-amz-security-token:{TOKEN}\\nhost:x'",
        "presigned signature": "https://h/p?X-Amz-Signature=" + "ab12" * 16 + "&x=1",
        "presigned credential": "https://h/p?X-Amz-Credential=AKIDEXAMPLE%2F20260101%2Fus&x=1",
        "authorization": "Authorization: AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/"
        "svc/aws4_request, SignedHeaders=host, Signature=" + "cd34" * 16,
        "assignment": f"aws_secret_access_key={SECRET} aws_session_token={TOKEN}",
        "literal": f"whatever the shape: {SECRET}",
    }
    for form, text in samples.items():
        masked = redact(text, secrets=[SECRET])
        assert TOKEN not in masked, form
        assert SECRET not in masked, form
        assert "ab12" * 16 not in masked, form
        assert "cd34" * 16 not in masked, form
        assert "AKIDEXAMPLE%2F20260101" not in masked, form
        assert "<redacted>" in masked, form
    assert redact("nothing secret here") == "nothing secret here"
    assert redact("short", secrets=["abc"]) == "short"  # tiny literals are not masked


def test_log_lines_are_redacted_whoever_writes_them(caplog: pytest.LogCaptureFixture) -> None:
    from managedloop.providers.agentcore._redact import install_redaction as _install_redaction

    _install_redaction()
    with caplog.at_level(logging.DEBUG, "botocore.endpoint"):
        logging.getLogger("botocore.endpoint").debug(
            "Sending http request: %s",
            f"<AWSPreparedRequest headers={{'X-Amz-Security-Token':"
            f" b'{TOKEN}', 'Authorization': b'AWS4-HMAC-SHA256 Credential=A/1/r/s/aws4_request,"
            f" SignedHeaders=host, Signature={'ef56' * 16}'}}>",
        )
    text = caplog.text
    assert "Sending http request" in text
    assert TOKEN not in text
    assert "ef56" * 16 not in text
