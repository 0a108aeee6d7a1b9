"""One Local session: the client-held history, its history guards and the retry policy.

A ``turn()`` is one request/response step of the in-process loop: apply the input to the
history, make exactly **one** model call, append the answer, yield the synthesized raw
events, all in the ``local.*`` namespace, and end with the turn's :class:`TurnResult`,
built from the calls it has just decoded (nothing is re-parsed; the loop counts each turn
as one model call against ``max_turns``):

* ``{"type": "local.directive", "role": "corrective" | "final_turn", "text"}`` before the
  call that follows the directive;
* ``{"type": "local.duplicate_tool_call", "tool_call_id", "name", "input"}`` per duplicate
  call;
* ``{"type": "local.model_response", "message", "finish_reason", "usage"}`` per model call,
  its message carrying only the calls the loop must run (under the ids the loop knows).

Tool calls:

* arguments are decoded by :func:`managedloop.handler.decode_tool_input`: unreadable or
  ``null`` arguments become ``ToolUse.input_error`` (answered with an error, never run);
* a call from a truncated answer (``finish_reason`` ``length``: the token limit cut it)
  runs only if its arguments arrived as a complete JSON object (the closing brace came, so
  they are what the model wrote). Empty or unreadable arguments get the input error
  :data:`TRUNCATED_CALL` instead: ``""`` means "no arguments" only in a complete answer,
  and a cut one must never run a tool with its defaults;
* every call gets an identity unused so far in this session: the server's id, or, when
  the server repeated an id (twice in one answer, or again in a later turn) or gave none,
  a minted ``<id>~<n>``. Tool messages go back under the server's id (servers may check
  its format), in call order; a call without an id gets the minted one on the wire too.

Guards. These stay in the host, not in :mod:`managedloop.session`, because each one
*edits the client-held history* between the model's calls (a tool message answering a
repeat without running it, a corrective user message after a tool's results): only a host
that holds its history can do that, and the managed hosts hold theirs server side. The
turn budget is the loop's: the host acts only on the ``final_turn`` mark of its input.
Every guard is per request (a user message resets them, the terminal-tool re-prompt does
not):

* a duplicate call (same name and arguments earlier in the request; calls with an
  ``input_error`` never count) is answered here with a directive tool message and not
  surfaced. When every call of a response is a duplicate the turn ends
  ``requires_action`` with ``host_answered`` and the loop asks again with an empty
  :class:`ToolResults`: **a re-ask is a model call and a turn** (the reference ended with
  ``unresolved_requires_action``; an earlier version re-asked inside the same turn, which
  let ``max_turns=4`` make 5 calls);
* a tool that fails twice in a row gets a corrective user message;
* when tools are offered, the model call the loop marks ``final_turn`` (the last its
  ``max_turns`` allows) is preceded by a final-turn directive.

Retry: the one policy of :mod:`managedloop._retry` (a transport failure, HTTP 408, 429 or
>= 500, unless the body says the request was invalid; never a malformed answer) is retried
``max_retries`` times after the server's ``Retry-After`` (capped at ``max_retry_after``) or
a jittered backoff ``<= min(60 s, retry_backoff * 2**n)``. **Deliberate change**: the
reference never retried 429. Raw events are only yielded once a model call has succeeded,
so a retry never needs ``RESTART``; streamed text deltas of a failed attempt were delivered
(at-least-once).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio

from managedloop import _retry
from managedloop._json import encoder
from managedloop._log import fields
from managedloop.errors import (
    ProviderError,
    UnsupportedError,
)
from managedloop.handler import decode_tool_input, error_payload
from managedloop.hosts import (
    ConnectionBase,
    TextDelta,
    ToolInputDelta,
    ToolResults,
    TurnInput,
    TurnItem,
    UserMessage,
)
from managedloop.providers.local._types import (
    ChatFunction,
    ChatRequest,
    ChatResponse,
    History,
    coerce_response,
    text_of,
)
from managedloop.results import (
    RawEvent,
    Terminal,
    ToolResult,
    ToolUse,
    Usage,
    make_tool_use,
    make_turn_result,
    make_usage,
)

__all__ = [
    "DUPLICATE_DIRECTIVE",
    "LocalConnection",
    "RetryPolicy",
    "corrective_text",
    "duplicate_text",
    "final_turn_text",
    "is_transient",
]

logger = logging.getLogger("managedloop.local")

# Read once: on Python 3.11 an Enum class attribute is read through EnumType.__getattr__'s
# slow hook (~1k instructions per read), and every model turn reads one.
_REQUIRES_ACTION, _END_TURN, _TERMINATED = (
    Terminal.REQUIRES_ACTION,
    Terminal.END_TURN,
    Terminal.TERMINATED,
)

MODEL_RESPONSE = "local.model_response"
DUPLICATE = "local.duplicate_tool_call"
DIRECTIVE = "local.directive"


INTERRUPTED_CALL = "the session was interrupted before this call's result was sent"
ABANDONED_CALL = "no result was sent for this call: a new user message came first"
TRUNCATED_CALL = (
    "the answer was cut off (finish_reason=length) before this call's arguments were complete"
)


def duplicate_text(terminal_tool: str | None) -> str:
    """What a repeated call is answered with (naming the terminal tool only if there is one)."""
    head = (
        "You already called this tool with these exact arguments; the result is unchanged. "
        "Do NOT repeat it. If you have enough information, "
    )
    if terminal_tool:
        return head + f"call your terminal tool ({terminal_tool}) now."
    return head + "give your final answer now."


DUPLICATE_DIRECTIVE = duplicate_text(None)


def corrective_text(name: str, error: str) -> str:
    return (
        f"STOP — the {name} tool rejected your input again: {error}. You must change your "
        f"input to fix THIS specific error before calling {name} again (or call your "
        "terminal tool)."
    )


def final_turn_text(terminal_tool: str | None) -> str:
    head = "FINAL TURN: you are about to reach the maximum number of turns. "
    tail = " with the information you have already gathered. Do not call any other tool."
    if terminal_tool:
        return head + f"You MUST call your terminal tool ({terminal_tool}) now" + tail
    return head + "You MUST produce your final answer now" + tail


def is_transient(exc: BaseException) -> bool:
    """Whether a failed model call is retried: :func:`managedloop._retry.retryable`."""
    return _retry.retryable(exc)


Sleep = Callable[[float], Awaitable[None]]

MAX_BACKOFF = 60.0  # seconds; one backoff never waits longer (the Retry-After cap's default)


class RetryPolicy:
    """Local's retry settings: a :class:`managedloop._retry.Policy` and the sleep to use."""

    __slots__ = ("max_retries", "policy", "sleep")

    def __init__(
        self, *, max_retries: int, backoff: float, max_retry_after: float, sleep: Sleep
    ) -> None:
        self.max_retries = max_retries
        self.policy = _policy(max_retries, backoff, max_retry_after)
        self.sleep = sleep


