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
  holding one ``toolResult`` per ``toolUse``; duplicate ids are rejected by the service;
* frames carry no sequence number, so a frame delivered twice (a replaying proxy, a
  buggy retry) can only be told by the block and message state it breaks. :class:`StreamCheck`
  refuses, with ``MalformedResponseError(code="duplicate_frame")``: a ``messageStart``
  inside an open message, a second ``messageStop`` with no ``messageStart`` between, a
  ``contentBlockStart`` repeating the tool block open at its index, and a
  ``contentBlockStop`` for a block already stopped. What it cannot tell apart from the
  model's own output is a repeated delta *inside* an open block: a repeated text delta is
  indistinguishable from a model repeating itself, and a repeated tool-input fragment makes
  the input invalid JSON (an error result; the tool never runs). Tolerated on purpose
  (reference goldens): ``metadata`` twice (the last wins), text after ``messageStop``, one
  tool id at two indices (merged), an index reused by another tool without a stop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from managedloop.errors import MalformedResponseError
from managedloop.handler import decode_tool_input
from managedloop.results import RawEvent, Terminal, ToolResult, ToolUse, TurnResult, Usage
from managedloop.tools import ToolDefinition

__all__ = [
    "ParsedTurn",
    "StreamCheck",
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


class StreamCheck:
    """Refuses the block/message states only a duplicated (or reordered) frame produces.

    Fed every envelope of one invoke, in order, as it arrives (see the module docstring).
    """

    __slots__ = ("_active", "_closed", "_message_open", "_open", "_stopped")

    def __init__(self) -> None:
        self._message_open = False  # saw messageStart, no messageStop yet
        self._stopped = False  # saw messageStop, no messageStart since
        self._open: set[int | None] = set()  # indices started (or streaming text), not stopped
        self._closed: set[int | None] = set()  # indices stopped and not reopened
        self._active: dict[int | None, str] = {}  # index -> the toolUseId open there

    def _refuse(self, what: str, event_type: str, index: Any = None) -> MalformedResponseError:
        return MalformedResponseError(
            f"InvokeHarness stream: {what} (a frame delivered twice or out of order)",
            code="duplicate_frame",
            event_type=event_type,
            index=index,
        )

    def feed(self, event: Any) -> None:
        if not isinstance(event, Mapping):
            return
        if "messageStart" in event:
            if self._message_open:
                raise self._refuse("messageStart inside an open message", "messageStart")
            self._message_open, self._stopped = True, False
            self._open.clear()
            self._closed.clear()
            self._active.clear()
        elif "messageStop" in event:
            if self._stopped:
                raise self._refuse("a second messageStop for one message", "messageStop")
            self._message_open, self._stopped = False, True
        elif "contentBlockStart" in event:
            body = _mapping(event["contentBlockStart"])
            index = _index(body.get("contentBlockIndex"))
            uid = _mapping(_mapping(body.get("start")).get("toolUse")).get("toolUseId")
            if uid is not None and index in self._open and self._active.get(index) == uid:
                raise self._refuse(
                    f"contentBlockStart repeats tool block {uid!r} at index {index}",
                    "contentBlockStart",
                    index,
                )
            self._open.add(index)
            self._closed.discard(index)
            if isinstance(uid, str):
                self._active[index] = uid
            else:
                self._active.pop(index, None)
        elif "contentBlockDelta" in event:
            index = _index(_mapping(event["contentBlockDelta"]).get("contentBlockIndex"))
            self._open.add(index)
            self._closed.discard(index)
        elif "contentBlockStop" in event:
            index = _index(_mapping(event["contentBlockStop"]).get("contentBlockIndex"))
            if index in self._closed:
                raise self._refuse(
                    f"contentBlockStop for block {index}, already stopped",
                    "contentBlockStop",
                    index,
                )
            self._open.discard(index)
            self._closed.add(index)
            self._active.pop(index, None)


def parse(events: Iterable[Any]) -> ParsedTurn:
    """Fold a turn's Converse envelopes into stop reason, text, tool uses and usage.

    Any sequence of values is accepted; malformed parts are ignored, except the states a
    duplicated frame leaves (:class:`StreamCheck`), which raise ``MalformedResponseError``.
    """
    check = StreamCheck()
    blocks: dict[str, _Block] = {}  # insertion order = first-seen order
    active: dict[int | None, _Block] = {}
    text: list[str] = []
    stop_reason: str | None = None
    usage: dict[str, Any] | None = None
    # The last assistant message's text and reasoning, by index, to echo back on resume.
    echo: dict[int | None, dict[str, Any]] = {}
    for event in events:
        check.feed(event)
        if not isinstance(event, Mapping):
            continue
        if "contentBlockDelta" in event:
            body = _mapping(event["contentBlockDelta"])
            index = _index(body.get("contentBlockIndex"))
            delta = _mapping(body.get("delta"))
            if isinstance(delta.get("text"), str):
                text.append(delta["text"])
                entry = echo.setdefault(index, {"text": ""})
                if "text" in entry:
                    entry["text"] += delta["text"]
            elif "toolUse" in delta:
                block = active.get(index)
                fragment = _mapping(delta["toolUse"]).get("input")
                if block is not None and isinstance(fragment, str):
                    block.fragments.append(fragment)
            elif "reasoningContent" in delta:
                _reasoning(echo.setdefault(index, {"reasoningContent": {}}), delta)
        elif "contentBlockStart" in event:
            body = _mapping(event["contentBlockStart"])
            start = _mapping(body.get("start")).get("toolUse")
            if isinstance(start, Mapping) and isinstance(start.get("toolUseId"), str):
                uid = start["toolUseId"]
                block = blocks.get(uid)
                if block is None:  # a repeated id keeps its first position (dedupe)
                    kind = start.get("type")
                    block = _Block(
                        uid, str(start.get("name", "")), kind if isinstance(kind, str) else None
                    )
                    blocks[uid] = block
                active[_index(body.get("contentBlockIndex"))] = block
        elif "messageStop" in event:
            reason = _mapping(event["messageStop"]).get("stopReason")
            stop_reason = reason if isinstance(reason, str) else None
        elif "metadata" in event:
            found = _mapping(event["metadata"]).get("usage")
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


_EMPTY: Mapping[str, Any] = {}


def _mapping(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one (a malformed part is ignored)."""
    return value if isinstance(value, Mapping) else _EMPTY


def _index(value: Any) -> int | None:
    """A block index: an ``int`` (never a ``bool``), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tokens(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _reasoning(entry: dict[str, Any], delta: Mapping[str, Any]) -> None:
    part = _mapping(delta["reasoningContent"])
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
            input_tokens=_tokens(parsed.usage.get("inputTokens")),
            output_tokens=_tokens(parsed.usage.get("outputTokens")),
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
    value = _mapping(body.get("delta")).get("text")
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
