"""Handlers: where the model's custom tool calls are served.

A handler is any object with ``handle_tool_call(name, input, info)`` (sync or async,
returning ``str`` or :class:`ToolResult`) and, optionally, ``handle_event(event, info)``
(sync or async; observes every raw event) and ``needs_approval(name, input, info)`` (sync
or async; a reason string or ``True`` holds the call for a decision instead of running
it, see :mod:`managedloop.session.approvals`). A :class:`~managedloop.Toolset` is one (its
``needs_approval`` reads each tool's ``requires_approval``). A handler may also have
``lifespan()``, an async context manager that a session enters when it opens and leaves
when it ends (on every path), yielding the handler that serves that session: a Toolset
opens its MCP servers there (:meth:`~managedloop.Toolset.lifespan`), so a handler that
wraps a Toolset should forward it.

Rules every call obeys (:func:`run_tool_calls` never raises for a tool's failure):

* input is validated against the tool's schema before the function runs; invalid input is
  an error result carrying the validation message and the function is not called;
* :class:`ToolError` becomes an error result with its message; any other exception an
  error result naming the exception type and its message (``"... raised ValueError:
  bad value"``); an exception whose ``__str__`` itself raises is named with "(its message
  could not be read)"; an unknown tool name is an error result;
* a tool's own ``asyncio.CancelledError`` (raised by the tool, not a cancellation of the
  session) is an error result like any other exception, so the other calls of the turn
  still get their results; a *genuine* cancellation (a ``run`` timeout, the caller
  cancelling its task, a live session closing) is never swallowed;
* ``KeyboardInterrupt``, ``SystemExit`` and any other non-cancellation ``BaseException``
  raised by a tool are not results: they propagate to the caller as themselves (never
  wrapped in a ``BaseExceptionGroup``), after the turn's other calls are cancelled;
* a result's text is always encodable: a value that is not a ``str`` becomes JSON (else its
  ``str()``), and lone surrogates (``"\\ud800"``, which no wire can encode as UTF-8) become
  U+FFFD; a paired surrogate sequence becomes the character it spells;
* the calls of one turn run concurrently, at most ``max_concurrent`` at a time, and the
  results come back in the model's order.

Timeouts (the session's ``tool_timeout``, a tool's ``@tool(timeout=...)``, and a ``run``
timeout around the whole request) end a call *on time*, whatever the tool does:

* an async tool is cancelled;
* a sync tool runs in a worker thread (on asyncio :mod:`managedloop._threads`, at most 40
  calls at once per event loop; elsewhere ``anyio.to_thread.run_sync`` with
  ``abandon_on_cancel=True``): on a timeout the call is answered at once and the thread is
  **abandoned, never awaited** -- Python cannot stop a thread, so the function keeps running
  until it returns and its late return value is discarded. An abandoned call gives its
  slot back at once (so a stuck tool cannot starve later tool calls), but its thread still
  runs outside the count, and the worker threads are not daemons: a function that never
  returns keeps the interpreter from exiting normally. Tools that can block forever should
  bound their own I/O; one may poll ``anyio.from_thread.check_cancelled()``;
* the timed-out call's result is ``"tool 'name' timed out after Ns"``, naming the bound
  that fired (the tool's own or the session's);
* a sync function on the event loop (an ``inline=True`` tool, or a handler whose own
  ``handle_tool_call`` is sync) cannot be interrupted by anything: it blocks the loop until
  it returns, so keep those fast.

Handler *event* callbacks are observational and are not shielded: an exception in
``handle_event`` fails the session, because a broken observer should not go unnoticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import math
import sys
import types
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio

from managedloop import telemetry
from managedloop._tool_failures import ToolTimeoutError, UnknownToolError
from managedloop.errors import ToolError
from managedloop.results import SessionInfo, ToolResult, ToolUse, make_tool_result

if TYPE_CHECKING:
    import pydantic

__all__ = [
    "Handler",
    "decode_tool_input",
    "error_payload",
    "is_error_payload",
    "run_tool_calls",
    "safe_text",
    "too_deep",
]


@runtime_checkable
class Handler(Protocol):
    """Anything that serves tool calls. ``handle_event`` is optional."""

    def handle_tool_call(self, name: str, input: dict[str, Any], info: SessionInfo) -> Any:
        """Return ``str`` or :class:`ToolResult` (or an awaitable of one)."""


# Deeper JSON than this is refused before it reaches json.loads (a 100k-deep array raises
# RecursionError there) or pydantic; no real tool schema nests anywhere near this far.
MAX_INPUT_DEPTH = 64


def decode_tool_input(raw: Any) -> tuple[dict[str, Any], str | None]:
    """A model's raw tool arguments as ``(input, error)``; the one decoder every host uses.

    ``raw`` is a JSON text (Chat Completions, Converse fragments) or an already-decoded
    mapping (Claude, Anthropic Messages). An empty string means "no arguments" (``{}``, no
    error). Anything else that is not a JSON object — invalid JSON, ``null``, a list, a
    number, nesting deeper than :data:`MAX_INPUT_DEPTH` — is ``({}, reason)``: the call is
    answered with an error result and the tool does not run (it must never run with its
    defaults because the arguments were unreadable).
    """
    # (A tuple, not ``str | bytes``: a union in an expression is built on every call.)
    if type(raw) is not str and isinstance(raw, Mapping):  # text first: no ABC check
        value: Any = raw
    elif type(raw) is str or isinstance(raw, (str, bytes, bytearray)):
        text = raw.decode("utf-8", "replace") if isinstance(raw, (bytes, bytearray)) else raw
        if not text.strip():
            return {}, None
        # Fewer brackets than the limit: neither the text nor the value it decodes to can
        # nest too deep, so both walks are skipped (the common case: a flat object). A
        # text shorter than the limit has fewer brackets than that without counting.
        shallow = len(text) < MAX_INPUT_DEPTH or text.count("{") + text.count("[") < MAX_INPUT_DEPTH
        if not shallow and too_deep(text):
            return {}, f"arguments are nested deeper than {MAX_INPUT_DEPTH} levels"
        try:
            value = _loads(text)
        except (ValueError, RecursionError) as exc:
            return {}, f"arguments were not valid JSON: {exc}"
        if shallow and type(value) is dict:
            return value, None  # freshly decoded: no copy needed
    elif raw is None:
        return {}, "arguments were null, not a JSON object"
    else:
        value = raw
    if not isinstance(value, Mapping):
        kind = "null" if value is None else type(value).__name__
        return {}, f"arguments must be a JSON object, got {kind}"
    if too_deep(value):
        return {}, f"arguments are nested deeper than {MAX_INPUT_DEPTH} levels"
    return dict(value), None


FLAT_TYPES = frozenset({str, int, float, bool, type(None)})

# json.loads's own scanner and whitespace pattern (attributes typeshed does not declare).
_scan: Any = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009
_space: Any = getattr(json.decoder, "WHITESPACE").match  # noqa: B009
_WHITESPACE = frozenset(" \t\n\r")  # what that pattern matches


def _loads(text: str) -> Any:
    """``json.loads(text)`` for a ``str``, the same value or the same error, without the
    three Python frames (``loads``, ``decode``, ``raw_decode``) around the C scanner."""
    first = text[:1]
    if first == "\ufeff":
        return json.loads(text)  # json's own BOM error
    # The whitespace pattern runs only where there is whitespace to skip: a compact text
    # (most arguments) starts with a bracket and ends where the value does.
    end = _space(text, 0).end() if first in _WHITESPACE else 0
    try:
        value, end = _scan(text, end)
    except StopIteration as err:
        raise json.JSONDecodeError("Expecting value", text, err.value) from None
    if end != len(text):
        end = _space(text, end).end()
        if end != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
    return value


def too_deep(value: Any) -> bool:
    """Whether JSON text or a decoded value nests deeper than :data:`MAX_INPUT_DEPTH`."""
    if isinstance(value, str):
        if value.count("{") + value.count("[") <= MAX_INPUT_DEPTH:
            return False  # depth never exceeds the number of opening brackets
        depth = 0
        in_string = escaped = False
        for ch in value:  # a bracket count that skips string contents: O(n), no recursion
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch in "[{":
                depth += 1
                if depth > MAX_INPUT_DEPTH:
                    return True
            elif ch in "]}":
                depth -= 1
        return False
    if type(value) is dict:  # most tool inputs: a flat object of scalars, no walk
        for v in value.values():
            if type(v) not in FLAT_TYPES:
                break
        else:
            return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:  # iterative, so a deep mapping cannot exhaust the interpreter stack
        item, depth = stack.pop()
        if depth > MAX_INPUT_DEPTH:
            return True
        if isinstance(item, Mapping):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)
    return False


def safe_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so it encodes as UTF-8.

    A surrogate *pair* written as two code points (``"\\ud83d\\ude00"``) becomes the
    character it spells. Plain text is returned as is (one ``isascii``/``encode`` check).
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Through UTF-16 with surrogatepass: pairs join up, lone halves become U+FFFD.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


_Coroutine = types.CoroutineType  # what an async handle_tool_call returns


def _result(uid: str, text: str, *, is_error: bool = False) -> ToolResult:
    return make_tool_result(uid, safe_text(text), is_error)


def _to_text(value: Any) -> str:
    """A tool's return value as text: ``str`` as is, anything else as JSON, else ``str()``."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    # Not JSON-able for pydantic (a lone surrogate, a cycle, an odd type): json copes with
    # lone surrogates (safe_text replaces them later); str() is the last resort.
    with contextlib.suppress(Exception):
        import pydantic_core  # off `import managedloop`'s path; a str result never needs it

        return pydantic_core.to_json(value).decode()
    with contextlib.suppress(Exception):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)  # may raise: the caller turns that into an error result


