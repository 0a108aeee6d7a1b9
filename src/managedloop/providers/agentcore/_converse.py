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

Stop reasons (``HarnessStopReason``): ``end_turn``/``stop_sequence`` end the turn,
``tool_use`` asks for the caller's tools, and every other value ends the request
``terminated`` with a named :data:`REASONS` entry (the raw value stays in
``stop_reason``): a harness limit (``max_iterations_exceeded``, ``timeout_exceeded``,
``max_output_tokens_exceeded``, ``max_tokens``, ``model_context_window_exceeded``), a
hook (``hook_stopped``), the model's output (``content_filtered``,
``malformed_model_output``, ``malformed_tool_use``) or the turn itself (``interrupted``,
``partial_turn``, ``tool_result``). An unknown value is ``host_stopped``.

A ``hookEvent`` (a hook's allow or deny) is a :class:`HookDecision`; one of type
``before_tool_call``/``after_tool_call`` names the tool block open when it arrived (the
harness sends it between that tool's ``contentBlockStart`` and the next block). A
``toolResult`` block (``contentBlockStart.start.toolResult`` plus ``toolResult`` deltas)
is a server tool's result, kept as a :class:`~managedloop.results.ToolResult`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from managedloop.errors import MalformedResponseError
from managedloop.handler import decode_tool_input
from managedloop.hosts import TextDelta, ToolInputDelta
from managedloop.results import RawEvent, Terminal, ToolResult, ToolUse, TurnResult, Usage
from managedloop.tools import ToolDefinition

__all__ = [
    "REASONS",
    "HookDecision",
    "ParsedTurn",
    "StreamCheck",
    "StreamDeltas",
    "hook_decisions",
    "inline_function",
    "merge_tools",
    "normalize",
    "parse",
    "reason_of",
    "resume_messages",
    "server_tool_results",
    "terminal",
    "text_delta",
    "user_message",
]

_CUSTOM_TYPES = (None, "tool_use")
_END_TURN = frozenset({"end_turn", "stop_sequence"})


REASONS: dict[str, str] = {
    "hook_stopped": "a hook stopped the invocation (see hook_decisions)",
    "max_iterations_exceeded": "the harness's maxIterations was reached",
    "timeout_exceeded": "the harness's timeoutSeconds was reached",
    "max_output_tokens_exceeded": "the harness's maxTokens was reached",
    "max_tokens": "the model's output token limit was reached",
    "model_context_window_exceeded": "the conversation no longer fits the model's context",
    "content_filtered": "the model's output was filtered",
    "malformed_model_output": "the model's output could not be read",
    "malformed_tool_use": "the model asked for a tool in a form that could not be read",
    "interrupted": "the invocation was interrupted",
    "partial_turn": "the harness ended the turn part way",
    "tool_result": "the turn ended on a tool result",
}
"""Every ``HarnessStopReason`` that ends a request ``terminated``, by the ``reason`` it
gets (the same string); anything else unknown is ``host_stopped``."""


def terminal(stop_reason: Any) -> Terminal:
    """``end_turn``/``stop_sequence``: end_turn; ``tool_use``: requires_action; else terminated."""
    if stop_reason in _END_TURN:
        return Terminal.END_TURN
    if stop_reason == "tool_use":
        return Terminal.REQUIRES_ACTION
    return Terminal.TERMINATED


def reason_of(stop_reason: Any) -> str | None:
    """The named ``reason`` of a stop that ends a request ``terminated`` (see
    :data:`REASONS`); ``None`` for ``end_turn``/``stop_sequence``/``tool_use``."""
    if stop_reason in _END_TURN or stop_reason == "tool_use":
        return None
    if isinstance(stop_reason, str) and stop_reason in REASONS:
        return stop_reason
    return "host_stopped"


@dataclass(frozen=True, kw_only=True, slots=True)
class HookDecision:
    """One ``hookEvent`` of an invoke: which hook, at which point, what it decided and,
    for a tool-call hook, about which tool."""

    name: str
    """The hook's name (as configured in the harness's ``hooks``)."""
    type: str
    """``before_tool_call``, ``after_tool_call``, ``before_invocation`` or
    ``after_invocation``."""
    decision: str | None = None
    """``allow`` or ``deny`` (``None`` when the hook reported none)."""
    reason: str | None = None
    tool_name: str | None = None
    """For a tool-call hook: the tool block open when the hook's event arrived."""
    tool_use_id: str | None = None
    hook_event_id: str | None = None

    @property
    def denied(self) -> bool:
        return self.decision == "deny"


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
    server_tool_results: list[ToolResult] = field(default_factory=list)
    """Results of tools the harness ran itself (``toolResult`` blocks)."""
    hooks: list[HookDecision] = field(default_factory=list)
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
    results: dict[int | None, _ServerResult] = {}  # server tool results by block index
    finished: list[_ServerResult] = []
    hooks: list[HookDecision] = []
    current: _Block | None = None  # the tool block open last (a tool-call hook names it)
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
            elif "toolResult" in delta and index in results:
                results[index].add(delta["toolResult"])
        elif "contentBlockStart" in event:
            body = _mapping(event["contentBlockStart"])
            opened = _mapping(_mapping(body.get("start")).get("toolResult"))
            if isinstance(opened.get("toolUseId"), str):
                result = _ServerResult(opened["toolUseId"], opened.get("status") == "error")
                results[_index(body.get("contentBlockIndex"))] = result
                finished.append(result)
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
                current = block
        elif "contentBlockStop" in event:
            results.pop(_index(_mapping(event["contentBlockStop"]).get("contentBlockIndex")), None)
        elif "hookEvent" in event:
            hook = _hook(_mapping(event["hookEvent"]), current)
            if hook is not None:
                hooks.append(hook)
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
        server_tool_results=[r.result() for r in finished],
        hooks=hooks,
        usage=usage,
        assistant_content=[c for c in content if c.get("text") or c.get("reasoningContent")],
    )


_EMPTY: Mapping[str, Any] = {}


@dataclass(slots=True)
class _ServerResult:
    tool_use_id: str
    is_error: bool
    parts: list[str] = field(default_factory=list)

    def add(self, delta: Any) -> None:
        for item in delta if isinstance(delta, list) else ():
            part = _mapping(item)
            if isinstance(part.get("text"), str):
                self.parts.append(part["text"])
            elif "json" in part:
                self.parts.append(json.dumps(part["json"], sort_keys=True, default=str))

    def result(self) -> ToolResult:
        return ToolResult(
            tool_use_id=self.tool_use_id, text="".join(self.parts), is_error=self.is_error
        )


def _hook(body: Mapping[str, Any], current: _Block | None) -> HookDecision | None:
    name, kind = body.get("name"), body.get("type")
    if not isinstance(name, str) or not isinstance(kind, str):
        return None
    tool = current if kind in ("before_tool_call", "after_tool_call") else None

    def text(key: str) -> str | None:
        value = body.get(key)
        return value if isinstance(value, str) else None

    return HookDecision(
        name=name,
        type=kind,
        decision=text("decision"),
        reason=text("reason"),
        tool_name=tool.name if tool is not None else None,
        tool_use_id=tool.id if tool is not None else None,
        hook_event_id=text("hookEventId"),
    )


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
            cache_read_input_tokens=_tokens(parsed.usage.get("cacheReadInputTokens")),
            cache_creation_input_tokens=_tokens(parsed.usage.get("cacheWriteInputTokens")),
            raw=[parsed.usage],
        )
    return TurnResult(
        terminal=terminal(parsed.stop_reason),
        reason=reason_of(parsed.stop_reason),
        stop_reason=parsed.stop_reason,
        text=parsed.text,
        custom_tool_uses=parsed.tool_uses,
        server_tool_uses=parsed.server_tool_uses,
        usage=usage,
        events=list(events),
    )


