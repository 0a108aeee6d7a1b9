"""Script steps ↔ Chat Completions (and Messages API) shapes, shared by the scripted chat
model (no server) and the loopback chat emulator.

Invariants:

* the step index of a request is the number of assistant messages it carries, so any
  number of concurrent conversations each play the script from their own position;
* what the model "was sent" (:class:`~managedloop.testing.ModelRequest`) is read off the
  request: the user text and tool results since the last assistant message (tool results
  are marked ``is_error`` when their content is the ``{"isError": true}`` payload);
* a :class:`~managedloop.testing.Reply` becomes one assistant message: text as ``content``
  (``None`` when empty), each tool call as a function call with JSON arguments and an id
  (minted when the script gives none); finish reason ``tool_calls`` when there are calls,
  else ``stop``, unless the step overrides it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from managedloop.handler import is_error_payload
from managedloop.providers.local import History, text_of
from managedloop.results import ToolResult, make_tool_result
from managedloop.testing.script import (
    ModelRequest,
    Reply,
    ScriptedAgent,
    make_model_request,
)
from managedloop.tools import ToolDefinition

__all__ = [
    "HistoryReader",
    "completion_body",
    "definitions",
    "messages_api_request",
    "model_request",
    "render_completion",
    "render_messages_response",
    "sse_chunks",
]


def _definitions(tools: Any) -> list[ToolDefinition]:
    out: list[ToolDefinition] = []
    for t in tools or ():
        fn = t.get("function", t) if isinstance(t, Mapping) else {}
        name = fn.get("name")
        if isinstance(name, str):
            out.append(
                ToolDefinition(
                    name=name,
                    description=fn.get("description") or "",
                    input_schema=fn.get("parameters") or fn.get("input_schema") or {},
                )
            )
    return out


def model_request(
    body: Mapping[str, Any], tools: Sequence[ToolDefinition] | None = None
) -> ModelRequest:
    """What a Chat Completions request body says the model was sent (``tools``: the
    body's tool definitions, when the caller already has them)."""
    messages: Sequence[Mapping[str, Any]] = body.get("messages") or []
    roles = [m.get("role") for m in messages]  # one pass
    system = text_of(messages[roles.index("system")].get("content")) if "system" in roles else None
    return _record(
        list(messages),  # the record's own snapshot
        roles.count("assistant"),
        system,
        _definitions(body.get("tools")) if tools is None else tools,
        body.get("model"),
    )


def _record(
    messages: Sequence[Mapping[str, Any]],
    turn: int,
    system: str | None,
    tools: Sequence[ToolDefinition],
    model: Any,
) -> ModelRequest:
    """The request record, given what the whole history says (the step index, the first
    system message); the rest is read off the messages since the last assistant one.
    ``messages`` becomes the record's: callers pass a snapshot (a list of their own)."""
    user_text: str | None = None
    results: list[ToolResult] = []
    for m in reversed(messages):
        role = m.get("role")
        if role == "assistant":
            break
        if role == "user" and user_text is None:
            user_text = text_of(m.get("content"))
        elif role == "tool":
            content = m.get("content")
            text = content if type(content) is str else text_of(content)  # text_of's str case
            # is_error_payload reads JSON objects only: plain text needs no call
            error = text.lstrip().startswith("{") and is_error_payload(text)
            results.append(make_tool_result(str(m.get("tool_call_id")), text, error))
    results.reverse()
    return make_model_request(turn, tools, user_text, results, messages, system, model)


def _snapshot_record(  # noqa: PLR0917 (positional: a partial per scripted turn)
    history: History,
    length: int,
    turn: int,
    system: str | None,
    tools: Sequence[ToolDefinition],
    model: Any,
) -> ModelRequest:
    """:func:`_record` of the first ``length`` messages of an append-only history."""
    return _record(history[:length], turn, system, tools, model)


_UNSEEN: Any = object()  # no system message read yet


class HistoryReader:
    """:func:`model_request` for a chat function's :class:`~managedloop.providers.local.History`,
    reading only the messages appended since the last request.

    The step index (the number of assistant messages) and the first system message are
    facts about the whole history; re-reading the whole history every turn made each
    turn's cost grow with the conversation. A ``History`` only grows by ``append`` (the
    connection's contract, which its encoding cache relies on too), so what was read
    stays true and only the new messages are read, and a request's record is built (when
    a test reads it) from the history's first messages, as many as the request held,
    instead of a copy per request. Any other sequence, another history, or one shorter
    than what was read is read whole, as :func:`model_request` does.
    """

    __slots__ = ("_history", "_read", "_system", "_turn")

    def __init__(self) -> None:
        self._history: Any = None
        self._read = 0
        self._turn = 0
        self._system: Any = _UNSEEN

    def request(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolDefinition], model: Any
    ) -> ModelRequest:
        return self.read(messages, tools, model)[1]()

    def read(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolDefinition], model: Any
    ) -> tuple[int, Callable[[], ModelRequest]]:
        """The step index of the request, and a function that builds its record from a
        snapshot of ``messages`` as they are now (see :meth:`ScriptedAgent.play
        <managedloop.testing.script.ScriptedAgent.play>`: most records are built only when
        a test reads them)."""
        if type(messages) is not History:
            record = model_request({"model": model, "messages": messages}, tools)
            return record.turn, lambda: record
        length = len(messages)
        if messages is not self._history or length < self._read:
            self._history, self._read, self._turn, self._system = messages, 0, 0, _UNSEEN
        turn, system = self._turn, self._system
        read = self._read
        if read < length:
            for m in messages[read:] if read else messages:
                role = m.get("role")
                if role == "assistant":
                    turn += 1
                elif role == "system" and system is _UNSEEN:
                    system = text_of(m.get("content"))
            self._read, self._turn, self._system = length, turn, system
        # The snapshot is the history's first ``length`` messages, sliced when the record
        # is built: an append-only history keeps them, so a request copies nothing.
        return turn, partial(
            _snapshot_record,
            messages,
            length,
            turn,
            None if system is _UNSEEN else system,
            tools,
            model,
        )