def _describe(exc: BaseException) -> str:
    """``"TypeName: message"``, even when the exception's ``__str__`` raises."""
    try:
        message = str(exc)
    except Exception:
        return f"{type(exc).__name__} (its message could not be read)"
    return f"{type(exc).__name__}: {message}"


def _validation_error() -> type[pydantic.ValidationError] | tuple[()]:
    """What ``except`` catches as a validation failure: pydantic's ``ValidationError`` once
    pydantic is loaded, else nothing (an empty tuple matches no exception). Only pydantic
    raises one, so without pydantic loaded there is none to catch; pydantic itself loads on
    the first ``@tool``, not with ``import managedloop``. ``except`` evaluates this only when
    an exception reaches it, never on a call that succeeds."""
    core = sys.modules.get("pydantic_core")
    return () if core is None else core.ValidationError


def _validation_text(name: str, exc: pydantic.ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
    )
    return f"invalid input for tool {name!r}: {problems}"


def _really_cancelled() -> bool:
    """Whether the running task is being cancelled, as opposed to a tool having raised
    ``CancelledError`` itself: an enclosing cancel scope was cancelled (a timeout, a task
    group winding down) or, on asyncio, someone called ``task.cancel()``."""
    if anyio.current_effective_deadline() == -math.inf:
        return True
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not running on asyncio
        return False
    return task is not None and task.cancelling() > 0


