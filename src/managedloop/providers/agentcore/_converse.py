"""Converse decoding and request building for the AgentCore harness (pure, no I/O).

Protocol invariants this module relies on (``agentcore-wire.md`` §2, reference §3.5-3.6):

* botocore hands each event over as a single-key envelope ``{"<member>": {...}}``;
* a text block has no ``contentBlockStart``: ``contentBlockDelta.delta.text`` just arrives;
* a tool block opens with ``contentBlockStart.start.toolUse{toolUseId, name, type?}`` and its
  input arrives as **string fragments** in ``contentBlockDelta.delta.toolUse.input`` that are
  concatenated, then JSON-parsed;
* ``contentBlockIndex`` can be reused by two different ``toolUseId`` s in one stream, so tool
  blocks are keyed by ``toolUseId`` and a delta goes to the block *currently active* at its
  index (keying by index dropped one tool and duplicated the other, and the service then
  rejected the duplicate-id resume);
* only ``type == "tool_use"`` (or no type) is an inline function the caller must run;
  ``server_tool_use`` / ``mcp_tool_use`` blocks ran on the harness and are observe-only;
* one invoke can carry several messages; ``messageStop.stopReason`` of the last one and the
  last ``metadata.usage`` describe the invoke;
* resuming after inline tools re-sends **two** messages: the assistant message holding the
  ``toolUse`` blocks (the harness does not persist the partial turn) and the user message
  holding one ``toolResult`` per ``toolUse``; duplicate ids are rejected by the service.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from managedloop.handler import decode_tool_input
from managedloop.results import RawEvent, Terminal, ToolResult, ToolUse, TurnResult, Usage
from managedloop.tools import ToolDefinition

__all__ = [
    "ParsedTurn",
    "inline_function",
    "merge_tools",
    "normalize",
    "parse",
    "resume_messages",
    "terminal",
    "text_delta",
    "user_message",
]

_CUSTOM_TYPES = (None, "tool_use")
_END_TURN = frozenset({"end_turn", "stop_sequence"})


def terminal(stop_reason: Any) -> Terminal:
    """``end_turn``/``stop_sequence``: end_turn; ``tool_use``: requires_action; else terminated."""
    if stop_reason in _END_TURN:
        return Terminal.END_TURN
    if stop_reason == "tool_use":
        return Terminal.REQUIRES_ACTION
    return Terminal.TERMINATED


@dataclass(slots=True)
class _Block:
    id: str
    name: str
    type: str | None
    fragments: list[str] = field(default_factory=list)

    def tool_use(self) -> ToolUse:
        # An unreadable input still gets answered: with an error result naming the problem.
        value, error = decode_tool_input("".join(self.fragments))
        return ToolUse(id=self.id, name=self.name, input=value, input_error=error)


@dataclass(frozen=True, kw_only=True, slots=True)
class ParsedTurn:
    stop_reason: str | None = None
    text: str = ""
    tool_uses: list[ToolUse] = field(default_factory=list)
    server_tool_uses: list[ToolUse] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    assistant_content: list[dict[str, Any]] = field(default_factory=list)
    """Text and reasoning blocks of the last assistant message, to echo on resume."""


def parse(events: Iterable[Any]) -> ParsedTurn:
    """Fold a turn's Converse envelopes into stop reason, text, tool uses and usage."""
    blocks: dict[str, _Block] = {}  # insertion order = first-seen order
    active: dict[int, _Block] = {}
    text: list[str] = []
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None
    # The last assistant message's text and reasoning, by index, to echo back on resume.
    echo: dict[int, dict[str, Any]] = {}
    for event in events:
        if not isinstance(event, Mapping):
            continue
        if "contentBlockDelta" in event:
            body = event["contentBlockDelta"]
            index = body.get("contentBlockIndex")
            delta = body.get("delta") or {}
            if "text" in delta and isinstance(delta["text"], str):
                text.append(delta["text"])
                entry = echo.setdefault(index, {"text": ""})
                if "text" in entry:
                    entry["text"] += delta["text"]
            elif "toolUse" in delta:
                block = active.get(index)
                fragment = (delta["toolUse"] or {}).get("input")
                if block is not None and isinstance(fragment, str):
                    block.fragments.append(fragment)
            elif "reasoningContent" in delta:
                _reasoning(echo.setdefault(index, {"reasoningContent": {}}), delta)
        elif "contentBlockStart" in event:
            body = event["contentBlockStart"]
            start = (body.get("start") or {}).get("toolUse")
            if isinstance(start, Mapping) and isinstance(start.get("toolUseId"), str):
                uid = start["toolUseId"]
                block = blocks.get(uid)
                if block is None:  # a repeated id keeps its first position (dedupe)
                    block = _Block(uid, str(start.get("name", "")), start.get("type"))
                    blocks[uid] = block
                active[body.get("contentBlockIndex")] = block
        elif "messageStop" in event:
            stop_reason = (event["messageStop"] or {}).get("stopReason")
        elif "metadata" in event:
            found = (event["metadata"] or {}).get("usage")
            if isinstance(found, Mapping):
                usage = dict(found)
        elif "messageStart" in event:
            echo = {}
    custom = [b.tool_use() for b in blocks.values() if b.type in _CUSTOM_TYPES]
    server = [b.tool_use() for b in blocks.values() if b.type not in _CUSTOM_TYPES]
    content = [echo[i] for i in sorted(echo, key=lambda k: (k is None, k or 0))]
    return ParsedTurn(
        stop_reason=stop_reason,
        text="".join(text),
        tool_uses=custom,
        server_tool_uses=server,
        usage=usage,
        assistant_content=[c for c in content if c.get("text") or c.get("reasoningContent")],
    )


