"""A two-tool session on each host, for the bridge tests that judge its output."""

from __future__ import annotations

import anthropic
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import managedloop as ml
from host_models import model_for
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.testing import AgentCoreEmulator, ChatEmulator, ClaudeEmulator

from .otel_kit import Otel, traced_tools


def tree_for(host: str) -> list[str]:
    """The bridge's span tree of these sessions on ``host`` (its chat spans name the model
    that host serves; tests/telemetry/test_otel.py pins it per host)."""
    chat = f"  chat {model_for(host)}"
    return [
        "invoke_agent weather",
        chat,
        "  execute_tool get_weather",
        "    weather lookup",
        "  execute_tool get_time",
        "    time lookup",
        chat,
    ]


TREE = tree_for("claude")  # Claude's and Local's


@ml.tool
def broken(city: str) -> str:
    """Always fails."""
    raise ml.ToolError(f"no weather for {city}")


def provider_into(otel: Otel) -> TracerProvider:
    """Another tracer provider exporting into ``otel``'s exporter (a trace's context does
    not depend on which provider made a span)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(otel.exporter))
    return provider


def agent(otel: Otel, host: str = "claude") -> ml.AgentSpec:
    """The two-tool agent, with the model ``host`` serves."""
    return ml.AgentSpec(name="weather", tools=traced_tools(otel.tracer), model=model_for(host))


async def run_local(otel: Otel) -> ml.SessionResult:
    with ChatEmulator() as emu:
        provider = Local(model="claude-haiku-4-5", base_url=emu.base_url, api_key=emu.api_key)
        return await ml.run(provider, agent=agent(otel), prompt="x", max_concurrent_tools=1)


async def run_claude(otel: Otel) -> ml.SessionResult:
    """Provisioned first; the spans of the provisioning calls are cleared."""
    with ClaudeEmulator() as emu:
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
            spec = agent(otel)
            handle = await ml.provision(ClaudeManagedAgents(client=c), spec)
            otel.exporter.clear()
            hosted = ClaudeManagedAgents(client=c, agent=handle, environment=handle)
            return await ml.run(hosted, agent=spec, prompt="x", max_concurrent_tools=1)


async def run_agentcore(otel: Otel) -> ml.SessionResult:
    """Needs ``AWS_EC2_METADATA_DISABLED=true`` (botocore looks for credentials)."""
    with (
        AgentCoreEmulator() as emu,
        BedrockAgentCore(
            harness_arn=emu.harness_arn, retry_backoff=0.0, **emu.client_kwargs
        ) as hosted,
    ):
        spec = agent(otel, "agentcore")
        return await ml.run(hosted, agent=spec, prompt="x", max_concurrent_tools=1)