def definitions(tools: Any) -> list[ToolDefinition]:
    """The tool definitions of a Chat Completions ``tools`` list."""
    return _definitions(tools)


def messages_api_request(body: Mapping[str, Any]) -> ModelRequest:
    """What a Messages API request body says the model was sent."""
    messages: Sequence[Mapping[str, Any]] = body.get("messages") or []
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    user_text: str | None = None
    results: list[ToolResult] = []
    if messages and messages[-1].get("role") == "user":
        content = messages[-1].get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        texts = []
        for block in blocks:
            if block.get("type") == "tool_result":
                text = text_of(block.get("content"))
                results.append(
                    ToolResult(
                        tool_use_id=str(block.get("tool_use_id")),
                        text=text,
                        is_error=bool(block.get("is_error")),
                    )
                )
            elif block.get("type") == "text":
                texts.append(str(block.get("text", "")))
        user_text = "".join(texts) or None
    system = body.get("system")
    return ModelRequest(
        turn=turn,
        tools=_definitions(body.get("tools")),
        user_text=user_text,
        tool_results=results,
        messages=list(messages),
        system=system if isinstance(system, str) else None,
        model=body.get("model"),
    )


def render_completion(
    step: Reply, agent: ScriptedAgent, model: str | None
) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    """(assistant message, finish reason, usage) for a reply: fresh objects each time (a
    caller may keep or change them), built from the reply's parts worked out once."""
    parts = step._chat
    if parts is None:
        parts = _chat_parts(step)
    content, calls, finish, usage = parts
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        rendered = []
        for call_id, name, arguments in calls:  # a loop: no comprehension frame per turn
            rendered.append(
                {
                    "id": call_id or agent.mint_id("call_"),  # a minted id is per request
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        message["tool_calls"] = rendered
    return message, finish, None if usage is None else usage.copy()


_ChatParts = tuple[str | None, tuple[tuple[str | None, str, str], ...], str, dict[str, int] | None]


def _chat_parts(step: Reply) -> _ChatParts:
    """What every rendering of ``step`` shares (kept on the reply, see ``Reply._chat``):
    the content (``None`` when empty), the custom calls as (id or ``None``, name, JSON
    arguments) (a chat endpoint has no server-side tools), the finish reason, the usage."""
    calls = tuple((tc.id, tc.name, tc.arguments) for tc in step.tool_calls if not tc.server)
    usage = None
    if step.usage is not None:
        prompt, completion = step.usage
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    finish = step.stop_reason or ("tool_calls" if calls else "stop")
    parts: _ChatParts = (step.text or None, calls, finish, usage)
    object.__setattr__(step, "_chat", parts)
    return parts


def completion_body(
    message: dict[str, Any], finish: str, usage: dict[str, Any] | None, model: str | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": f"chatcmpl-{time.time_ns():x}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model or "emulator",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def _pieces(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def sse_chunks(
    message: dict[str, Any],
    finish: str,
    usage: dict[str, Any] | None,
    model: str | None,
    *,
    chunk_size: int,
    include_usage: bool,
    name_style: str = "once",
) -> list[bytes]:
    """The SSE ``data:`` frames of one streamed completion, ending with ``[DONE]``.

    ``name_style`` is how a tool call's ``id`` and ``function.name`` arrive, as real
    servers differ: ``"once"`` (OpenAI: in the call's first chunk), ``"every_chunk"``
    (llama.cpp: whole, in every chunk of the call) or ``"split"`` (in two parts).
    """
    base = {
        "id": f"chatcmpl-{time.time_ns():x}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model or "emulator",
    }

    def frame(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    frames = [frame({"role": "assistant", "content": ""})]
    frames += [frame({"content": p}) for p in _pieces(message.get("content") or "", chunk_size)]
    for index, call in enumerate(message.get("tool_calls") or ()):
        fn = call["function"]
        name, call_id = fn["name"], call["id"]
        arguments = list(_pieces(fn["arguments"], chunk_size)) or [""]
        if name_style == "every_chunk":  # llama.cpp: id and whole name in every chunk
            frames += [
                frame(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": p},
                            }
                        ]
                    }
                )
                for p in arguments
            ]
            continue
        if name_style == "split":  # id and name in two parts each, then the arguments
            cut, id_cut = max(1, len(name) // 2), max(1, len(call_id) // 2)
            head = {"index": index, "id": call_id[:id_cut], "type": "function"}
            frames.append(frame({"tool_calls": [{**head, "function": {"name": name[:cut]}}]}))
            rest = {"index": index, "id": call_id[id_cut:], "function": {"name": name[cut:]}}
            frames.append(frame({"tool_calls": [rest]}))
        else:  # OpenAI: id and name once, in the first chunk of the call
            head = {"index": index, "id": call_id, "type": "function"}
            frames.append(frame({"tool_calls": [{**head, "function": {"name": name}}]}))
        frames += [
            frame({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
            for p in arguments
            if p
        ]
    frames.append(frame({}, finish))
    if include_usage and usage is not None:
        tail = {**base, "choices": [], "usage": usage}
        frames.append(b"data: " + json.dumps(tail).encode() + b"\n\n")
    frames.append(b"data: [DONE]\n\n")
    return frames


_STOP_REASON = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def render_messages_response(
    step: Reply, agent: ScriptedAgent, model: str | None
) -> dict[str, Any]:
    """A Messages API response body for a reply."""
    content: list[dict[str, Any]] = []
    if step.text:
        content.append({"type": "text", "text": step.text})
    for tc in step.tool_calls:
        if not tc.server:
            content.append(
                {
                    "type": "tool_use",
                    "id": tc.id or agent.mint_id("toolu_"),
                    "name": tc.name,
                    "input": dict(tc.input),
                }
            )
    has_calls = any(b["type"] == "tool_use" for b in content)
    stop = step.stop_reason or ("tool_use" if has_calls else "end_turn")
    stop = _STOP_REASON.get(stop, stop)
    usage = step.usage or (0, 0)
    return {
        "id": f"msg_{time.time_ns():x}",
        "type": "message",
        "role": "assistant",
        "model": model or "emulator",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }
