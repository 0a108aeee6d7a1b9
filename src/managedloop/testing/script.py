"""The scripted model shared by every emulator in :mod:`managedloop.testing`.

A *script* is a list of steps; each step is one model turn. A step is a :class:`Reply`
(text and/or tool calls), a :class:`Fail` (the host reports an error), a :class:`Grade`
(an outcome evaluation, Claude only), or a callable ``step(request) -> step`` that can
assert on what the model was sent (:class:`ModelRequest`) before answering.

Every emulator renders the same steps onto its own wire: Chat Completions JSON or SSE
chunks (Local), Claude Managed Agents events over SSE, AgentCore event-stream frames.

With no script, the :class:`ScriptedAgent` calls each declared custom tool once (all in one
turn) with arguments made from the tool's schema, then answers with the results.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from managedloop._json import encoder
from managedloop.results import ToolResult, fast_builder
from managedloop.tools import ToolDefinition

__all__ = [
    "Fail",
    "Grade",
    "ModelRequest",
    "Reply",
    "ScriptExhaustedError",
    "ScriptedAgent",
    "Step",
    "ToolCall",
    "call",
    "calls",
    "example_args",
    "say",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """One tool call in a scripted turn. ``id`` is minted when not given."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None
    server: bool = False
    """A server-side (host-run, observe-only) tool rather than a custom tool."""
    _arguments: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def arguments(self) -> str:
        """``input`` as compact JSON, as a chat endpoint sends a call's arguments: encoded
        when the call is first played and kept (a script is data, built once and often
        played by many runs; the input is read once, so change a step by making a new one)."""
        text = self._arguments
        if text is None:
            text = dumps_args(self.input)
            object.__setattr__(self, "_arguments", text)
        return text


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply:
    """One model turn: text, tool calls, usage and an optional raw stop reason override."""

    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    usage: tuple[int, int] | None = (10, 5)
    """(input tokens, output tokens); ``None`` reports no usage."""
    stop_reason: str | None = None
    """Override the host's natural stop reason (e.g. ``"length"``, ``"max_tokens"``)."""
    # The reply's Chat Completions parts, worked out when the reply is first played and
    # kept (testing._chat_render.render_completion): a script is data, played by many
    # runs, read once like a ToolCall's input (change a step by making a new one).
    _chat: Any = field(default=None, init=False, repr=False, compare=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class Fail:
    """The host reports an error for this turn (``session.error``, an exception frame...)."""

    message: str = "scripted failure"
    kind: str = "internal_error"


@dataclass(frozen=True, kw_only=True, slots=True)
class Grade:
    """An outcome evaluation (Claude): ``satisfied``, ``needs_revision`` or ``failed``."""

    result: str = "satisfied"
    explanation: str = ""
    text: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """What the model was sent for one step."""

    turn: int
    """0-based index of the step being answered."""
    tools: Sequence[ToolDefinition] = ()
    user_text: str | None = None
    """The user message this step answers, if it follows one."""
    tool_results: Sequence[ToolResult] = ()
    """The tool results this step answers, if it follows a tool turn."""
    messages: Sequence[Mapping[str, Any]] = ()
    """The host-native conversation as the host holds it (for detailed assertions)."""
    system: str | None = None
    model: str | None = None


Step = Reply | Fail | Grade | Callable[[ModelRequest], "Reply | Fail | Grade"]


_ModelRequestB = fast_builder(
    ModelRequest, ("turn", "tools", "user_text", "tool_results", "messages", "system", "model")
)


def make_model_request(  # noqa: PLR0917 (positional: one call per scripted turn)
    turn: int,
    tools: Sequence[ToolDefinition],
    user_text: str | None,
    tool_results: Sequence[ToolResult],
    messages: Sequence[Mapping[str, Any]],
    system: str | None,
    model: str | None,
) -> ModelRequest:
    """``ModelRequest(...)`` with every field given, faster (a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``; see
    :mod:`managedloop.results` on the fast constructors)."""
    request: Any = _ModelRequestB()
    request.turn = turn
    request.tools = tools
    request.user_text = user_text
    request.tool_results = tool_results
    request.messages = messages
    request.system = system
    request.model = model
    request.__class__ = ModelRequest
    return request  # type: ignore[no-any-return]


class ScriptExhaustedError(AssertionError):
    """The model was asked for more turns than the script has."""


def say(
    text: str, *, usage: tuple[int, int] | None = (10, 5), stop_reason: str | None = None
) -> Reply:
    """A turn that answers with ``text``."""
    return Reply(text=text, usage=usage, stop_reason=stop_reason)


def call(
    name: str,
    input: Mapping[str, Any] | None = None,
    *,
    id: str | None = None,
    text: str = "",
    server: bool = False,
    usage: tuple[int, int] | None = (10, 5),
) -> Reply:
    """A turn that calls one tool."""
    return Reply(
        text=text,
        tool_calls=[ToolCall(name=name, input=dict(input or {}), id=id, server=server)],
        usage=usage,
    )


def calls(*tool_calls: ToolCall | tuple[str, Mapping[str, Any]], text: str = "") -> Reply:
    """A turn that calls several tools at once: ``calls(("a", {...}), ("b", {...}))``."""
    out = [
        tc if isinstance(tc, ToolCall) else ToolCall(name=tc[0], input=dict(tc[1]))
        for tc in tool_calls
    ]
    return Reply(text=text, tool_calls=out)


def example_args(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments that satisfy a tool's JSON schema (required properties, simple values)."""
    props: Mapping[str, Any] = schema.get("properties", {})
    defs: Mapping[str, Any] = schema.get("$defs", {})
    required = schema.get("required", list(props))
    return {name: _example(props[name], defs) for name in required if name in props}


def _example(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> Any:
    if "$ref" in prop:  # the definition it names: an object, an enum, any schema
        return _example(defs.get(prop["$ref"].rsplit("/", 1)[-1], {"type": "object"}), defs)
    if "enum" in prop:
        return prop["enum"][0]
    if "const" in prop:
        return prop["const"]
    if "default" in prop:
        return prop["default"]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in prop:
            options = [p for p in prop[key] if p.get("type") != "null"] or prop[key]
            return _example(options[0], defs)
    kind = prop.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        return example_args({**prop, "$defs": defs})
    simple: dict[str, Any] = {
        "string": "example",
        "integer": 1,
        "number": 1.5,
        "boolean": True,
        "array": [],
        "null": None,
    }
    return simple.get(kind, "example")


class ScriptedAgent:
    """Plays a script, one step per model turn, and records every :class:`ModelRequest`.

    Thread-safe: emulators call it from their server thread while tests read ``requests``.
    """

    def __init__(self, script: Sequence[Step] | None = None) -> None:
        self.script: list[Step] | None = list(script) if script is not None else None
        # Records, or functions that build them (play()'s): a list append is atomic, so
        # playing takes no lock; ``requests`` builds the functions under the lock, looking
        # at every item (a test may clear or cut the list it was given).
        self._log: list[ModelRequest | Callable[[], ModelRequest]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    @property
    def requests(self) -> list[ModelRequest]:
        """What the model was sent, one record per step played, in order."""
        with self._lock:
            log = self._log
            for i, item in enumerate(log):
                if not isinstance(item, ModelRequest):
                    log[i] = item()
            return cast("list[ModelRequest]", log)  # every item is built now

    @requests.setter
    def requests(self, records: list[ModelRequest]) -> None:  # as when it was an attribute
        with self._lock:
            self._log = records  # type: ignore[assignment]

    # acquire/release rather than ``with``: half the cost, once or twice per model turn.
    def mint_id(self, prefix: str = "call_") -> str:
        lock = self._lock
        lock.acquire()
        try:
            n = next(self._ids)
        finally:
            lock.release()
        return prefix + str(n).zfill(4)  # f"{prefix}{n:04d}" for n >= 1, without a format spec

    def next_step(self, request: ModelRequest) -> Reply | Fail | Grade:
        self._log.append(request)
        if self.script is None:
            return self._default(request)
        if request.turn >= len(self.script):
            raise ScriptExhaustedError(
                f"the model was asked for turn {request.turn + 1} but the script has "
                f"{len(self.script)}"
            )
        step = self.script[request.turn]
        return step(request) if callable(step) else step

    def play(self, turn: int, record: Callable[[], ModelRequest]) -> Reply | Fail | Grade:
        """:meth:`next_step` for the request at step ``turn`` whose record ``record()``
        builds. A step that reads the request (a callable, or no script) gets it now;
        otherwise it is built when :attr:`requests` is read, so a model turn does not pay
        for a record no test reads (``record`` must build what the request held at the call,
        as :meth:`HistoryReader.read <managedloop.testing._chat_render.HistoryReader.read>`'s
        does)."""
        script = self.script
        if script is not None and turn < len(script):
            step = script[turn]
            if not callable(step):  # most steps: the record waits
                self._log.append(record)
                return step
        return self.next_step(record())  # the step reads it, or the script ran out

    @staticmethod
    def _default(request: ModelRequest) -> Reply:
        if request.turn == 0 and request.tools:
            return Reply(
                tool_calls=[
                    ToolCall(name=t.name, input=example_args(t.input_schema)) for t in request.tools
                ]
            )
        if request.tool_results:
            answers = "; ".join(r.text for r in request.tool_results)
            return Reply(text=f"Done. {answers}")
        return Reply(text=f"You said: {request.user_text}" if request.user_text else "Done.")


# One encoder (``json.dumps`` with options builds one per call), without the JSONEncoder
# wrapper's per-call Python frames (managedloop._json).
dumps_args: Callable[[Mapping[str, Any]], str] = encoder()
"""A tool call's arguments as compact JSON (``json.dumps`` with ``(",", ":")``): the
encoder itself, so a scripted call pays no wrapper frame."""
