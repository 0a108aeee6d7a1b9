"""Handlers: where the model's custom tool calls are served.

A handler is any object with ``handle_tool_call(name, input, info)`` (sync or async,
returning ``str`` or :class:`ToolResult`) and, optionally, ``handle_event(event, info)``
(sync or async; observes every raw event). A :class:`~managedloop.Toolset` is one.

Rules every call obeys (:func:`run_tool_calls` never raises for a tool's failure):

* input is validated against the tool's schema before the function runs; invalid input is
  an error result carrying the validation message and the function is not called;
* :class:`ToolError` becomes an error result with its message; any other exception an
  error result naming the exception; an unknown tool name an error result;
* a per-tool or session-wide timeout becomes an error result;
* the calls of one turn run concurrently, at most ``max_concurrent`` at a time, and the
  results come back in the model's order.

Handler *event* callbacks are observational and are not shielded: an exception in
``handle_event`` fails the session, because a broken observer should not go unnoticed.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import anyio
import pydantic
import pydantic_core

from managedloop import telemetry
from managedloop.errors import ToolError
from managedloop.results import SessionInfo, ToolResult, ToolUse

__all__ = ["Handler", "decode_tool_input", "error_payload", "is_error_payload", "run_tool_calls"]


@runtime_checkable
class Handler(Protocol):
    """Anything that serves tool calls. ``handle_event`` is optional."""

    def handle_tool_call(self, name: str, input: dict[str, Any], info: SessionInfo) -> Any:
        """Return ``str`` or :class:`ToolResult` (or an awaitable of one)."""


class _UnknownToolError(Exception):
    """A toolset was asked for a tool it does not have (becomes an error result)."""


_NO_TIMEOUT = contextlib.nullcontext()

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
    if isinstance(raw, Mapping):
        value: Any = raw
    elif isinstance(raw, str | bytes | bytearray):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
        if not text.strip():
            return {}, None
        if _too_deep(text):
            return {}, f"arguments are nested deeper than {MAX_INPUT_DEPTH} levels"
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as exc:
            return {}, f"arguments were not valid JSON: {exc}"
    elif raw is None:
        return {}, "arguments were null, not a JSON object"
    else:
        value = raw
    if not isinstance(value, Mapping):
        kind = "null" if value is None else type(value).__name__
        return {}, f"arguments must be a JSON object, got {kind}"
    if _too_deep(value):
        return {}, f"arguments are nested deeper than {MAX_INPUT_DEPTH} levels"
    return dict(value), None


def _too_deep(value: Any) -> bool:
    """Whether JSON text or a decoded value nests deeper than :data:`MAX_INPUT_DEPTH`."""
    if isinstance(value, str):
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


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError:
        return str(value)


def _validation_text(name: str, exc: pydantic.ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
    )
    return f"invalid input for tool {name!r}: {problems}"


async def _traced(
    handler: Any, use: ToolUse, info: SessionInfo, timeout: float | None, caller: Any
) -> ToolResult:
    meta = {"tool": use.name, "tool_use_id": use.id or "", "session_id": info.session_id}
    with telemetry.span("tool", meta, caller=caller) as extra:
        result = await _call(handler, use, info, timeout)
        extra["is_error"] = result.is_error
    return result


async def _call(
    handler: Any, use: ToolUse, info: SessionInfo, timeout: float | None, caller: Any = None
) -> ToolResult:
    """One call as a result; a tool's failure never escapes (see the module docstring).

    ``caller`` is unused: it keeps the signature of :func:`_traced`, so
    :func:`run_tool_calls` picks either one without a wrapper on the untraced hot path.
    """
    uid = use.id or ""
    if use.input_error is not None:  # unreadable arguments: answer, never run the tool
        return ToolResult(
            tool_use_id=uid,
            text=f"invalid input for tool {use.name!r}: {use.input_error}",
            is_error=True,
        )
    try:
        # No cancel scope without a timeout: entering one costs ~5 µs per call.
        with anyio.fail_after(timeout) if timeout is not None else _NO_TIMEOUT:
            value = handler.handle_tool_call(use.name, use.input, info)
            if inspect.isawaitable(value):
                value = await value
        if isinstance(value, ToolResult):
            return ToolResult(tool_use_id=uid, text=value.text, is_error=value.is_error)
        return ToolResult(tool_use_id=uid, text=_to_text(value))
    except ToolError as exc:
        return ToolResult(tool_use_id=uid, text=exc.message, is_error=True)
    except pydantic.ValidationError as exc:
        return ToolResult(tool_use_id=uid, text=_validation_text(use.name, exc), is_error=True)
    except _UnknownToolError as exc:
        return ToolResult(tool_use_id=uid, text=str(exc), is_error=True)
    except TimeoutError:
        return ToolResult(
            tool_use_id=uid, text=f"tool {use.name!r} timed out after {timeout}s", is_error=True
        )
    except Exception as exc:
        return ToolResult(
            tool_use_id=uid,
            text=f"tool {use.name!r} raised {type(exc).__name__}: {exc}",
            is_error=True,
        )


async def run_tool_calls(
    handler: Any,
    uses: Sequence[ToolUse],
    info: SessionInfo,
    *,
    max_concurrent: int = 8,
    timeout: float | None = None,
    caller: dict[str, Any] | None = None,
) -> list[ToolResult]:
    """Run one turn's calls, at most ``max_concurrent`` at a time; results in input order."""
    # The hot path has no span and no metadata to build when nothing listens.
    one = _traced if telemetry.span_enabled("tool") else _call
    if len(uses) == 1:  # the common case needs no task group
        return [await one(handler, uses[0], info, timeout, caller)]
    results: list[ToolResult | None] = [None] * len(uses)
    limiter = anyio.Semaphore(max_concurrent)

    async def worker(i: int, use: ToolUse) -> None:
        async with limiter:
            results[i] = await one(handler, use, info, timeout, caller)

    async with anyio.create_task_group() as tg:
        for i, use in enumerate(uses):
            tg.start_soon(worker, i, use)
    return [r for r in results if r is not None]


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
