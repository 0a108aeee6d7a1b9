"""One handler, one loop, every host, the same result shape.

The Python counterpart of the specification's ``examples/provider_agnostic.exs``: the same
agent and the same handler run on Local, Claude Managed Agents and Bedrock AgentCore; only
the provider changes, and each result has the same fields. Runs offline as written,
against each host's loopback emulator in ``managedloop.testing`` (the real ``anthropic``
SDK and real botocore over 127.0.0.1); ``REAL SERVICE`` lines say what changes.

    python examples/one_handler_every_host.py

Needs the extras ``managedloop[claude,agentcore]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import managedloop as ml
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.testing import AgentCoreEmulator, ChatEmulator, ClaudeEmulator, call, say

# The agent declares the tool (name, description, schema) but holds no implementation:
# the handler below serves every call, on every host.
LOOKUP = ml.ToolDefinition(
    name="lookup_customer",
    description="Look a customer up by email address.",
    input_schema={
        "type": "object",
        "properties": {"email": {"type": "string"}},
        "required": ["email"],
    },
)
AGENT = ml.AgentSpec(name="support", system_prompt="Use the tools.", tools=[LOOKUP])
PROMPT = "What plan is ada@example.com on?"


class SupportHandler:
    """Any object with ``handle_tool_call`` is a handler; ``handle_event`` is optional."""

    def __init__(self) -> None:
        self.events: dict[str, int] = {}

    def handle_tool_call(self, name: str, input: dict[str, Any], info: ml.SessionInfo) -> str:
        if name != "lookup_customer":
            raise ml.ToolError(f"unknown tool {name}")
        return f"Customer {input['email']}: Pro plan (served for {info.provider})."

    def handle_event(self, event: dict[str, Any], info: ml.SessionInfo) -> None:
        # Raw events as they stream: count them per host (their shapes differ by host;
        # the result below does not).
        self.events[info.provider or "?"] = self.events.get(info.provider or "?", 0) + 1


def script() -> list[Any]:
    """What every emulator's model does: call the tool, then answer."""
    return [call("lookup_customer", {"email": "ada@example.com"}), say("Pro plan.")]


@contextmanager
def local() -> Iterator[Any]:
    with ChatEmulator(script()) as emu:
        # REAL SERVICE: any OpenAI-compatible endpoint: base_url=..., api_key=...
        yield Local(model="my-model", base_url=emu.base_url, api_key=emu.api_key)


@contextmanager
def claude() -> Iterator[Any]:
    with ClaudeEmulator(script()) as emu:
        # REAL SERVICE: ClaudeManagedAgents() (ANTHROPIC_API_KEY); the agent is
        # provisioned on first use as "support_<digest8>" (or pass agent=handle).
        yield ClaudeManagedAgents(
            api_key=emu.api_key, bearer_token_file=None, base_url=emu.base_url
        )


@contextmanager
def agentcore() -> Iterator[Any]:
    # REAL SERVICE: BedrockAgentCore(harness_arn=...) with the AWS credential chain.
    with (
        AgentCoreEmulator(script()) as emu,
        BedrockAgentCore(harness_arn=emu.harness_arn, **emu.client_kwargs) as provider,
    ):
        yield provider


HOSTS: dict[str, Callable[[], Any]] = {"local": local, "claude": claude, "agentcore": agentcore}


def main() -> None:
    handler = SupportHandler()
    results: dict[str, ml.SessionResult] = {}
    for name, host in HOSTS.items():
        with host() as provider:
            results[name] = ml.run_sync(provider, agent=AGENT, prompt=PROMPT, handler=handler)

    for name, result in results.items():
        uses = [(u.name, u.input["email"]) for u in result.custom_tool_uses]
        print(
            f"{name:<10} terminal={result.terminal} turns={result.turns} "
            f"text={result.text!r} tools={uses} raw_stop_reason={result.stop_reason!r}"
        )
    # The uniform fields agree on every host; the raw ones keep each host's own shape.
    assert {r.terminal for r in results.values()} == {ml.Terminal.END_TURN}
    assert {r.text for r in results.values()} == {"Pro plan."}
    print("events seen by handle_event:", sorted(handler.events))


if __name__ == "__main__":
    main()
