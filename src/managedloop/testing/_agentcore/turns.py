"""One emulated harness turn: the invoke body read by the service's rules, the scripted step
rendered as ``InvokeHarness`` event-stream frames.

* a resume must hold the assistant ``toolUse`` message and the user ``toolResult`` message
  with exactly the pending ids (no duplicates), else ``400 ValidationException`` with the
  service's texts (:class:`RefusedError`); a new user text while tools are pending drops
  them;
* a per-invoke ``tools`` list replaces the harness's tools;
* frames: ``messageStart``, text deltas (no ``contentBlockStart`` for text), each tool as
  ``contentBlockStart.toolUse`` + two string input fragments (or fragments of
  ``tool_input_chunk`` characters) + ``contentBlockStop``
  (a server tool then gets its result block: ``contentBlockStart.toolResult`` + one
  ``toolResult`` delta + ``contentBlockStop``), ``messageStop{stopReason}``, then
  ``metadata{usage, metrics}`` (with the cache token counts when the emulator has them);
* hooks: the harness's ``beforeInvocation`` and ``beforeToolCall`` hooks are asked (the
  emulator's ``hooks=`` functions stand in for their Lambda targets; a hook with no function
  allows). Each answer is a ``hookEvent``; a deny ends the invocation there with
  ``stopReason: hook_stopped`` (a denied tool call is never pending).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from managedloop.results import ToolResult
from managedloop.testing._agentcore import eventstream as es
from managedloop.testing._agentcore.faults import AgentCoreFaults
from managedloop.testing._agentcore.state import Harness, Session
from managedloop.testing.script import Fail, Grade, ModelRequest, Reply
from managedloop.tools import ToolDefinition

__all__ = ["EXCEPTION_STATUS", "HookFn", "RefusedError", "Rendering", "model_request", "render"]

HookFn = Callable[[Mapping[str, Any]], "str | tuple[str, str]"]
"""``hook(event) -> "allow" | "deny" | (decision, reason)``; ``event`` is ``{"type",
"name", "tool_name"?, "tool_input"?}``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Rendering:
    """What one turn's frames depend on besides the step: the harness's hooks, the
    emulator's hook functions and cache token counts."""

    hooks: Sequence[Mapping[str, Any]] = ()
    decide: Mapping[str, HookFn] = field(default_factory=dict)
    cache_tokens: tuple[int, int] | None = None
    tool_input_chunk: int | None = None
    """Characters per tool-input fragment (``None``: two halves)."""


EXCEPTION_STATUS = {
    "validationException": 400,
    "internalServerException": 500,
    "runtimeClientError": 424,
}


class RefusedError(Exception):
    """An invoke body the service would refuse (its text goes into the 400)."""