def _events_of(source: Any) -> Sequence[Any]:
    events = getattr(source, "events", source)
    return events if isinstance(events, Sequence) else list(events)


def hook_decisions(source: Any) -> list[HookDecision]:
    """Every hook decision of a result (a ``SessionResult`` or ``TurnResult``: its
    ``events``) or of a sequence of raw events, in order; ``[d for d in ... if d.denied]``
    are the denials, each naming its hook and, for a tool-call hook, the tool."""
    return parse(_events_of(source)).hooks


def server_tool_results(source: Any) -> list[ToolResult]:
    """The results of the tools the harness ran itself (``toolResult`` blocks), in order,
    of a result or a sequence of raw events (their uses are ``server_tool_uses``)."""
    return parse(_events_of(source)).server_tool_results


class StreamDeltas:
    """The live items of an invoke's envelopes, fed each as it arrives: a
    :class:`TextDelta` per text delta, and a :class:`ToolInputDelta` per input fragment
    of a custom tool block whose tool is one of ``tools`` (the block named by the last
    tool ``contentBlockStart`` at its index, as :func:`parse` assigns fragments, so a
    call's fragments concatenate to the input it ends with); ``None`` for any other
    envelope."""

    __slots__ = ("_open", "_tools")

    def __init__(self, tools: frozenset[str] | set[str] = frozenset()) -> None:
        self._tools = tools
        self._open: dict[int | None, tuple[str, str]] = {}  # index -> (toolUseId, name)

    def feed(self, event: Any) -> TextDelta | ToolInputDelta | None:
        if type(event) is not dict and not isinstance(event, Mapping):
            return None
        body = event.get("contentBlockDelta")
        if body is not None:
            body = _mapping(body)
            delta = _mapping(body.get("delta"))
            text = delta.get("text")
            if isinstance(text, str):
                return TextDelta(text)
            tool = delta.get("toolUse")
            if tool is None:
                return None
            block = self._open.get(_index(body.get("contentBlockIndex")))
            fragment = _mapping(tool).get("input")
            if block is None or not isinstance(fragment, str) or not fragment:
                return None
            return ToolInputDelta(block[0], block[1], fragment)
        if "contentBlockStart" in event:
            start = _mapping(event["contentBlockStart"])
            use = _mapping(_mapping(start.get("start")).get("toolUse"))
            uid = use.get("toolUseId")
            if isinstance(uid, str):
                index = _index(start.get("contentBlockIndex"))
                name = str(use.get("name", ""))
                if name in self._tools and use.get("type") in _CUSTOM_TYPES:
                    self._open[index] = (uid, name)
                else:  # another tool's, or a server tool's (observe-only)
                    self._open.pop(index, None)
        return None


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