def _tool_stop(result: ToolResult) -> dict[str, Any]:
    """A tool call's stop metadata (``telemetry.TABLE``), for the listeners of its span (a
    span hook reads the ToolResult)."""
    if telemetry.capture_content():
        return {"is_error": result.is_error, "result": result.text}
    return {"is_error": result.is_error}


async def _invoke(handler: Any, use: ToolUse, info: SessionInfo) -> Any:
    value = handler.handle_tool_call(use.name, use.input, info)
    if inspect.isawaitable(value):
        value = await value
    return value


async def run_one_call(
    handler: Any,
    use: ToolUse,
    info: SessionInfo,
    timeout: float | None,
    caller: dict[str, Any] | None = None,
) -> ToolResult:
    """``run_tool_calls`` for one use: its one result (no list: the loop's most common tool
    turn has one call). A tool's failure never escapes (see the module docstring).

    With a ``tool`` span listened to, the call is in one (``caller``: its tags), opened and
    closed here rather than in a coroutine around this one: a coroutine layer costs more
    than all of a span hook's start (bench/README.md, the bridge's cost).
    """
    traced = telemetry.span_enabled("tool")
    uid = use.id or ""
    if traced:
        meta: dict[str, Any] = {"tool": use.name, "tool_use_id": uid, "session_id": info.session_id}
        if telemetry.capture_content():
            meta["arguments"] = use.input
        opened = telemetry.open_span("tool", meta, caller)  # two calls: no context manager
    try:  # one exit for every result, where the span closes
        if use.input_error is not None:  # unreadable arguments: answer, never run the tool
            result = _result(
                uid, f"invalid input for tool {use.name!r}: {use.input_error}", is_error=True
            )
        else:
            try:
                if timeout is None:  # no cancel scope without a timeout: an untimed call skips it
                    value = handler.handle_tool_call(use.name, use.input, info)  # _invoke, inlined
                    if type(value) is _Coroutine or inspect.isawaitable(value):
                        value = await value
                else:
                    with anyio.move_on_after(timeout) as scope:
                        value = await _invoke(handler, use, info)
                    if scope.cancelled_caught:
                        raise ToolTimeoutError(use.name, timeout)
                if type(value) is str and value.isascii():  # most: _result(_to_text(..)) as is
                    result = make_tool_result(uid, value, False)
                elif isinstance(value, ToolResult):
                    result = _result(uid, _to_text(value.text), is_error=value.is_error is True)
                else:
                    result = _result(uid, _to_text(value))
            except ToolError as exc:
                try:
                    message = exc.message
                except Exception:
                    message = "ToolError (its message could not be read)"
                result = _result(uid, message, is_error=True)
            except _validation_error() as exc:
                result = _result(uid, _validation_text(use.name, exc), is_error=True)
            except (UnknownToolError, ToolTimeoutError) as exc:
                result = _result(uid, str(exc), is_error=True)
            except Exception as exc:
                result = _result(uid, f"tool {use.name!r} raised {_describe(exc)}", is_error=True)
            except asyncio.CancelledError as exc:
                if _really_cancelled():
                    raise
                result = _result(uid, f"tool {use.name!r} raised {_describe(exc)}", is_error=True)
    except BaseException as exc:
        if traced:
            telemetry.close_span(opened, None, exc)
        raise
    if traced:
        telemetry.close_span(opened, result, None, _tool_stop)  # _tool_stop: for listeners
    return result


