"""The data plane's async transport: botocore prepares, signs and decodes; aiohttp carries.

These pin what the transport borrows from botocore (and fail loudly if botocore moves it),
that a caller's own client keeps working for the caller, that no worker thread is used per
turn, and that expiring credentials are refreshed off the event loop.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import managedloop as ml
from managedloop.providers.agentcore import BedrockAgentCore, new_runtime_session_id
from managedloop.providers.agentcore._botocore import client_internals
from managedloop.providers.agentcore._decoding import EventDecoder
from managedloop.providers.agentcore._signing import prepare_request, refresh_credentials
from managedloop.testing import AgentCoreEmulator, call, say

from .conftest import make_provider

pytestmark = pytest.mark.anyio


@ml.tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"found {city}"


AGENT = ml.AgentSpec(name="lookup", tools=[lookup])


def _client(emu: AgentCoreEmulator, **kwargs: Any) -> Any:
    import botocore.session

    return botocore.session.get_session().create_client(
        "bedrock-agentcore", **{**emu.client_kwargs, **kwargs}
    )


def test_botocore_private_attributes_we_read_still_exist(emu: AgentCoreEmulator) -> None:
    # client_internals() is the one place reading botocore internals; if this fails, a
    # botocore upgrade moved them: fix client_internals, do not weaken this test.
    client = _client(emu, verify=False)
    try:
        assert client._request_signer._credentials.access_key == emu.access_key_id
        assert client._endpoint.http_session._verify is False
        credentials, verify = client_internals(client)
        assert credentials is client._request_signer._credentials
        assert verify is False
    finally:
        client.close()


def test_prepare_request_is_botocores_signed_request(emu: AgentCoreEmulator) -> None:
    client = _client(emu)
    try:
        from managedloop.providers.agentcore._signing import install_capture

        install_capture(client)
        request = prepare_request(
            client,
            "invoke_harness",
            {
                "harnessArn": emu.harness_arn,
                "runtimeSessionId": new_runtime_session_id(),
                "messages": [{"role": "user", "content": [{"text": "hi"}]}],
            },
        )
        assert request.method == "POST"
        assert request.url.startswith(emu.endpoint_url + "/harnesses/invoke?harnessArn=")
        auth = request.headers["Authorization"]
        assert (auth.decode() if isinstance(auth, bytes) else auth).startswith("AWS4-HMAC-SHA256")
        assert emu.requests == []  # prepared, never sent by botocore
    finally:
        client.close()


def test_botocore_param_validation_still_applies(emu: AgentCoreEmulator) -> None:
    client = _client(emu)
    try:
        from botocore.exceptions import ParamValidationError

        from managedloop.providers.agentcore._signing import install_capture

        install_capture(client)
        with pytest.raises(ParamValidationError):
            prepare_request(client, "invoke_harness", {"harnessArn": emu.harness_arn})
    finally:
        client.close()


async def test_a_callers_client_still_sends_its_own_calls(emu: AgentCoreEmulator) -> None:
    client = _client(emu)
    emu.agent.script = [call("lookup", {"city": "X"}), say("ok"), say("direct")]
    try:
        with BedrockAgentCore(harness_arn=emu.harness_arn, client=client) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="x")
        assert result.text == "ok"
        # The provider's before-send hook is inert for the caller's own calls.
        response = client.invoke_harness(
            harnessArn=emu.harness_arn,
            runtimeSessionId=new_runtime_session_id(),
            messages=[{"role": "user", "content": [{"text": "hi"}]}],
        )
        events = list(response["stream"])
        assert any("messageStop" in e for e in events)
    finally:
        client.close()
    assert len(emu.operations("InvokeHarness")) == 3


async def test_turns_run_on_the_event_loop_thread(emu: AgentCoreEmulator) -> None:
    emu.agent.script = [call("lookup", {"city": "X"}), say("ok")]
    before = {t.ident for t in threading.enumerate()}
    with make_provider(emu, harness_tools=[]) as provider:
        result = await ml.run(provider, agent=AGENT, prompt="x")
    assert result.text == "ok"
    started = [t for t in threading.enumerate() if t.ident not in before]
    assert not [t for t in started if t.name.startswith("managedloop-agentcore")]


async def test_expiring_credentials_are_refreshed_off_the_loop() -> None:
    seen: list[threading.Thread] = []

    class Expiring:
        def refresh_needed(self) -> bool:
            return True

        def get_frozen_credentials(self) -> None:
            seen.append(threading.current_thread())

    await refresh_credentials(Expiring())
    assert seen
    assert seen[0] is not threading.current_thread()
    await refresh_credentials(object())  # static credentials: nothing to refresh


def test_the_decoder_keeps_events_before_an_exception_frame() -> None:
    import botocore.session
    from botocore.exceptions import EventStreamError

    from managedloop.testing._agentcore import eventstream as es

    model = botocore.session.get_session().get_service_model("bedrock-agentcore")
    decoder = EventDecoder(model.operation_model("InvokeHarness"))
    data = es.event_frame("messageStart", {"role": "assistant"}) + es.exception_frame(
        "runtimeClientError", "boom"
    )
    events = decoder.feed(data)
    assert next(events) == {"messageStart": {"role": "assistant"}}
    with pytest.raises(EventStreamError):
        next(events)


async def test_async_with_keeps_one_http_session_across_runs(emu: AgentCoreEmulator) -> None:
    emu.agent.script = [say("a"), say("b")]
    async with make_provider(emu, harness_tools=[]) as provider:
        await ml.run(provider, agent=ml.AgentSpec(), prompt="x")
        session = provider.clients.http.session()
        await ml.run(provider, agent=ml.AgentSpec(), prompt="y")
        assert provider.clients.http.session() is session
    assert session.closed
