"""Shared setup of the self-hosted tests: a self_hosted environment on the emulator."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anthropic

import managedloop as ml
from managedloop.providers.claude import agent_toolset
from managedloop.testing import ClaudeEmulator
from managedloop.testing.script import Reply, ToolCall, say
from weather import get_weather

SPEC = ml.AgentSpec(
    name="sandboxed", system_prompt="Use tools.", tools=[get_weather], host_tools=[agent_toolset()]
)


def builtin(name: str, **input: Any) -> ToolCall:
    return ToolCall(name=name, input=input, server=True)


# Every built-in tool once, and a custom tool beside a built-in one in one turn.
SCRIPT = [
    Reply(
        tool_calls=[
            builtin("write", file_path="note.txt", content="hello sandbox\n"),
            ToolCall(name="get_weather", input={"city": "Paris"}),
        ]
    ),
    Reply(tool_calls=[builtin("edit", file_path="note.txt", old_string="hello", new_string="hi")]),
    Reply(tool_calls=[builtin("bash", command="cat note.txt && echo from-bash")]),
    Reply(tool_calls=[builtin("read", file_path="note.txt")]),
    Reply(tool_calls=[builtin("glob", pattern="*.txt")]),
    Reply(tool_calls=[builtin("grep", pattern="sandbox")]),
    say("done"),
]


def strict_client(emu: ClaudeEmulator, **kwargs: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=emu.base_url,
        api_key=emu.api_key,
        max_retries=0,
        _strict_response_validation=True,
        **kwargs,
    )


async def self_hosted_env(client: anthropic.AsyncAnthropic, emu: ClaudeEmulator) -> tuple[str, str]:
    env = await client.beta.environments.create(name="sandbox", config={"type": "self_hosted"})
    return env.id, emu.work.environment_key(env.id)


def sandbox_results(emu: ClaudeEmulator, session_id: str) -> dict[str, dict[str, Any]]:
    """Each ``user.tool_result`` in the history by tool-use id (the emulator's record)."""
    return {e["tool_use_id"]: e for e in emu.events(session_id) if e["type"] == "user.tool_result"}


def answers_per_use(emu: ClaudeEmulator, session_id: str) -> Counter[str]:
    """How many results (built-in and custom) were POSTed per tool-use id: every attempt,
    applied or refused, so a second answer of one use cannot hide behind a 400."""
    return Counter(
        e.get("tool_use_id") or e.get("custom_tool_use_id")
        for e in emu.sent_events(session_id, applied_only=False)
        if e["type"] in ("user.tool_result", "user.custom_tool_result")
    )


def tool_uses(emu: ClaudeEmulator, session_id: str) -> dict[str, dict[str, Any]]:
    return {
        e["id"]: e
        for e in emu.events(session_id)
        if e["type"] in ("agent.tool_use", "agent.custom_tool_use")
    }


def result_text(event: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in event.get("content") or [])