async def run_tool_calls(
    handler: Any,
    uses: Sequence[ToolUse],
    info: SessionInfo,
    *,
    max_concurrent: int = 8,
    timeout: float | None = None,
    caller: dict[str, Any] | None = None,
) -> list[ToolResult]:
    """Run one turn's calls, at most ``max_concurrent`` at a time; results in input order.

    Returns exactly one result per use. A ``BaseException`` that is not a cancellation
    (``KeyboardInterrupt``, ``SystemExit``...) cancels the turn's other calls and is raised
    as itself, never inside a ``BaseExceptionGroup``.
    """
    if len(uses) == 1:  # the common case needs no task group
        return [await run_one_call(handler, uses[0], info, timeout, caller)]
    results: list[ToolResult | None] = [None] * len(uses)
    fatal: list[BaseException] = []
    limiter = anyio.Semaphore(max_concurrent)

    async def worker(i: int, use: ToolUse) -> None:
        try:
            async with limiter:
                results[i] = await run_one_call(handler, use, info, timeout, caller)
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as exc:
            # Kept out of the task group: asyncio would otherwise stop its loop with it
            # from inside a child task and the caller would see a BaseExceptionGroup.
            fatal.append(exc)
            tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        for i, use in enumerate(uses):
            tg.start_soon(worker, i, use)
    if fatal:
        raise fatal[0]
    done = [r for r in results if r is not None]
    assert len(done) == len(uses)  # every worker stored a result or recorded a failure
    return done


def error_payload(text: str) -> str:
    """The JSON an error result becomes where a wire has no ``is_error`` flag."""
    return json.dumps({"error": text, "isError": True})


def is_error_payload(text: str) -> bool:
    """Whether ``text`` is an :func:`error_payload` (a JSON object with ``"isError": true``)."""
    if not text.lstrip().startswith("{"):
        return False  # most results are plain text: skip the JSON parse
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and value.get("isError") is True
