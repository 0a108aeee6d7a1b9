"""Helpers for driving a Local connection turn by turn (no session loop)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from managedloop.hosts import OpenRequest, TextDelta, TurnInput, TurnResult
from managedloop.providers.local import Local, LocalConnection
from managedloop.provisioning.specs import AgentSpec
from managedloop.results import RawEvent


class RecordingChat:
    """A chat function answering from a list of Chat Completions bodies (or exceptions)."""

    def __init__(self, answers: Sequence[Any]) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, request: Any) -> Any:
        self.requests.append(
            {
                "model": request.model,
                "messages": [dict(m) for m in request.messages],
                "tools": list(request.tools),
                "options": dict(request.options),
            }
        )
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def completion(
    content: str | None = None,
    finish_reason: str = "stop",
    tool_calls: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {"choices": [{"message": message, "finish_reason": finish_reason}]}
    body["usage"] = usage if usage is not None else {"prompt_tokens": 10, "completion_tokens": 5}
    return body


def tc(id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


async def open_conn(
    provider: Local,
    spec: AgentSpec | None = None,
    *,
    transcript: list[dict[str, Any]] | None = None,
    session_id: str | None = None,
) -> LocalConnection:
    tools = spec.tool_definitions() if spec is not None else []
    return await provider.open(
        OpenRequest(
            spec=spec,
            agent=spec,
            tools=tools,
            transcript=transcript,
            session_id=session_id,
        )
    )


class Turn(list[RawEvent]):
    """The raw events of one turn (text deltas dropped), with the turn's ``result``."""

    result: TurnResult


async def drive(conn: LocalConnection, input: TurnInput) -> Turn:
    """Drive one turn: its raw events, ``.result`` the TurnResult it ended with."""
    turn = Turn()
    async for item in conn.turn(input):
        if isinstance(item, TurnResult):
            turn.result = item
        elif not isinstance(item, TextDelta):
            turn.append(item)  # type: ignore[arg-type]
    return turn