@functools.lru_cache(maxsize=64, typed=True)
def _policy(max_retries: int, backoff: float, max_retry_after: float) -> _retry.Policy:
    """One frozen Policy per setting (its checks cost more than the rest of a Local's
    construction); a bad setting raises every time (lru_cache keeps no exception)."""
    return _retry.Policy(
        retries=max_retries, base=backoff, cap=MAX_BACKOFF, retry_after_cap=max_retry_after
    )


# Canonical arguments (sorted keys) so a reordered repeat still counts as a duplicate.
_canonical = encoder(sort_keys=True, default=str)


_Key = tuple[str, str | tuple[tuple[str, str], ...]]


def _key(name: str, arguments: dict[str, Any]) -> _Key:
    """Equal for two calls exactly when their names and canonical JSON arguments are equal.

    Arguments whose values are all strings (most calls) are keyed by their items, sorted,
    without encoding them: JSON keys are strings, and two such objects encode to the same
    canonical JSON exactly when their sorted items are equal. No other object can encode
    like one of them (a non-string value never encodes as a string), so the two kinds of key
    never need to meet. A tuple, not a frozenset: a tuple of strings is a third of the size
    and the garbage collector stops tracking it (a session keeps its keys per request).
    """
    for value in arguments.values():
        if type(value) is not str:
            return name, _canonical(arguments)
    return name, tuple(sorted(arguments.items()))


