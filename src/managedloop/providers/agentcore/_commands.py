"""Shell commands in a runtime session's microVM (``InvokeAgentRuntimeCommand``).

A command is one streamed data-plane call (:func:`._stream.stream_call`): stdout and
stderr arrive as ``contentDelta`` chunks, the exit code in ``contentStop``. A non-zero exit
is a result, not an error.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from managedloop import _validate
from managedloop.errors import InvalidOptionsError
from managedloop.providers.agentcore._clients import Clients, request_meta
from managedloop.providers.agentcore._ids import (
    harness_id_of,
    validate_endpoint_name,
    validate_runtime_session_id,
)
from managedloop.providers.agentcore._stream import stream_call
from managedloop.results import CommandResult

__all__ = ["DEFAULT_COMMAND_IDLE_TIMEOUT", "OutputCallback", "run_command"]

DEFAULT_COMMAND_IDLE_TIMEOUT = 300.0  # seconds; matches the service's default command timeout

OutputCallback = Callable[[str, str], Awaitable[None] | None]


async def run_command(
    clients: Clients,
    command: str,
    *,
    session_id: str,
    harness_arn: str | None,
    timeout: int | None = None,
    on_output: OutputCallback | None = None,
    idle_timeout: float = DEFAULT_COMMAND_IDLE_TIMEOUT,
    qualifier: str | None = None,
) -> CommandResult:
    """``InvokeAgentRuntimeCommand``; the contract is :meth:`BedrockAgentCore.run_command`'s."""
    if harness_arn is None:
        raise InvalidOptionsError("run_command needs a harness_arn", option="harness_arn")
    harness_id_of(harness_arn)
    validate_runtime_session_id(session_id, option="session_id")
    if not isinstance(command, str) or not 1 <= len(command) <= 65536:
        raise InvalidOptionsError("command must be 1-65536 characters", option="command")
    _validate.integer("timeout", timeout, minimum=1, allow_none=True)
    _validate.duration("idle_timeout", idle_timeout, allow_none=False)
    if qualifier is not None:
        validate_endpoint_name(qualifier)
    body: dict[str, Any] = {"command": command}
    if timeout is not None:
        body["timeout"] = timeout
    params: dict[str, Any] = {
        "agentRuntimeArn": harness_arn,
        "runtimeSessionId": session_id,
        "body": body,
    }
    if qualifier is not None:
        params["qualifier"] = qualifier
    stdout: list[str] = []
    stderr: list[str] = []
    exit_code: int | None = None
    stream = stream_call(
        clients,
        "invoke_agent_runtime_command",
        params,
        idle_timeout=idle_timeout,
        stream_code="command_stream_error",
        span_meta=request_meta("invoke_agent_runtime_command"),
    )
    clients.http.acquire()
    try:
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                body_ev = event.get("chunk", event)
                delta = body_ev.get("contentDelta")
                if isinstance(delta, Mapping):
                    for key, sink in (("stdout", stdout), ("stderr", stderr)):
                        text = delta.get(key)
                        if isinstance(text, str) and text:
                            sink.append(text)
                            if on_output is not None:
                                value = on_output(key, text)
                                if inspect.isawaitable(value):
                                    await value
                stop = body_ev.get("contentStop")
                if isinstance(stop, Mapping):
                    code = stop.get("exitCode")
                    exit_code = code if isinstance(code, int) else None
    finally:
        await clients.http.release()
    return CommandResult(stdout="".join(stdout), stderr="".join(stderr), exit_code=exit_code)
