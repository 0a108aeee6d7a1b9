"""Refuse or honour, never drop: every AgentSpec and EnvironmentSpec field on every host.

The field lists come from ``dataclasses.fields``, so a field added to either spec fails
here until it is classified for each host below. For each (host, field) the spec sets
that one field to a sample carrying a marker, and the host must either

* ``wire``: send it (the marker is in a request the host's emulator received), or
* ``refused``: raise ``InvalidOptionsError`` before any request was sent, or
* ``loop`` / ``label``: the two documented exemptions, where the field is the library's
  own vocabulary (``terminal_tool``: the session loop ends on it; Claude's ``runtimes``:
  the environment handle's bootstrap installs them) or a label of a resource a *run* does
  not create (``name``, ``description``, ``metadata`` on Local and on a run against an
  existing harness). Those must be accepted (no error) - and nothing else may be.

Hosts: ``agentcore`` (provision: the CreateHarness body), ``agentcore-run`` (a spec run
against an existing harness: each InvokeHarness), ``claude`` (provision: the create-agent
and create-environment bodies) and ``local`` (a run: the chat request).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import anthropic
import pytest

import managedloop as ml
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.providers.agentcore import remote_mcp
from managedloop.providers.claude import agent_toolset
from managedloop.providers.local import ChatRequest, ChatResponse
from managedloop.testing import AgentCoreEmulator, ClaudeEmulator, say

pytestmark = pytest.mark.anyio

TOOL = ml.ToolDefinition(
    name="mark_tool", description="d", input_schema={"type": "object", "properties": {}}
)

# (field, host) -> (sample value, marker looked for in the requests)
AGENT_SAMPLES: dict[str, Any] = {
    "name": ("walk_name", "walk_name"),
    "system_prompt": ("mark_system_prompt", "mark_system_prompt"),
    "tools": ([TOOL], "mark_tool"),
    "model": ("us.mark-model-v1:0", "us.mark-model-v1:0"),
    "terminal_tool": ("mark_tool", None),
    "description": ("mark description", "mark description"),
    "metadata": ({"mark_key": "mark_value"}, "mark_value"),
    "timeout_seconds": (4321, '"timeoutSeconds": 4321'),
}
PER_HOST_SAMPLES: dict[tuple[str, str], Any] = {
    ("model", "claude"): ("claude-sonnet-4-6", "claude-sonnet-4-6"),
    ("model_config", "agentcore"): (
        {"bedrockModelConfig": {"modelId": "us.mark-mc"}},
        "us.mark-mc",
    ),
    ("model_config", "agentcore-run"): (
        {"bedrockModelConfig": {"modelId": "us.mark-mc"}},
        "us.mark-mc",
    ),
    ("model_config", "claude"): ({"inference_geo": "mark-mc-geo"}, "mark-mc-geo"),
    ("model_config", "local"): ({"user": "mark_mc_user"}, "mark_mc_user"),
    ("host_tools", "agentcore"): (
        [remote_mcp("mark_mcp", "https://mcp.example.com/mcp")],
        "mark_mcp",
    ),
    ("host_tools", "agentcore-run"): (
        [remote_mcp("mark_mcp", "https://mcp.example.com/mcp")],
        "mark_mcp",
    ),
    ("host_tools", "claude"): ([agent_toolset("always_allow")], "always_allow"),
    ("host_tools", "local"): ([agent_toolset("always_allow")], None),
    ("effort", "claude"): ("xhigh", '"effort": "xhigh"'),
    ("execution_identity", "claude"): (
        {"type": "aws_role", "role_arn": "arn:aws:iam::123456789012:role/markrole"},
        "markrole",
    ),
    ("skills", "claude"): ([{"type": "custom", "skill_id": "mark_skill"}], "mark_skill"),
    ("speed", "claude"): ("fast", '"speed": "fast"'),
    ("inference_geo", "claude"): ("mark-geo", "mark-geo"),
    ("harness_config", "agentcore"): ({"maxIterations": 4322}, '"maxIterations": 4322'),
    ("harness_config", "agentcore-run"): ({"maxIterations": 4322}, '"maxIterations": 4322'),
}
DEFAULT_SAMPLES: dict[str, Any] = {
    "model_config": ({"user": "x"}, None),
    "host_tools": ([remote_mcp("m", "https://mcp.example.com/mcp")], None),
    "effort": ("high", None),
    "execution_identity": ({"type": "service_account"}, None),
    "harness_config": ({"maxIterations": 3}, None),
    "mcp_servers": ({"m": "https://mcp.example.com/mcp"}, None),
    "skills": ([{"type": "anthropic", "skill_id": "xlsx"}], None),
    "speed": ("fast", None),
    "inference_geo": ("us", None),
}

ENV_SAMPLES: dict[str, Any] = {
    "name": ("mark_env", "mark_env"),
    "config": (
        {"agentCoreRuntimeEnvironment": {"lifecycleConfiguration": {"maxLifetime": 4323}}},
        "4323",
    ),
    "runtimes": ([{"lang": "python", "version": "3.12.7"}], None),
    "variables": ({"MARK_VAR": "mark_var_value"}, "mark_var_value"),
    "filesystems": ([{"sessionStorage": {"mountPath": "/mnt/markfs"}}], "/mnt/markfs"),
    "description": ("mark env description", "mark env description"),
    "metadata": ({"mark_env_key": "mark_env_value"}, "mark_env_value"),
}
CLAUDE_ENV_SAMPLES: dict[str, Any] = {
    "config": ({"type": "cloud", "packages": {"pip": ["mark_pkg"]}}, "mark_pkg"),
}

W, R, LOOP, LABEL = "wire", "refused", "loop", "label"
# What every host does with these: the prompt, tools and model reach each one.
EVERY_HOST: dict[str, str] = {
    "system_prompt": W,
    "tools": W,
    "model": W,
    "model_config": W,
    "terminal_tool": LOOP,
}
AGENTCORE_AGENT: dict[str, str] = {
    **EVERY_HOST,
    "name": W,
    "description": R,
    "metadata": W,
    "host_tools": W,
    "effort": R,
    "execution_identity": R,
    "timeout_seconds": W,
    "harness_config": W,
    "mcp_servers": R,
    "skills": R,
    "speed": R,
    "inference_geo": R,
}
AGENT_TABLE: dict[str, dict[str, str]] = {
    "agentcore": AGENTCORE_AGENT,
    # A run against an existing harness: as provisioning, but the labels of the harness
    # (which the run does not create) are accepted and not sent.
    "agentcore-run": {**AGENTCORE_AGENT, "name": LABEL, "description": LABEL, "metadata": LABEL},
    "claude": {
        **EVERY_HOST,
        "name": W,
        "description": W,
        "metadata": W,
        "host_tools": W,
        "effort": W,
        "execution_identity": W,
        "timeout_seconds": R,
        "harness_config": R,
        # Alone, a server no mcp_toolset uses is refused (the host refuses it too); with
        # its toolset it is sent (tests/claude/test_sessions.py).
        "mcp_servers": R,
        "skills": W,
        "speed": W,
        "inference_geo": W,
    },
    "local": {
        **EVERY_HOST,
        "name": LABEL,
        "description": LABEL,
        "metadata": LABEL,
        "host_tools": R,
        "effort": R,
        "execution_identity": R,
        "timeout_seconds": R,
        "harness_config": R,
        "mcp_servers": R,
        "skills": R,
        "speed": R,
        "inference_geo": R,
    },
}
ENV_TABLE: dict[str, dict[str, str]] = {
    "agentcore": {
        "name": W,
        "config": W,
        "runtimes": R,
        "variables": W,
        "filesystems": W,
        "description": R,
        "metadata": W,
    },
    # A run takes no environment at all on these hosts: environment= is refused whole.
    "agentcore-run": dict.fromkeys(
        ("name", "config", "runtimes", "variables", "filesystems", "description", "metadata"), R
    ),
    "local": dict.fromkeys(
        ("name", "config", "runtimes", "variables", "filesystems", "description", "metadata"), R
    ),
    "claude": {
        "name": W,
        "config": W,
        "runtimes": LOOP,
        "variables": R,
        "filesystems": R,
        "description": W,
        "metadata": W,
    },
}
HOSTS = ("agentcore", "agentcore-run", "claude", "local")


def agent_sample(field: str, host: str) -> tuple[Any, str | None]:
    if (field, host) in PER_HOST_SAMPLES:
        return PER_HOST_SAMPLES[field, host]
    if field in AGENT_SAMPLES:
        return AGENT_SAMPLES[field]
    return DEFAULT_SAMPLES[field]


def env_sample(field: str, host: str) -> tuple[Any, str | None]:
    if host == "claude" and field in CLAUDE_ENV_SAMPLES:
        return CLAUDE_ENV_SAMPLES[field]
    return ENV_SAMPLES[field]


def test_every_field_is_classified_for_every_host() -> None:
    agent_fields = {f.name for f in dataclasses.fields(ml.AgentSpec)}
    env_fields = {f.name for f in dataclasses.fields(ml.EnvironmentSpec)}
    for host in HOSTS:
        assert set(AGENT_TABLE[host]) == agent_fields, f"classify AgentSpec fields for {host}"
        assert set(ENV_TABLE[host]) == env_fields, f"classify EnvironmentSpec fields for {host}"


async def _agentcore(spec: ml.AgentSpec, env: Any, sent: list[str], *, run: bool) -> None:
    with AgentCoreEmulator([say("ok")]) as emu:
        provider = BedrockAgentCore(harness_arn=emu.harness_arn, **emu.client_kwargs)
        try:
            if run:
                await ml.run(provider, agent=spec, prompt="go", environment=env)
            else:
                await provider.provision(
                    spec, environment=env, execution_role_arn=emu.execution_role_arn, timeout=5
                )
        finally:
            sent += [json.dumps(r.body) + json.dumps(r.headers) for r in emu.requests]


async def _claude(spec: ml.AgentSpec, env: Any, sent: list[str]) -> None:
    with ClaudeEmulator() as emu:
        client = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key)
        try:
            await ClaudeManagedAgents(client=client).provision(spec, environment=env)
        finally:
            sent += [json.dumps(r.json) for r in emu.requests if r.method != "GET"]
            await client.close()


async def _local(spec: ml.AgentSpec, env: Any, sent: list[str]) -> None:
    async def chat(request: ChatRequest) -> ChatResponse:
        sent.append(
            json.dumps(
                {
                    "model": request.model,
                    "messages": list(request.messages),
                    "tools": list(request.tools),
                    "options": dict(request.options),
                },
                default=str,
            )
        )
        return ChatResponse(message={"role": "assistant", "content": "ok"}, finish_reason="stop")

    provider = Local(model=None if spec.model else "m", chat=chat)
    await ml.run(provider, agent=spec, prompt="go", environment=env)


def _runner(host: str) -> Callable[[ml.AgentSpec, Any, list[str]], Any]:
    if host == "agentcore":
        return lambda spec, env, sent: _agentcore(spec, env, sent, run=False)
    if host == "agentcore-run":
        return lambda spec, env, sent: _agentcore(spec, env, sent, run=True)
    return _claude if host == "claude" else _local


async def _check(host: str, kind: str, field: str, expected: str, spec: Any, env: Any) -> None:
    marker = (agent_sample if kind == "agent" else env_sample)(field, host)[1]
    sent: list[str] = []
    if expected == R:
        with pytest.raises(ml.InvalidOptionsError) as refused:
            await _runner(host)(spec, env, sent)
        assert refused.value.context.get("option"), refused.value
        assert sent == [], f"{host} refused {field} only after sending {len(sent)} request(s)"
        return
    await _runner(host)(spec, env, sent)
    assert expected != R, f"{host} accepted {kind} field {field}, which it should refuse"
    if expected == W:
        assert marker is not None
        found = any(marker in body for body in sent)
        assert found, f"{host} dropped {kind} field {field} (no {marker!r} in its requests)"


BASE_ENV: dict[str, Any] = {
    "agentcore": None,
    "agentcore-run": None,
    "claude": None,
    "local": None,
}


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ml.AgentSpec)])
async def test_agent_spec_field_is_honoured_or_refused(host: str, field: str) -> None:
    value, _ = agent_sample(field, host)
    fields: dict[str, Any] = {"name": "walk", field: value}
    if field == "terminal_tool":
        fields["tools"] = [TOOL]
    spec = ml.AgentSpec(**fields)
    await _check(host, "agent", field, AGENT_TABLE[host][field], spec, BASE_ENV[host])


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ml.EnvironmentSpec)])
async def test_environment_spec_field_is_honoured_or_refused(host: str, field: str) -> None:
    value, _ = env_sample(field, host)
    env = ml.EnvironmentSpec(**{field: value})
    spec = ml.AgentSpec(name="walk")
    await _check(host, "environment", field, ENV_TABLE[host][field], spec, env)


async def test_a_refusal_sends_nothing() -> None:
    """Refused means refused before any request: the emulator saw none."""
    with AgentCoreEmulator() as emu:
        provider = BedrockAgentCore(harness_arn=emu.harness_arn, **emu.client_kwargs)
        for spec in (
            ml.AgentSpec(name="w", effort="high"),
            ml.AgentSpec(name="w", description="d"),
            ml.AgentSpec(name="w", host_tools=[agent_toolset()]),
            ml.AgentSpec(name="w", harness_config={"nope": 1}),
            ml.AgentSpec(name="w", harness_config={"maxIterations": "ten"}),
        ):
            with pytest.raises(ml.InvalidOptionsError) as provisioned:
                await provider.provision(spec, execution_role_arn=emu.execution_role_arn)
            assert provisioned.value.context.get("host") == "agentcore"
        with pytest.raises(ml.InvalidOptionsError) as ran:
            await ml.run(provider, agent=ml.AgentSpec(harness_config={"hooks": []}), prompt="go")
        assert ran.value.code == "unsupported_spec_field"
        for spec in (  # on a run, too, before GetHarness is read for the merge
            ml.AgentSpec(tools=[TOOL], harness_config={"maxIterations": "ten"}),
            ml.AgentSpec(
                tools=[TOOL],
                host_tools=[{"type": "remote_mcp", "name": "x", "config": {"remoteMcp": {}}}],
            ),
        ):
            with pytest.raises(ml.InvalidOptionsError) as shaped:
                await ml.run(provider, agent=spec, prompt="go")
            assert shaped.value.code == "invalid_harness_config"
        assert emu.requests == []


@pytest.mark.parametrize(
    "config",
    [{"temperature": 0.2}, {"mark_option": 1}, {"speed": "fast", "top_p": 0.5}],
)
async def test_claude_refuses_model_config_keys_its_model_has_not(config: Any) -> None:
    sent: list[str] = []
    with pytest.raises(ml.InvalidOptionsError) as refused:
        await _claude(ml.AgentSpec(name="w", model_config=config), None, sent)
    assert sent == []
    assert refused.value.code == "unsupported_spec_field"
    assert refused.value.context["host"] == "claude"
    assert refused.value.context["option"] == "model_config"
    assert refused.value.context["keys"] == sorted(k for k in config if k != "speed")


async def test_claude_takes_model_config_members_of_its_model_object() -> None:
    sent: list[str] = []
    spec = ml.AgentSpec(
        name="w",
        model_config={"model": "claude-sonnet-4-6", "speed": "fast", "inference_geo": "us"},
        effort="high",
    )
    await _claude(spec, ml.EnvironmentSpec(metadata={"team": "mark-team"}), sent)
    agent = next(json.loads(b) for b in sent if '"model"' in b and '"tools"' in b)
    assert agent["model"] == {
        "id": "claude-sonnet-4-6",
        "speed": "fast",
        "inference_geo": "us",
        "effort": "high",
    }
    assert any('"metadata": {"team": "mark-team"}' in b for b in sent)
    with pytest.raises(ml.InvalidOptionsError) as clash:
        await _claude(
            ml.AgentSpec(name="w", speed="fast", model_config={"speed": "standard"}), None, []
        )
    assert clash.value.context["option"] == "model_config"


async def test_a_shape_refusal_names_the_path_never_the_value() -> None:
    """botocore's report quotes values; MCP headers and URLs can be secrets."""
    secret = "sk-live-" + "9" * 20
    tool = remote_mcp("docs", "https://mcp.example.com/mcp", headers={"Authorization": secret})
    tool["config"]["remoteMcp"]["headers"]["X-Count"] = 3  # a wrong type beside the secret
    tool["config"]["remoteMcp"]["url"] = 12345  # and one more
    with AgentCoreEmulator() as emu:
        provider = BedrockAgentCore(harness_arn=emu.harness_arn, **emu.client_kwargs)
        with pytest.raises(ml.InvalidOptionsError) as refused:
            await provider.provision(
                ml.AgentSpec(name="w", host_tools=[tool]),
                execution_role_arn=emu.execution_role_arn,
            )
        assert emu.requests == []
    text = str(refused.value) + repr(refused.value.context)
    assert refused.value.code == "invalid_harness_config"
    assert "tools[0].config.remoteMcp.url" in text
    assert "12345" not in text
    assert secret not in text