class LocalConnection(ConnectionBase):
    """A client-held conversation on one chat function.

    Interrupts (``interrupts_by_cancel``): the loop cancels the in-flight model call or
    tool calls, then :meth:`interrupted` answers every tool call of the history still
    open with an error tool message, so the history stays one a server accepts (every
    ``tool_call`` answered) and the session takes a follow-up message.
    """

    interrupts_by_cancel = True

    @property
    def model(self) -> str:
        """The model id every request of this conversation sends."""
        return self._model

    @property
    def gen_ai_provider(self) -> str:
        """The API the chat function speaks: ``anthropic`` for the Messages API of the
        ``anthropic:`` models, else ``openai`` (Chat Completions, a ``chat=`` function's
        contract too) unless the function names its own (a ``gen_ai_provider`` attribute)."""
        name = getattr(self._chat, "gen_ai_provider", None)
        return name if isinstance(name, str) and name else "openai"

    def __init__(
        self,
        *,
        chat: ChatFunction,
        model: str,
        history: History,
        resumed: bool,
        session_id: str,
        tools: Sequence[Mapping[str, Any]],
        tools_json: bytes | None,
        options: Mapping[str, Any],
        terminal_tool: str | None,
        stream: bool,
        retry: RetryPolicy,
        on_close: Callable[[], Awaitable[None]] | None = None,
        null_content: bool = False,
        tool_input_deltas: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__()
        self.session_id = session_id
        self.resumed = resumed
        self.history = history
        self._chat = chat
        self._model = model
        self._tools = tools
        self._tools_json = tools_json
        self._options = options
        self._terminal_tool = terminal_tool
        self._stream = stream
        self._retry = retry
        self._on_close = on_close
        self._null_content = null_content
        # the tools whose streamed input the loop reads (OpenRequest.tool_input_deltas):
        # only their pieces are yielded, and none when it is empty
        self._tool_inputs = tool_input_deltas
        self._closed = False
        self._plain: ChatRequest | None = None
        # per-request guard state
        self._seen: set[_Key] = set()
        self._errors: dict[str, int] = {}
        # per-session call identity: every call the loop sees gets an id unused so far in
        # this session; ``_wire`` maps a minted id back to the id the server sent
        self._used_ids: set[str] = set()
        self._wire: dict[str, Any] = {}
        self._minted = 0
        # calls of the last answer not answered in history
        self._open: Sequence[ToolUse] = ()
        if resumed:
            self.pending_tool_uses = self._resume(history)
            self._open = list(self.pending_tool_uses)

    # -- the Connection protocol -------------------------------------------------------

    async def turn(self, input: TurnInput) -> AsyncIterator[TurnItem]:
        events: list[RawEvent]  # this turn's raw events, for its TurnResult
        if isinstance(input, ToolResults):  # most turns
            events = self._apply_results(input)
            for event in events:
                yield event
        elif isinstance(input, UserMessage):
            events = []
            if not input.reprompt:  # a new request; a re-prompt stays inside this one
                self._reset_guards()
            if self._open:  # calls left unanswered (parked on an approval): never dangling
                self._answer_open(ABANDONED_CALL)
            self.history.append({"role": "user", "content": input.text})
        else:
            raise UnsupportedError(
                f"the local host takes user messages and tool results, not {type(input).__name__}"
            )
        # Exactly one model call per turn: the loop counts turns against max_turns.
        if self._tools and input.final_turn:
            text = final_turn_text(self._terminal_tool)
            self.history.append({"role": "user", "content": text})
            directive = {"type": DIRECTIVE, "role": "final_turn", "text": text}
            events.append(directive)
            yield directive
        if self._stream:
            box: list[ChatResponse] = []
            async for delta in self._call_streaming(box):
                yield delta
            response = box[0]
        else:
            # One model call, retried on transient failures: a plain await here, not a
            # helper coroutine (each suspended frame is one more object per session in
            # flight for the garbage collector to walk; bench/README.md).
            attempts: _retry.Attempts | None = None  # made on the first failure only
            while True:
                try:
                    answer = await self._chat(self._plain or self._plain_request())
                    # coerce_response's common case inline: a chat function's ChatResponse
                    response = answer if type(answer) is ChatResponse else coerce_response(answer)
                    break
                except ProviderError as exc:
                    if attempts is None:
                        attempts = self._attempts()
                    await attempts.failed(exc)
        message = _assistant_message(response.message, self._null_content)
        uses: list[ToolUse] = []
        fresh: list[dict[str, Any]] = []
        duplicates: list[RawEvent] = []  # each is answered in history after the message
        truncated = response.finish_reason == "length"
        renamed = False  # a call runs under a minted id (the event shows that id)
        seen = self._seen
        for call in message.get("tool_calls", ()):
            fn = call["function"]
            name: str = fn["name"]  # a str: _assistant_message made it one
            arguments, error = decode_tool_input(fn["arguments"])
            if truncated and (error is not None or not fn["arguments"].strip()):
                error = TRUNCATED_CALL  # "" is "no arguments" only in a complete answer
            wire_id = call["id"]
            use_id: str | None = None
            if not wire_id:  # the server gave none: the minted id goes on the wire too
                call["id"] = wire_id = use_id = self._mint(None)
            key = _key(name, arguments) if error is None else None
            if key is not None and key in seen:
                # Answered here. A malformed call is never a "duplicate": each one is
                # answered with its own error and the model may try again.
                duplicates.append(
                    {"type": DUPLICATE, "tool_call_id": wire_id, "name": name, "input": arguments}
                )
                continue
            if key is not None:
                seen.add(key)
            if use_id is None:
                if wire_id not in self._used_ids:  # _identity's common case, inline
                    self._used_ids.add(wire_id)
                    use_id = wire_id
                else:
                    use_id = self._identity(wire_id)
            if use_id == wire_id:
                fresh.append(call)
            else:
                fresh.append({**call, "id": use_id})
                renamed = True
            uses.append(make_tool_use(name, use_id, arguments, error))
        self.history.append(message)
        for event in duplicates:
            self.history.append(
                {"role": "tool", "tool_call_id": event["tool_call_id"], "content": self._duplicate}
            )
        self._open = uses  # this turn's own list: nothing changes it, so no copy
        if duplicates:  # once per turn, not per event: a guard stepped in
            logger.info(
                "session %s: %d repeated tool call(s) answered without running them",
                self.session_id,
                len(duplicates),
                extra=fields(
                    "guard",
                    host="local",
                    guard="duplicate_call",
                    session_id=self.session_id,
                    count=len(duplicates),
                ),
            )
        for event in duplicates:
            yield event
        events.extend(duplicates)
        shown = dict(message)  # the event shows only the calls the loop must run
        if not fresh:
            shown.pop("tool_calls", None)
        elif duplicates or renamed:
            shown["tool_calls"] = fresh
        # else every call runs under the server's id: the message's own list of the same
        # call objects, not a second list per turn
        usage = dict(response.usage) if response.usage is not None else None
        answer = {
            "type": MODEL_RESPONSE,
            "message": shown,
            "finish_reason": response.finish_reason,
            "usage": usage,
            "duplicates": len(duplicates),
        }
        events.append(answer)
        yield answer
        content = shown.get("content")
        text = content if type(content) is str else text_of(content)  # text_of's str case
        if text and not self._stream:  # streamed text already went out chunk by chunk
            yield TextDelta(text)
        finish_reason = response.finish_reason
        answered = bool(duplicates) and not uses
        if uses or answered or finish_reason == "tool_calls":
            terminal = _REQUIRES_ACTION
        elif finish_reason == "stop":
            terminal = _END_TURN
        else:
            terminal = _TERMINATED
        yield make_turn_result(terminal, finish_reason, text, uses, _usage(usage), events, answered)

    def transcript(self) -> list[dict[str, Any]]:
        return list(self.history)

    def interrupted(self) -> None:
        """Answer each tool call still open in the history (the loop cancelled them)."""
        self._answer_open(INTERRUPTED_CALL)

    def _answer_open(self, text: str) -> None:
        open_calls, self._open = self._open, ()
        for use in open_calls:
            wire_id = self._wire.get(use.id or "", use.id)
            content = error_payload(text)
            self.history.append({"role": "tool", "tool_call_id": wire_id, "content": content})

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._on_close is not None:
            await self._on_close()

    # -- internals ---------------------------------------------------------------------

    def _reset_guards(self) -> None:
        self._seen = set()
        self._errors = {}

    def _apply_results(self, input: ToolResults) -> list[RawEvent]:
        self._open = ()
        by_id: dict[str, ToolResult] = {}
        for r in input.results:  # a loop, not a comprehension: no extra frame per turn
            by_id[r.tool_use_id] = r
        failed: list[tuple[str, str]] = []
        for use in input.tool_uses:
            result = by_id.get(use.id or "")
            if result is None:
                raise ProviderError(
                    f"no tool result for tool use {use.id!r} ({use.name})",
                    code="missing_tool_result",
                    tool_use_id=use.id,
                )
            content = error_payload(result.text) if result.is_error else result.text
            wire_id = self._wire.get(use.id or "", use.id)
            self.history.append({"role": "tool", "tool_call_id": wire_id, "content": content})
            if result.is_error:
                self._errors[use.name] = self._errors.get(use.name, 0) + 1
                failed.append((use.name, result.text))
            else:
                self._errors[use.name] = 0
        events: list[RawEvent] = []
        for name, error in failed:
            if self._errors.get(name, 0) >= 2:
                text = corrective_text(name, error)
                self.history.append({"role": "user", "content": text})
                events.append({"type": DIRECTIVE, "role": "corrective", "text": text})
        return events

    @property
    def _duplicate(self) -> str:
        return json.dumps(
            {"duplicate": True, "message": duplicate_text(self._terminal_tool)},
            ensure_ascii=False,
        )

    def _mint(self, wire_id: Any) -> str:
        """A call id unused in this session (kept in ``_used_ids``)."""
        base = wire_id if isinstance(wire_id, str) and wire_id else "call"
        while True:
            self._minted += 1
            minted = f"{base}~{self._minted}"
            if minted not in self._used_ids:
                self._used_ids.add(minted)
                return minted

    def _identity(self, wire_id: Any) -> str:
        """The id the loop knows a call by: the server's, unless this session already
        used it (twice in one answer, or again in a later turn), then a fresh one that maps
        back to the server's id in the tool message."""
        if isinstance(wire_id, str) and wire_id and wire_id not in self._used_ids:
            self._used_ids.add(wire_id)
            return wire_id
        minted = self._mint(wire_id)
        if minted != wire_id:
            self._wire[minted] = wire_id
        return minted

    def _resume(self, history: Sequence[Mapping[str, Any]]) -> list[ToolUse]:
        """Mark every call id in a resumed history as used; the last assistant message's
        unanswered calls are the pending tool uses."""
        last: Mapping[str, Any] | None = None
        answered: Counter[Any] = Counter()
        for message in history:
            role = message.get("role")
            if role == "assistant":
                last, answered = message, Counter()
                for call in message.get("tool_calls") or ():
                    if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                        self._used_ids.add(call["id"])
            elif role == "tool":
                answered[message.get("tool_call_id")] += 1
            else:
                last = None
        if last is None:
            return []
        pending: list[ToolUse] = []
        seen: set[Any] = set()
        for call in last.get("tool_calls") or ():
            if not isinstance(call, Mapping):
                continue
            wire_id = call.get("id")
            if answered[wire_id] > 0:
                answered[wire_id] -= 1
                continue
            use = _tool_use(call)
            if wire_id in seen or not wire_id:  # the same id twice: give this one its own
                minted = self._mint(wire_id)
                self._wire[minted] = wire_id
                use = dataclasses.replace(use, id=minted)
            seen.add(wire_id)
            pending.append(use)
        return pending

    def _request(
        self,
        on_delta: Callable[[str], None] | None,
        on_tool_delta: Callable[[ToolInputDelta], None] | None = None,
    ) -> ChatRequest:
        return ChatRequest(
            model=self._model,
            messages=self.history,
            tools=self._tools,
            options=self._options,
            on_delta=on_delta,
            on_tool_delta=on_tool_delta,
            tools_json=self._tools_json,
        )

    def _plain_request(self) -> ChatRequest:
        """The non-streamed request, built once: every field is the same object each call
        (``messages`` is the history itself, which grows in place)."""
        request = self._plain
        if request is None:
            request = self._plain = self._request(None)
        return request

    async def _call_streaming(
        self, box: list[ChatResponse]
    ) -> AsyncIterator[TextDelta | ToolInputDelta]:
        """One streamed model call, retried on transient failures; the response lands in
        ``box``. Deltas of a failed attempt were already delivered (at-least-once); a
        retried attempt's tool-input deltas come under new ids (``<id>~<n>``), so the loop
        reads each call's input from its first piece again."""
        attempts = self._attempts()
        retried = 0
        while True:
            try:
                async for delta in self._streamed(box):
                    if retried and type(delta) is ToolInputDelta:
                        yield ToolInputDelta(
                            f"{delta.id}~{retried}", delta.name, delta.partial_json
                        )
                    else:
                        yield delta
                return
            except ProviderError as exc:
                await attempts.failed(exc)
                retried += 1

    def _attempts(self) -> _retry.Attempts:
        """One model call's retries (``failed`` re-raises unless retried, else waits)."""
        retry = self._retry

        def log(exc: BaseException, n: int, delay: float) -> None:
            context = getattr(exc, "context", {})
            logger.warning(
                "local chat call failed (%s, code=%s, status=%s, cause=%s); retry %d/%d in %.3gs",
                type(exc).__name__,
                getattr(exc, "code", None),
                context.get("status"),
                context.get("cause"),
                n,
                retry.max_retries,
                delay,
                extra=fields(
                    "retry",
                    host="local",
                    operation="chat",
                    session_id=self.session_id,
                    attempt=n,
                    max_retries=retry.max_retries,
                    wait_s=delay,
                    error_type=type(exc).__name__,
                    code=getattr(exc, "code", None),
                    status=context.get("status"),
                    cause=context.get("cause"),
                ),
            )

        return _retry.Attempts(
            retry.policy, sleep=retry.sleep, on_retry=log, what="local chat call"
        )

    async def _streamed(self, box: list[ChatResponse]) -> AsyncIterator[TextDelta | ToolInputDelta]:
        # The chat function pushes chunks (text, and tool-call argument pieces) through
        # callbacks; a queue turns them into this generator's yields while the call runs
        # as its own task.
        queue: asyncio.Queue[str | ToolInputDelta | None] = asyncio.Queue()
        put = queue.put_nowait
        wanted = self._tool_inputs
        on_tool_delta: Callable[[ToolInputDelta], None] | None = None
        if wanted:

            def on_tool_delta(delta: ToolInputDelta) -> None:
                if delta.name in wanted:
                    put(delta)

        task = asyncio.ensure_future(self._chat(self._request(put, on_tool_delta)))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (chunk := await queue.get()) is not None:
                yield TextDelta(chunk) if isinstance(chunk, str) else chunk
            box.append(coerce_response(task.result()))
        finally:
            if not task.done():
                task.cancel()
                with anyio.CancelScope(shield=True):
                    await asyncio.wait({task})


def _assistant_message(raw: Mapping[str, Any], null_content: bool = False) -> dict[str, Any]:
    """The neutral assistant message kept in history (unknown vendor fields dropped).

    No content is kept as ``""``, not ``null``: the history is sent back verbatim, and
    llama.cpp's server answers HTTP 500 to an assistant message whose content is ``null``
    (OpenAI takes either). ``null_content`` keeps ``null`` on tool-call messages for a
    server known to want it.
    """
    calls = raw.get("tool_calls")
    neutral: list[dict[str, Any]] = []
    if isinstance(calls, list):
        for c in calls:  # a loop, not a comprehension: no extra frame per turn
            if type(c) is dict or isinstance(c, Mapping):
                neutral.append(_call(c))
    content = raw.get("content")
    if content is None and not (null_content and neutral):
        content = ""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if neutral:
        message["tool_calls"] = neutral
    return message


def _call(raw: Mapping[str, Any]) -> dict[str, Any]:
    """One tool call in neutral form. A call without a readable name keeps ``""`` (the
    handler answers it as an unknown tool); a non-string id counts as none."""
    fn = raw.get("function")
    fn = fn if type(fn) is dict or isinstance(fn, Mapping) else {}
    name, call_id = fn.get("name"), raw.get("id")
    # no arguments key: no arguments (""); an explicit null is an input error
    arguments = fn.get("arguments", "")
    return {
        "id": call_id if isinstance(call_id, str) and call_id else None,
        "type": "function",
        "function": {
            "name": name if isinstance(name, str) else "",
            "arguments": arguments if isinstance(arguments, str) else _arguments_text(arguments),
        },
    }


def _arguments_text(arguments: Any) -> str:
    """Arguments as JSON text, as on the wire; a server that sent a decoded object gets it
    encoded, and ``null`` stays ``"null"`` (an input error, never ``{}``)."""
    if isinstance(arguments, str):
        return arguments
    try:
        return json.dumps(arguments, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return "null"  # unencodable (circular, or nested beyond recursion): unreadable


def _usage(raw: Any) -> Usage | None:
    if type(raw) is not dict and not isinstance(raw, Mapping):  # a dict skips the ABC check
        return None
    prompt = raw.get("prompt_tokens")
    if type(prompt) is not int and (not isinstance(prompt, int) or isinstance(prompt, bool)):
        return None  # null or missing prompt_tokens: this call reported no usage
    completion = raw.get("completion_tokens")
    completion = completion if isinstance(completion, int) else 0
    # ``raw`` is the turn's own copy (the model_response event's ``usage``): shared, not
    # copied again (a copy per turn showed in the memory per session).
    return make_usage(prompt, completion, [raw])


def _tool_use(call: Mapping[str, Any]) -> ToolUse:
    """A tool call read back from a stored message (a replayed event or a resumed history)."""
    fn = call.get("function") or {}
    arguments, error = decode_tool_input(fn.get("arguments"))
    return ToolUse(
        id=call.get("id"), name=str(fn.get("name", "")), input=arguments, input_error=error
    )