def model_request(
    session: Session, harness: Harness, body: dict[str, Any], next_turn: Callable[[], int]
) -> ModelRequest:
    """What the scripted model is asked for one invoke ``body`` on ``session``: the user's
    text or the tool results of a resume, checked by the service's rules (else
    :class:`RefusedError`). ``next_turn()`` numbers the turn once the body is accepted."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RefusedError("messages must be a non-empty list")
    user_text: str | None = None
    results: list[ToolResult] = []
    if session.pending:
        if _is_resume(messages):
            results = _check_resume(messages, session.pending)
        else:
            session.pending = []  # a new user turn abandons the pending tool uses
    if not results:
        last = messages[-1]
        if last.get("role") != "user":
            raise RefusedError("the last message must have role user")
        if any("toolResult" in b for b in last.get("content", [])):
            raise RefusedError(
                "The number of toolResult blocks at messages.0.content exceeds the number "
                "of toolUse blocks of previous turn."
            )
        user_text = "".join(b.get("text", "") for b in last.get("content", []))
    tools_wire = body["tools"] if "tools" in body else harness.body.get("tools") or []
    tools = [_definition(t) for t in tools_wire if t.get("type") == "inline_function"]
    turn = next_turn()
    session.messages.extend(messages)
    system = body.get("systemPrompt") or harness.body.get("systemPrompt") or []
    model: dict[str, Any] = body.get("model") or {}
    config: dict[str, Any] = next(iter(model.values()), {}) if model else {}
    model_id = config.get("modelId")
    return ModelRequest(
        turn=turn,
        tools=tools,
        user_text=user_text,
        tool_results=results,
        messages=list(session.messages),
        system="".join(p.get("text", "") for p in system) or None,
        model=model_id,
    )


def render(
    session: Session,
    step: Reply | Fail | Grade,
    faults: AgentCoreFaults | None,
    mint_id: Callable[[str], str],
    rendering: Rendering | None = None,
) -> list[bytes]:
    """The event-stream frames of one scripted step; ``session`` learns the tool uses now
    pending and the assistant message. ``mint_id(prefix)`` names tool uses the step left
    unnamed."""
    r = rendering or Rendering()
    if isinstance(step, Fail):
        kind = step.kind if step.kind in EXCEPTION_STATUS else "internalServerException"
        return [
            es.event_frame("messageStart", {"role": "assistant"}),
            es.exception_frame(kind, step.message),
        ]
    if isinstance(step, Grade):
        step = Reply(text=step.text or step.explanation)
    frames = [es.event_frame("messageStart", {"role": "assistant"})]
    if _ask_hooks(frames, r, "beforeInvocation", "before_invocation"):
        return _stopped(session, frames, step, r)
    index = 0
    content: list[dict[str, Any]] = []
    if step.text:
        for piece in _pieces(step.text):
            frames.append(
                es.event_frame(
                    "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": piece}}
                )
            )
        frames.append(es.event_frame("contentBlockStop", {"contentBlockIndex": 0}))
        content.append({"text": step.text})
        index = 1
    pending: list[dict[str, Any]] = []
    reuse = faults is not None and faults.reuse_block_index
    for call in step.tool_calls:
        uid = call.id or mint_id("tooluse_")
        at = 0 if reuse else index
        kind = "server_tool_use" if call.server else "tool_use"
        frames.append(
            es.event_frame(
                "contentBlockStart",
                {
                    "contentBlockIndex": at,
                    "start": {"toolUse": {"toolUseId": uid, "name": call.name, "type": kind}},
                },
            )
        )
        raw = json.dumps(dict(call.input))
        if faults is not None and faults.raw_tool_input is not None:
            raw = faults.raw_tool_input
        size = r.tool_input_chunk
        if size is None:  # two halves
            cut = max(1, len(raw) // 2)
            fragments = [raw[:cut], raw[cut:]]
        else:
            fragments = [raw[i : i + size] for i in range(0, len(raw), size)]
        for fragment in fragments:
            if fragment:
                frames.append(
                    es.event_frame(
                        "contentBlockDelta",
                        {"contentBlockIndex": at, "delta": {"toolUse": {"input": fragment}}},
                    )
                )
        frames.append(es.event_frame("contentBlockStop", {"contentBlockIndex": at}))
        block = {"toolUseId": uid, "name": call.name, "input": dict(call.input)}
        content.append({"toolUse": block})
        if _ask_hooks(
            frames, r, "beforeToolCall", "before_tool_call", tool=call.name, tool_input=call.input
        ):
            session.pending = pending
            session.messages.append({"role": "assistant", "content": content})
            return _stopped(session, frames, step, r, keep=True)
        if call.server:
            index += 1
            frames += _server_result(0 if reuse else index, uid, call.name)
        else:
            pending.append(block)
        index += 1
    stop = step.stop_reason or ("tool_use" if pending else "end_turn")
    frames.append(es.event_frame("messageStop", {"stopReason": stop}))
    frames += _metadata(step, r)
    session.pending = pending
    session.messages.append({"role": "assistant", "content": content})
    return frames


def _metadata(step: Reply, r: Rendering) -> list[bytes]:
    if step.usage is None:
        return []
    i, o = step.usage
    usage: dict[str, Any] = {"inputTokens": i, "outputTokens": o, "totalTokens": i + o}
    if r.cache_tokens is not None:
        usage["cacheReadInputTokens"], usage["cacheWriteInputTokens"] = r.cache_tokens
    return [es.event_frame("metadata", {"usage": usage, "metrics": {"latencyMs": 1}})]


def _server_result(index: int, uid: str, name: str) -> list[bytes]:
    """A server tool's result block (the harness ran the tool itself)."""
    return [
        es.event_frame(
            "contentBlockStart",
            {
                "contentBlockIndex": index,
                "start": {"toolResult": {"toolUseId": uid, "status": "success"}},
            },
        ),
        es.event_frame(
            "contentBlockDelta",
            {"contentBlockIndex": index, "delta": {"toolResult": [{"text": f"{name} ran"}]}},
        ),
        es.event_frame("contentBlockStop", {"contentBlockIndex": index}),
    ]