def _reasoning(entry: dict[str, Any], delta: Mapping[str, Any]) -> None:
    part = delta["reasoningContent"] or {}
    target = entry.setdefault("reasoningContent", {})
    if "redactedContent" in part:
        target["redactedContent"] = part["redactedContent"]
        return
    rt = target.setdefault("reasoningText", {"text": ""})
    if isinstance(part.get("text"), str):
        rt["text"] += part["text"]
    if isinstance(part.get("signature"), str):
        rt["signature"] = part["signature"]


def normalize(events: Sequence[RawEvent]) -> TurnResult:
    """A :class:`TurnResult` from one invoke's envelopes (raw events kept verbatim)."""
    return turn_result(parse(events), events)


def turn_result(parsed: ParsedTurn, events: Sequence[RawEvent]) -> TurnResult:
    usage = None
    if parsed.usage is not None:
        usage = Usage(
            input_tokens=int(parsed.usage.get("inputTokens") or 0),
            output_tokens=int(parsed.usage.get("outputTokens") or 0),
            raw=[parsed.usage],
        )
    return TurnResult(
        terminal=terminal(parsed.stop_reason),
        stop_reason=parsed.stop_reason,
        text=parsed.text,
        custom_tool_uses=parsed.tool_uses,
        server_tool_uses=parsed.server_tool_uses,
        usage=usage,
        events=list(events),
    )


def text_delta(event: RawEvent) -> str | None:
    body = event.get("contentBlockDelta") if isinstance(event, Mapping) else None
    if not isinstance(body, Mapping):
        return None
    value = (body.get("delta") or {}).get("text")
    return value if isinstance(value, str) else None


def user_message(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"text": text}]}]


def resume_messages(
    tool_uses: Sequence[ToolUse],
    results: Sequence[ToolResult],
    assistant_content: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The assistant ``toolUse`` message plus the user ``toolResult`` message.

    Ids are deduplicated (first wins) and every tool use gets exactly one result (a missing
    one is answered with an error result), because the service rejects both a duplicate id
    and a count mismatch.
    """
    by_id = {r.tool_use_id: r for r in results}
    uses: list[ToolUse] = []
    seen: set[str] = set()
    for use in tool_uses:
        if use.id is None or use.id in seen:
            continue
        seen.add(use.id)
        uses.append(use)
    assistant = [dict(block) for block in assistant_content]
    assistant += [
        {"toolUse": {"toolUseId": u.id, "name": u.name, "input": u.input, "type": "tool_use"}}
        for u in uses
    ]
    user: list[dict[str, Any]] = []
    for u in uses:
        assert u.id is not None
        r = by_id.get(u.id) or ToolResult(tool_use_id=u.id, text="no result", is_error=True)
        user.append(
            {
                "toolResult": {
                    "toolUseId": u.id,
                    "content": [{"text": r.text}],
                    "status": "error" if r.is_error else "success",
                }
            }
        )
    return [{"role": "assistant", "content": assistant}, {"role": "user", "content": user}]


def inline_function(tool: ToolDefinition) -> dict[str, Any]:
    """A harness ``inline_function`` tool (runs in the caller's process)."""
    return {
        "type": "inline_function",
        "name": tool.name,
        "config": {
            "inlineFunction": {
                "description": tool.description or tool.name,  # the service needs 1+ chars
                "inputSchema": tool.input_schema,
            }
        },
    }


def merge_tools(
    harness_tools: Sequence[Mapping[str, Any]], client: Sequence[ToolDefinition]
) -> list[dict[str, Any]]:
    """The harness's own tools plus the client's inline functions (client wins on a name).

    A per-invocation ``tools`` list *replaces* the harness's tools, so it must carry both.
    """
    names = {t.name for t in client}
    kept = [dict(t) for t in harness_tools if t.get("name") not in names]
    return kept + [inline_function(t) for t in client]
