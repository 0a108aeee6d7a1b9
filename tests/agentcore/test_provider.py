"""BedrockAgentCore against the emulator, through real botocore (DESIGN.md's snippet).

§9 lines covered: agent_core/client_test (invoke POSTs /harnesses/invoke with harnessArn
and the session-id header; request telemetry operation/service/method/path/status;
invoke never retried by botocore, see test_faults); client_stream_test (on_event ==
``handle_event`` live, in order, before the turn ends; budgets serialize as
timeoutSeconds/maxIterations/maxTokens and are absent when unset); agent_core_test (one-tool
round trip with both roles on resume, plain end_turn, unknown stopReason -> terminated,
max_turns); bedrock_reattach_test (session_id -> resumed, runtime_session_id -> fresh);
bedrock_agent_core_test "open / threading" and "[branch] endpoint_name as qualifier".
Changed on purpose: opening with neither id mints a fresh valid one (the issue asks for a
minting helper) instead of raising; ids are validated at entry (``invalid_session_id``).
Not applicable: create_api_key_credential_provider (not part of issue 4).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import anyio
import pytest

import managedloop as ml
from emitted import emitted
from managedloop.providers import BedrockAgentCore
from managedloop.providers.agentcore import (
    AgentCoreHandle,
    new_runtime_session_id,
    validate_runtime_session_id,
)
from managedloop.testing import AgentCoreEmulator, Reply, ToolCall, call, say
from weather import get_weather

from .conftest import make_provider

pytestmark = pytest.mark.anyio


agent = ml.AgentSpec(name="weather", system_prompt="Use tools.", tools=[get_weather])


def test_design_snippet_run_sync() -> None:
    with AgentCoreEmulator() as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            runtime_session_id=new_runtime_session_id(),
            **emu.client_kwargs,
        )
        with provider:
            result = ml.run_sync(provider, agent=agent, prompt="Weather in Paris?")
    assert result.terminal is ml.Terminal.END_TURN
    assert result.stop_reason == "end_turn"
    assert result.custom_tool_uses == [
        ml.ToolUse(id=result.custom_tool_uses[0].id, name="get_weather", input={"city": "example"})
    ]
    assert result.text == "Done. Sunny in example"
    assert result.usage.input_tokens == 20
    assert result.usage.output_tokens == 10
    assert result.turns == 2
    assert result.transcript is None
    assert result.session_id == provider.runtime_session_id


async def test_run_async_with_tools_and_live_events(emu: AgentCoreEmulator) -> None:
    emu.agent.script = [
        call("get_weather", {"city": "Paris"}, text="Let me check."),
        say("It is sunny in Paris."),
    ]
    seen: list[Any] = []
    arrived: list[float] = []

    class Handler:
        def handle_tool_call(self, name: str, input: dict[str, Any], info: ml.SessionInfo) -> str:
            assert info.provider == "agentcore"
            assert info.session_id
            return get_weather(**input)

        def handle_event(self, event: Any, info: ml.SessionInfo) -> None:
            seen.append(event)
            arrived.append(anyio.current_time())

    with make_provider(emu) as provider:
        result = await ml.run(provider, agent=agent, prompt="Weather in Paris?", handler=Handler())
    assert result.text == "It is sunny in Paris."
    assert result.custom_tool_uses[0].input == {"city": "Paris"}
    raw = [e for e in seen if "type" not in e]
    assert raw == result.events  # every raw event reached the handler once, in order
    deltas = [e["text"] for e in seen if e.get("type") == "managedloop.text_delta"]
    assert "".join(deltas) == "Let me check.It is sunny in Paris."


async def test_resume_reinvokes_with_the_assistant_tool_use_and_user_tool_result(
    emu: AgentCoreEmulator,
) -> None:
    with make_provider(emu) as provider:
        await ml.run(provider, agent=agent, prompt="Weather?")
    invokes = emu.operations("InvokeHarness")
    assert len(invokes) == 2
    first, resume = invokes[0].body, invokes[1].body
    assert first["messages"] == [{"role": "user", "content": [{"text": "Weather?"}]}]
    assert [m["role"] for m in resume["messages"]] == ["assistant", "user"]
    (use,) = resume["messages"][0]["content"]
    (res,) = resume["messages"][1]["content"]
    assert use["toolUse"]["toolUseId"] == res["toolResult"]["toolUseId"]
    assert res["toolResult"]["status"] == "success"
    assert invokes[0].session_id == invokes[1].session_id


async def test_start_with_follow_ups(emu: AgentCoreEmulator) -> None:
    with make_provider(emu) as provider:
        async with ml.start(provider, agent=agent, prompt="Weather?") as session:
            first = await session.result()
            await session.send("hello")
            second = await session.result()
            await session.send("again")
            third = await session.result()
    assert first.text.startswith("Done.")
    assert first.turns == 2
    assert second.text == "You said: hello"
    assert second.turns == 1
    assert third.text == "You said: again"
    assert len({r.session_id for r in (first, second, third)}) == 1


async def test_resume_by_session_id(emu: AgentCoreEmulator) -> None:
    with make_provider(emu) as provider:
        first = await ml.run(provider, agent=agent, prompt="Weather?")
        assert first.session_id is not None
        again = await ml.run(provider, agent=agent, prompt="And Rome?", resume=first.session_id)
        by_result = await ml.run(provider, agent=agent, prompt="Thanks", resume=first)
    assert again.text == "You said: And Rome?"
    assert again.session_id == first.session_id
    assert by_result.session_id == first.session_id
    sids = {r.session_id for r in emu.operations("InvokeHarness")}
    assert sids == {first.session_id}
    # the emulator holds the conversation per session: the last turn saw all of it
    assert len(emu.agent.requests[-1].messages) == 8


async def test_each_run_without_a_pinned_id_mints_a_fresh_session(emu: AgentCoreEmulator) -> None:
    emu.agent.script = [say("a"), say("b")]
    with make_provider(emu) as provider:
        a = await ml.run(provider, agent=ml.AgentSpec(), prompt="x")
        b = await ml.run(provider, agent=ml.AgentSpec(), prompt="y")
    assert a.session_id != b.session_id
    assert a.session_id is not None
    validate_runtime_session_id(a.session_id)


async def test_a_provider_session_id_reattaches(emu: AgentCoreEmulator, sid: str) -> None:
    from managedloop.hosts import OpenRequest

    emu.agent.script = [say("hi")]
    with make_provider(emu, session_id=sid) as provider:
        conn = await provider.open(OpenRequest())
        assert conn.session_id == sid
        assert conn.resumed
        result = await ml.run(provider, agent=ml.AgentSpec(), prompt="x")
    assert result.session_id == sid


async def test_runtime_session_id_is_fresh_not_resumed(emu: AgentCoreEmulator, sid: str) -> None:
    from managedloop.hosts import OpenRequest

    with make_provider(emu, runtime_session_id=sid) as provider:
        conn = await provider.open(OpenRequest())
        assert (conn.session_id, conn.resumed) == (sid, False)
        resumed = await provider.open(OpenRequest(session_id=new_runtime_session_id()))
        assert resumed.resumed


async def test_request_carries_qualifier_budgets_model_and_system_prompt(
    emu: AgentCoreEmulator,
) -> None:
    emu.agent.script = [say("ok")]
    with make_provider(
        emu,
        endpoint_name="DEFAULT",
        timeout_seconds=120,
        max_iterations=5,
        max_tokens=1000,
        model="us.anthropic.claude-sonnet-4-6",
        actor_id="user-1",
    ) as provider:
        await ml.run(provider, agent=ml.AgentSpec(system_prompt="Be brief."), prompt="x")
    (req,) = emu.operations("InvokeHarness")
    assert req.query == {"harnessArn": emu.harness_arn, "qualifier": "DEFAULT"}
    assert req.body["timeoutSeconds"] == 120
    assert req.body["maxIterations"] == 5
    assert req.body["maxTokens"] == 1000
    assert req.body["model"] == {
        "bedrockModelConfig": {"modelId": "us.anthropic.claude-sonnet-4-6"}
    }
    assert req.body["systemPrompt"] == [{"text": "Be brief."}]
    assert req.body["actorId"] == "user-1"
    assert "tools" not in req.body  # no client tools: the harness's own tools stand
    assert emu.agent.requests[0].model == "us.anthropic.claude-sonnet-4-6"


async def test_budgets_and_qualifier_absent_when_not_given(emu: AgentCoreEmulator) -> None:
    emu.agent.script = [say("ok")]
    with make_provider(emu, endpoint_name=None) as provider:
        await ml.run(provider, agent=ml.AgentSpec(), prompt="x")
    (req,) = emu.operations("InvokeHarness")
    assert "qualifier" not in req.query
    for key in ("timeoutSeconds", "maxIterations", "maxTokens", "model", "systemPrompt"):
        assert key not in req.body


async def test_a_named_endpoint_rides_as_qualifier(emu: AgentCoreEmulator) -> None:
    emu.agent.script = [say("ok")]
    with make_provider(emu, endpoint_name="live") as provider:
        with pytest.raises(ml.APIStatusError) as info:  # no such endpoint yet: 404
            await ml.run(provider, agent=ml.AgentSpec(), prompt="x")
        assert info.value.status == 404
        await provider.control_call(
            "create_harness_endpoint", harnessId=emu.harness_id, endpointName="live"
        )
        await anyio.sleep(0.1)
        result = await ml.run(provider, agent=ml.AgentSpec(), prompt="x")
    assert result.text == "ok"
    assert emu.operations("InvokeHarness")[-1].query["qualifier"] == "live"


async def test_client_tools_are_merged_with_the_harness_tools(emu: AgentCoreEmulator) -> None:
    browser = {"type": "agentcore_browser", "name": "browser", "config": {"agentCoreBrowser": {}}}
    harness = emu.add_harness("with_tools", tools=[browser])
    with make_provider(emu, harness_arn=harness.arn) as provider:
        await ml.run(provider, agent=agent, prompt="x")
        await ml.run(provider, agent=agent, prompt="y")
    invoke = emu.operations("InvokeHarness")[0].body
    assert [t["name"] for t in invoke["tools"]] == ["browser", "get_weather"]
    assert invoke["tools"][1]["type"] == "inline_function"
    assert len(emu.operations("GetHarness")) == 1  # read once per harness


async def test_harness_tools_option_skips_get_harness(emu: AgentCoreEmulator) -> None:
    with make_provider(emu, harness_tools=[]) as provider:
        await ml.run(provider, agent=agent, prompt="x")
    assert emu.operations("GetHarness") == []
    assert [t["name"] for t in emu.operations("InvokeHarness")[0].body["tools"]] == ["get_weather"]


async def test_a_provisioned_handle_as_agent(emu: AgentCoreEmulator) -> None:
    handle = AgentCoreHandle(harness_arn=emu.harness_arn, harness_id=emu.harness_id)
    emu.agent.script = [say("hi")]
    with make_provider(emu, harness_arn=None) as provider:
        result = await ml.run(provider, agent=handle, prompt="x")
        with pytest.raises(ml.InvalidOptionsError) as info:
            await ml.run(provider, agent=ml.AgentSpec(), prompt="x")
    assert result.text == "hi"
    assert info.value.context["option"] == "harness_arn"
    assert AgentCoreHandle.from_dict(handle.to_dict()) == handle


async def test_tool_use_with_no_parsable_block_is_unresolved(emu: AgentCoreEmulator) -> None:
    emu.agent.script = [Reply(text="I will call a tool", stop_reason="tool_use")]
    with make_provider(emu) as provider:
        result = await ml.run(provider, agent=agent, prompt="x")
    assert result.terminal is ml.Terminal.TERMINATED
    assert result.reason == "unresolved_requires_action"
    assert result.stop_reason == "tool_use"
    assert len(emu.operations("InvokeHarness")) == 1  # an empty resume is never sent


async def test_unknown_stop_reason_terminates_with_the_raw_value(emu: AgentCoreEmulator) -> None:
    emu.agent.script = [say("blocked", stop_reason="content_blocked")]
    with make_provider(emu) as provider:
        result = await ml.run(provider, agent=ml.AgentSpec(), prompt="x")
    assert (result.terminal, result.stop_reason) == (ml.Terminal.TERMINATED, "content_blocked")


async def test_max_turns_stops_a_tool_loop(emu: AgentCoreEmulator) -> None:
    emu.agent.script = [call("get_weather", {"city": str(i)}) for i in range(5)]
    with make_provider(emu) as provider:
        result = await ml.run(provider, agent=agent, prompt="x", max_turns=3)
    assert (result.terminal, result.reason, result.turns) == (
        ml.Terminal.TERMINATED,
        "max_turns",
        3,
    )


async def test_two_tools_in_one_turn_with_a_reused_block_index(emu: AgentCoreEmulator) -> None:
    emu.agent.script = [
        Reply(
            tool_calls=[ToolCall(name="get_weather", input={"city": c}) for c in ("A", "B", "C")]
        ),
        say("done"),
    ]
    emu.faults.reuse_block_index = True
    with make_provider(emu) as provider:
        result = await ml.run(provider, agent=agent, prompt="x")
    assert [u.input["city"] for u in result.custom_tool_uses] == ["A", "B", "C"]
    resume = emu.operations("InvokeHarness")[1].body["messages"]
    ids = [b["toolUse"]["toolUseId"] for b in resume[0]["content"]]
    assert len(ids) == len(set(ids)) == 3
    assert [r.text for r in emu.agent.requests[1].tool_results] == [
        "Sunny in A",
        "Sunny in B",
        "Sunny in C",
    ]


async def test_tool_error_results_go_back_with_status_error(emu: AgentCoreEmulator) -> None:
    @ml.tool
    def broken() -> str:
        """Always fails."""
        raise ml.ToolError("nope")

    emu.agent.script = [call("broken"), say("sorry")]
    with make_provider(emu) as provider:
        await ml.run(provider, agent=ml.AgentSpec(tools=[broken]), prompt="x")
    result_block = emu.operations("InvokeHarness")[1].body["messages"][1]["content"][0]
    assert result_block["toolResult"]["status"] == "error"
    assert result_block["toolResult"]["content"] == [{"text": "nope"}]


async def test_outcomes_are_unsupported(emu: AgentCoreEmulator) -> None:
    with make_provider(emu) as provider, pytest.raises(ml.InvalidOptionsError) as info:
        await ml.run(provider, agent=agent, outcome={"description": "d", "rubric": "r"})
    assert info.value.code == "outcome_unsupported"


@pytest.mark.parametrize(
    "bad", ["short", "x" * 101, "-leading-dash-" + "a" * 30, "has space " + "a" * 30, 42, None]
)
def test_session_ids_are_validated_at_entry(bad: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        validate_runtime_session_id(bad)
    assert info.value.code == "invalid_session_id"
    if bad is not None:
        with pytest.raises(ml.InvalidOptionsError):
            BedrockAgentCore(
                harness_arn="arn:aws:bedrock-agentcore:us-east-1:1:harness/h-1",
                runtime_session_id=bad,
            )


async def test_resume_with_an_invalid_session_id_fails_before_any_request(
    emu: AgentCoreEmulator,
) -> None:
    with make_provider(emu) as provider, pytest.raises(ml.InvalidOptionsError) as info:
        await ml.run(provider, agent=agent, prompt="x", resume="too-short")
    assert info.value.code == "invalid_session_id"
    assert emu.requests == []


def test_minted_ids_are_valid_and_unique() -> None:
    ids = {new_runtime_session_id() for _ in range(100)}
    assert len(ids) == 100
    for value in ids:
        assert validate_runtime_session_id(value) == value
    assert new_runtime_session_id("demo").startswith("demo-")
    with pytest.raises(ml.InvalidOptionsError):
        new_runtime_session_id("bad prefix")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("endpoint_name", "1bad"),
        ("endpoint_name", "x" * 49),
        ("timeout_seconds", 0),
        ("max_iterations", -1),
        ("max_tokens", "10"),
        ("idle_timeout", 0),
        ("invoke_retries", -1),
        ("harness_arn", "not-an-arn"),
        ("model", 3),
    ],
)
def test_constructor_options_are_validated(option: str, value: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        BedrockAgentCore(**{option: value})
    assert info.value.context["option"] == option


def test_secrets_never_show(caplog: pytest.LogCaptureFixture) -> None:
    secret = "wJalrXUtnFEMI-very-secret-key"
    provider = BedrockAgentCore(
        harness_arn="arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/h-abc",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key=secret,
        aws_session_token="token-secret-value",
    )
    with provider:
        text = (
            repr(provider)
            + repr(provider.clients)
            + str(vars(provider))
            + str(vars(provider.clients))
        )
    assert secret not in text
    assert "token-secret-value" not in text


def test_credentials_resolve_from_configure_then_env(monkeypatch: pytest.MonkeyPatch) -> None:
    ml.configure(
        aws_access_key_id="AKIDCONF", aws_secret_access_key="conf-secret", aws_region="eu-west-1"
    )
    with BedrockAgentCore() as provider:
        assert provider.clients._credential_kwargs()["aws_access_key_id"] == "AKIDCONF"
        assert provider.clients.region_name == "eu-west-1"
    ml.configure()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    with BedrockAgentCore() as provider:
        assert provider.clients._credential_kwargs()["aws_access_key_id"] == "AKIDENV"
        assert provider.clients.region_name == "us-west-2"
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    with BedrockAgentCore() as provider:
        assert provider.clients._credential_kwargs() == {}  # botocore's own chain decides


async def test_no_credentials_anywhere_is_a_named_error(emu: AgentCoreEmulator) -> None:
    with (
        BedrockAgentCore(
            harness_arn=emu.harness_arn, endpoint_url=emu.endpoint_url, region_name="us-east-1"
        ) as provider,
        pytest.raises(ml.AuthenticationError) as info,
    ):
        await ml.run(provider, agent=ml.AgentSpec(), prompt="x")
    assert "credentials" in info.value.message


async def test_a_bad_signature_is_rejected_as_authentication_error(emu: AgentCoreEmulator) -> None:
    kwargs = {**emu.client_kwargs, "aws_secret_access_key": "wrong"}
    with (
        BedrockAgentCore(harness_arn=emu.harness_arn, **kwargs) as provider,
        pytest.raises(ml.AuthenticationError) as info,
    ):
        await ml.run(provider, agent=ml.AgentSpec(), prompt="x")
    assert info.value.status == 403
    assert emu.operations("Unauthenticated")


async def test_a_caller_built_client_and_a_boto_like_session(emu: AgentCoreEmulator) -> None:
    import botocore.session

    session = botocore.session.get_session()
    client = session.create_client("bedrock-agentcore", **emu.client_kwargs)
    emu.agent.script = [call("get_weather", {"city": "X"}), say("ok")]
    try:
        with BedrockAgentCore(harness_arn=emu.harness_arn, client=client) as provider:
            result = await ml.run(provider, agent=agent, prompt="x")  # GetHarness reuses its keys
    finally:
        client.close()
    assert result.text == "ok"


async def test_request_telemetry_has_operation_service_method_path_status(
    emu: AgentCoreEmulator,
) -> None:
    with emitted() as got, make_provider(emu) as provider:
        await ml.run(provider, agent=agent, prompt="x", telemetry_metadata={"team": "t"})
    stops = [m for n, _, m in got if n == "managedloop.agent_core.request.stop"]
    assert {m["operation"] for m in stops} == {"get_harness", "invoke_harness"}
    get = next(m for m in stops if m["operation"] == "get_harness")
    assert get == {
        "operation": "get_harness",
        "service": "bedrock-agentcore",
        "method": "get",
        "path": "/harnesses/{harnessId}",
        "status": 200,
        # the session's tags (issue 11): the caller's, then the library's host name
        "team": "t",
        "provider": "agentcore",
    }
    events = [m for n, _, m in got if n == "managedloop.stream.event"]
    assert events
    assert events[0]["type"] == "messageStart"
    assert events[0]["team"] == "t"


def test_import_managedloop_does_not_import_botocore() -> None:
    import subprocess
    import sys

    code = (
        "import sys, managedloop, managedloop.providers.agentcore, managedloop.testing; "
        "print('botocore' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_emulator_works_from_a_thread_while_the_loop_runs(emu: AgentCoreEmulator) -> None:
    emu.agent.script = [say("threaded")]
    box: list[ml.SessionResult] = []

    def worker() -> None:
        with make_provider(emu) as provider:
            box.append(ml.run_sync(provider, agent=ml.AgentSpec(), prompt="x"))

    t = threading.Thread(target=worker)
    t.start()
    t.join(30)
    assert box
    assert box[0].text == "threaded"
    logging.getLogger(__name__).debug("done")
