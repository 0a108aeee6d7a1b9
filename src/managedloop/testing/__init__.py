"""The public test kit: a scripted model and loopback emulators of every host.

The emulators are real servers on ``127.0.0.1`` (a free port) speaking each host's wire
protocol, so the production clients (the ``anthropic`` SDK, botocore, our HTTP client) are
what gets tested. Each is a context manager usable from sync and async code (``async with``
starts and stops it without blocking the running loop); a start that fails raises
:class:`EmulatorStartError` (``code``: ``port_in_use``, ``emulator_start_timeout`` or
``emulator_start_failed``). Names load on first use, so importing this package costs
nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

from managedloop.testing.script import (
    Fail,
    Grade,
    ModelRequest,
    Reply,
    ScriptedAgent,
    ScriptExhaustedError,
    Step,
    ToolCall,
    call,
    calls,
    example_args,
    say,
)

_WHERE: dict[str, str] = {
    # Local: Chat Completions
    "ScriptedChatModel": "managedloop.testing.chat",
    "ChatEmulator": "managedloop.testing.chat",
    "ChatFaults": "managedloop.testing.chat",
    "MockTransport": "managedloop.testing.transport",
    "MockResponse": "managedloop.testing.transport",
    # Claude Managed Agents
    "ClaudeEmulator": "managedloop.testing.claude",
    "ClaudeFaults": "managedloop.testing.claude",
    # Bedrock AgentCore
    "AgentCoreEmulator": "managedloop.testing.agentcore",
    "AgentCoreFaults": "managedloop.testing.agentcore",
    # Every emulator
    "EmulatorStartError": "managedloop.testing._loopback",
}

__all__ = [
    "AgentCoreEmulator",
    "AgentCoreFaults",
    "ChatEmulator",
    "ChatFaults",
    "ClaudeEmulator",
    "ClaudeFaults",
    "EmulatorStartError",
    "Fail",
    "Grade",
    "MockResponse",
    "MockTransport",
    "ModelRequest",
    "Reply",
    "ScriptExhaustedError",
    "ScriptedAgent",
    "ScriptedChatModel",
    "Step",
    "ToolCall",
    "call",
    "calls",
    "example_args",
    "say",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'managedloop.testing' has no attribute {name!r}")
