"""The emulators behave like the hosts for the lifecycle (issue 10 item 7), and every new
response passes the SDK's strict validation.

* ClaudeEmulator: a duplicate live agent or environment name is a 409 with the API's error
  envelope (``invalid_request_error``), per account (credential); an archived name is free
  again; ``include_archived`` lists every record, paginated, through a strict client;
  archive answers the record with ``archived_at`` set.
* AgentCoreEmulator: a duplicate live harness name is a 409 ``ConflictException``; a
  DELETING one is not live; ListHarnesses pages with ``nextToken``.

No §9 line maps here directly (the reference used stubs); these pin the emulator facts
the lifecycle tests rely on.
"""

from __future__ import annotations

import anthropic
import pytest
from anthropic.types import ErrorResponse

import managedloop as ml
from managedloop.providers.agentcore import BedrockAgentCore
from managedloop.testing import AgentCoreEmulator, ClaudeEmulator

pytestmark = pytest.mark.anyio


async def test_claude_409_on_a_duplicate_live_name_strictly_shaped(emu: ClaudeEmulator) -> None:
    async with anthropic.AsyncAnthropic(
        base_url=emu.base_url,
        api_key=emu.api_key,
        max_retries=0,
        _strict_response_validation=True,
    ) as strict:
        agents, envs = strict.beta.agents, strict.beta.environments
        first = await agents.create(name="dup", model="claude-sonnet-4-6")
        with pytest.raises(anthropic.ConflictError) as agent_409:
            await agents.create(name="dup", model="claude-sonnet-4-6")
        env = await envs.create(name="dup_env")
        with pytest.raises(anthropic.ConflictError) as env_409:
            await envs.create(name="dup_env")
        for exc in (agent_409.value, env_409.value):
            body = ErrorResponse.model_validate(exc.body)
            assert body.error.type == "invalid_request_error"
        archived = await agents.archive(first.id)
        assert archived.archived_at is not None
        again = await agents.create(name="dup", model="claude-sonnet-4-6")  # name free again
        for i in range(5):
            await agents.create(name=f"other{i}", model="claude-sonnet-4-6")
        live = [a.id async for a in agents.list(limit=2)]
        everything = [a.id async for a in agents.list(limit=2, include_archived=True)]
        assert first.id not in live
        assert again.id in live
        assert len(everything) == len(live) + 1
        assert first.id in everything
        assert (await envs.archive(env.id)).archived_at is not None
        assert [e.id async for e in envs.list(include_archived=True, limit=1)] == [env.id]
        # Another credential is another account: its namespace is its own.
        emu.bearer_tokens.add("tok-b")
        async with strict.copy(api_key="tok-b") as other:
            made = await other.beta.agents.create(name="other0", model="claude-haiku-4-5")
            assert made.name == "other0"
            assert [a.name async for a in other.beta.agents.list()] == ["other0"]


async def test_agentcore_409_and_paging(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with (
        AgentCoreEmulator() as emu,
        BedrockAgentCore(**emu.client_kwargs, retry_backoff=0.0) as provider,  # type: ignore[arg-type]
    ):
        role = emu.execution_role_arn
        await provider.control_call("create_harness", harnessName="dup", executionRoleArn=role)
        with pytest.raises(ml.APIStatusError) as info:
            await provider.control_call("create_harness", harnessName="dup", executionRoleArn=role)
        assert info.value.status == 409
        for i in range(3):
            await provider.control_call(
                "create_harness", harnessName=f"h{i}", executionRoleArn=role
            )
        page = await provider.control_call("list_harnesses", maxResults=2)
        assert len(page["harnesses"]) == 2
        assert page["nextToken"]
        rest = await provider.control_call("list_harnesses", maxResults=100, nextToken="2")
        names = {h["harnessName"] for h in page["harnesses"] + rest["harnesses"]}
        assert {"dup", "h0", "h1", "h2"} <= names