def _ask_hooks(
    frames: list[bytes],
    r: Rendering,
    member: str,
    kind: str,
    *,
    tool: str | None = None,
    tool_input: Mapping[str, Any] | None = None,
) -> bool:
    """Ask each configured hook of ``member`` (``beforeToolCall``...), in order, appending
    its ``hookEvent``; ``True`` once one denies."""
    for hook in r.hooks:
        config = hook.get(member)
        if not isinstance(config, Mapping):
            continue
        name = str(config.get("name", ""))
        decide = r.decide.get(name)
        event: dict[str, Any] = {"type": kind, "name": name}
        if tool is not None:
            event["tool_name"], event["tool_input"] = tool, dict(tool_input or {})
        answer = decide(event) if decide is not None else "allow"
        decision, reason = (answer, "") if isinstance(answer, str) else answer
        body = {"hookEventId": str(uuid.uuid4()), "name": name, "type": kind, "decision": decision}
        if reason:
            body["reason"] = reason
        frames.append(es.event_frame("hookEvent", body))
        if decision == "deny":
            return True
    return False


def _stopped(
    session: Session, frames: list[bytes], step: Reply, r: Rendering, *, keep: bool = False
) -> list[bytes]:
    """End the invocation as a denying hook does: ``hook_stopped``, nothing pending."""
    frames.append(es.event_frame("messageStop", {"stopReason": "hook_stopped"}))
    frames += _metadata(step, r)
    session.pending = []
    if not keep:
        session.messages.append({"role": "assistant", "content": []})
    return frames


def _definition(tool: Mapping[str, Any]) -> ToolDefinition:
    fn = (tool.get("config") or {}).get("inlineFunction") or {}
    return ToolDefinition(
        name=str(tool.get("name", "")),
        description=str(fn.get("description", "")),
        input_schema=dict(fn.get("inputSchema") or {"type": "object", "properties": {}}),
    )


def _is_resume(messages: list[dict[str, Any]]) -> bool:
    return any(
        "toolResult" in block or "toolUse" in block
        for m in messages
        for block in m.get("content", [])
    )


def _check_resume(
    messages: list[dict[str, Any]], pending: list[dict[str, Any]]
) -> list[ToolResult]:
    """Enforce the service's resume rules; return the tool results."""
    if len(messages) != 2 or messages[0].get("role") != "assistant":
        raise RefusedError(
            "The number of toolResult blocks at messages.0.content exceeds the number of "
            "toolUse blocks of previous turn."
        )
    uses = [b["toolUse"] for b in messages[0].get("content", []) if "toolUse" in b]
    ids = [u.get("toolUseId") for u in uses]
    if len(ids) != len(set(ids)):
        raise RefusedError(
            "Expected toolResult blocks at messages.1.content: duplicate Ids at messages.0.content"
        )
    if set(ids) != {p["toolUseId"] for p in pending}:
        raise RefusedError("toolUse ids in messages.0.content do not match the previous turn")
    results = [b["toolResult"] for b in messages[1].get("content", []) if "toolResult" in b]
    rids = [r.get("toolUseId") for r in results]
    if sorted(rids) != sorted(ids):
        raise RefusedError(
            "The number of toolResult blocks at messages.1.content exceeds the number of "
            "toolUse blocks of previous turn."
        )
    return [
        ToolResult(
            tool_use_id=r["toolUseId"],
            text="".join(
                c.get("text", "") if "text" in c else json.dumps(c.get("json"))
                for c in r.get("content", [])
            ),
            is_error=r.get("status") == "error",
        )
        for r in results
    ]


def _pieces(text: str) -> list[str]:
    """Split text into up to three streamed deltas (word boundaries where possible)."""
    if len(text) < 12:
        return [text]
    third = len(text) // 3
    cuts = [text.find(" ", third) + 1 or third, text.find(" ", 2 * third) + 1 or 2 * third]
    a, b = sorted(set(cuts))[0], sorted(set(cuts))[-1]
    return [p for p in (text[:a], text[a:b], text[b:]) if p]
