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
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from managedloop.handler import is_error_payload
from managedloop.providers.local import text_of
from managedloop.results import ToolResult, make_tool_result
from managedloop.testing.script import ModelRequest, Reply, ScriptedAgent, dumps_args
from managedloop.tools import ToolDefinition

__all__ = [
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
    roles = [m.get("role") for m in messages]  # one pass; the history grows every turn
    turn = roles.count("assistant")
    system = text_of(messages[roles.index("system")].get("content")) if "system" in roles else None
    user_text: str | None = None
    results: list[ToolResult] = []
    for m in reversed(messages):
        role = m.get("role")
        if role == "assistant":
            break
        if role == "user" and user_text is None:
            user_text = text_of(m.get("content"))
        elif role == "tool":
            text = text_of(m.get("content"))
            results.append(
                make_tool_result(str(m.get("tool_call_id")), text, is_error_payload(text))
            )
    results.reverse()
    return ModelRequest(
        turn=turn,
        tools=_definitions(body.get("tools")) if tools is None else tools,
        user_text=user_text,
        tool_results=results,
        messages=list(messages),
        system=system,
        model=body.get("model"),
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


def _calls(reply: Reply, agent: ScriptedAgent, prefix: str) -> list[tuple[str, str, str]]:
    return [
        (tc.id or agent.mint_id(prefix), tc.name, dumps_args(tc.input))
        for tc in reply.tool_calls
        if not tc.server  # a chat endpoint has no server-side tools
    ]


def render_completion(
    step: Reply, agent: ScriptedAgent, model: str | None
) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    """(assistant message, finish reason, usage) for a reply."""
    calls = _calls(step, agent, "call_")
    message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    finish = step.stop_reason or ("tool_calls" if calls else "stop")
    usage = None
    if step.usage is not None:
        usage = {
            "prompt_tokens": step.usage[0],
            "completion_tokens": step.usage[1],
            "total_tokens": step.usage[0] + step.usage[1],
        }
    return message, finish, usage


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
