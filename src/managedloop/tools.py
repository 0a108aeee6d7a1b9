"""Tools: ``@tool``, :class:`Tool`, :class:`Toolset` and the neutral :class:`ToolDefinition`.

A tool's JSON schema is derived once, at definition time, from the function's type hints,
defaults and docstring (pydantic does the derivation and, at call time, the validation).
A definition that cannot work fails at once with :class:`ToolDefinitionError`: a parameter
type with no JSON schema, ``*args``/``**kwargs``, or two tools with one name in a toolset.

What a host sees of a tool is only its :class:`ToolDefinition` (name, description, input
schema); the function itself always runs in this process.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar, get_type_hints, overload

import anyio
import anyio.to_thread
import pydantic
import pydantic.json_schema

from managedloop._tool_failures import ToolTimeoutError, UnknownToolError
from managedloop.errors import ToolDefinitionError
from managedloop.results import SessionInfo

__all__ = ["Tool", "ToolDefinition", "Toolset", "tool"]

P = ParamSpec("P")
R = TypeVar("R")

ApprovalRule = bool | Callable[[dict[str, Any]], bool | str | None]
"""``@tool(requires_approval=...)``: always, never, or a predicate on the call's input
(a string it returns is the reason shown with the pending decision)."""

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolDefinition:
    """What a host sees of a tool: name, description and JSON input schema."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.fullmatch(self.name):
            raise ToolDefinitionError(
                f"tool name {self.name!r} must be 1-128 letters, digits, '_' or '-'",
                tool=self.name,
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


class Tool(Generic[P, R]):
    """A Python function exposed to the model as a custom tool.

    Calling the ``Tool`` calls the function unchanged, so decorated functions stay testable.
    """

    __slots__ = (
        "_info_param",
        "_model",
        "_model_params",
        "definition",
        "function",
        "inline",
        "is_async",
        "requires_approval",
        "timeout",
    )

    def __init__(
        self,
        function: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        inline: bool = False,
        requires_approval: ApprovalRule = False,
    ) -> None:
        if not callable(function):
            raise ToolDefinitionError(f"{function!r} is not callable")
        if not isinstance(requires_approval, bool) and not callable(requires_approval):
            raise ToolDefinitionError(
                "requires_approval must be True, False or a predicate on the input, got "
                f"{requires_approval!r}",
                tool=name,
            )
        self.requires_approval = requires_approval
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ToolDefinitionError(
                f"tool timeout must be a finite number of seconds > 0, got {timeout!r}",
                tool=name,
            )
        self.function = function
        self.is_async = inspect.iscoroutinefunction(function)
        self.timeout = timeout
        self.inline = inline
        doc = inspect.getdoc(function) or ""
        summary, param_docs = _parse_docstring(doc)
        tool_name: str = name or str(getattr(function, "__name__", ""))
        self._model, self._model_params, self._info_param = _input_model(
            function, tool_name, param_docs
        )
        try:
            schema = self._model.model_json_schema(schema_generator=_SchemaWithoutTitles)
        except pydantic.PydanticUserError as exc:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: cannot derive a JSON schema: {exc}", tool=tool_name
            ) from exc
        schema.pop("title", None)
        self.definition = ToolDefinition(
            name=tool_name,
            description=description if description is not None else summary,
            input_schema=schema,
        )

    @property
    def name(self) -> str:
        return self.definition.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"

    def bind(self, arguments: Mapping[str, Any], info: SessionInfo) -> dict[str, Any]:
        """Validate model-supplied ``arguments`` and build the call's keyword arguments.

        Raises :class:`pydantic.ValidationError` on invalid input.
        """
        validated = self._model.model_validate(arguments)
        kwargs = {name: getattr(validated, name) for name in self._model_params}
        if self._info_param is not None:
            kwargs[self._info_param] = info
        return kwargs


class _SchemaWithoutTitles(pydantic.json_schema.GenerateJsonSchema):
    """Pydantic's schema minus the auto-generated titles: tokens a model does not need."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _input_model(
    function: Callable[..., Any], tool_name: str, param_docs: Mapping[str, str]
) -> tuple[type[pydantic.BaseModel], tuple[str, ...], str | None]:
    try:
        signature = inspect.signature(function)
        hints = get_type_hints(function)
    except (NameError, TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot read its signature: {exc}", tool=tool_name
        ) from exc
    fields: dict[str, Any] = {}
    info_param: str | None = None
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"tool {tool_name!r}: *args/**kwargs cannot be described to a model",
                tool=tool_name,
            )
        annotation = hints.get(param.name, Any)
        if annotation is SessionInfo:
            info_param = param.name  # injected by the loop, not shown to the model
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (
            annotation,
            pydantic.Field(default, description=param_docs.get(param.name)),
        )
    try:
        model = pydantic.create_model(
            f"{tool_name}_input",
            __config__=pydantic.ConfigDict(arbitrary_types_allowed=False, extra="forbid"),
            **fields,
        )
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError, TypeError) as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: a parameter type has no JSON schema: {exc}", tool=tool_name
        ) from exc
    return model, tuple(fields), info_param


_SECTION_RE = re.compile(r"^(Args|Arguments|Parameters|Params):\s*$", re.MULTILINE)
_PARAM_RE = re.compile(r"^\s{2,}(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {param: description})."""
    match = _SECTION_RE.search(doc)
    if match is None:
        return doc.strip(), {}
    summary = doc[: match.start()].strip()
    params: dict[str, str] = {}
    current: str | None = None
    for line in doc[match.end() :].splitlines():
        if line.strip() and not line.startswith(" "):
            break  # the next section
        found = _PARAM_RE.match(line)
        if found:
            current = found.group(1)
            params[current] = found.group(2).strip()
        elif current and line.strip():
            params[current] += " " + line.strip()
    return summary, params


@overload
def tool(function: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    inline: bool = False,
    requires_approval: ApprovalRule = False,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    function: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    inline: bool = False,
    requires_approval: ApprovalRule = False,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Expose a function (sync or async) to the model as a custom tool.

    The docstring's first part becomes the description and its ``Args:`` section describes
    each parameter. A parameter annotated :class:`~managedloop.SessionInfo` is injected, not
    shown to the model. Return a ``str`` (or a :class:`~managedloop.ToolResult`); raise
    :class:`~managedloop.ToolError` to hand the model an error result.

    Args:
        name: Override the tool name (default: the function's name).
        description: Override the description (default: from the docstring).
        timeout: Seconds before the call becomes an error result (the session's
            ``tool_timeout`` applies as well; the first bound to fire wins). A sync function
            that overruns is abandoned in its worker thread, never awaited.
        inline: Run a *sync* function directly on the event loop instead of in a worker
            thread. Saves the ~90 µs thread hop; only for fast functions that never block
            (nothing can interrupt a function running on the event loop, not even a timeout).
        requires_approval: ``True``, or a predicate on the call's input (``True`` or a
            reason string: hold it): the call does not run until someone decides. The
            request ends ``requires_action`` with reason ``approval_required`` and the
            pending decision in ``result.pending`` (unless ``confirm=`` decides at once);
            resume with ``approvals={tool_use_id: ml.Approve() | ml.Deny("why")}``.
    """

    def wrap(fn: Callable[P, R]) -> Tool[P, R]:
        return Tool(
            fn,
            name=name,
            description=description,
            timeout=timeout,
            inline=inline,
            requires_approval=requires_approval,
        )

    return wrap(function) if function is not None else wrap


ToolLike = Tool[..., Any] | Callable[..., Any]


def approval_reason(rule: ApprovalRule, arguments: Mapping[str, Any]) -> str | None:
    """Why a call needs a decision under ``rule`` (``None``: it does not). A predicate's
    ``True`` reads ``"requires_approval"``; a string it returns is the reason itself."""
    if rule is False:
        return None
    if rule is True:
        return "requires_approval"
    verdict = rule(dict(arguments))
    if isinstance(verdict, str):
        return verdict or "requires_approval"
    return "requires_approval" if verdict else None


def as_tool(value: ToolLike) -> Tool[..., Any]:
    return value if isinstance(value, Tool) else Tool(value)


class Toolset:
    """A collection of :class:`Tool` s that serves their calls (a handler)."""

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[ToolLike] = ()) -> None:
        self._tools: dict[str, Tool[..., Any]] = {}
        for item in tools:
            t = as_tool(item)
            if t.name in self._tools:
                raise ToolDefinitionError(f"duplicate tool name {t.name!r}", tool=t.name)
            self._tools[t.name] = t

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool[..., Any] | None:
        return self._tools.get(name)

    def definitions(self) -> list[ToolDefinition]:
        return [t.definition for t in self._tools.values()]

    def needs_approval(self, name: str, input: dict[str, Any], info: SessionInfo) -> str | None:
        """Why this call must wait for a decision (the tool's ``requires_approval``), or
        ``None`` to run it now (an unknown tool: ``None``, it gets its error result)."""
        t = self._tools.get(name)
        if t is None or t.requires_approval is False:
            return None
        return approval_reason(t.requires_approval, input)

    async def handle_tool_call(self, name: str, input: dict[str, Any], info: SessionInfo) -> Any:
        """Validate and run one call (the handler protocol); errors propagate and become
        error results in :func:`~managedloop.handler.run_tool_calls`."""
        t = self._tools.get(name)
        if t is None:
            known = ", ".join(sorted(self._tools)) or "none"
            raise UnknownToolError(f"unknown tool {name!r} (known tools: {known})")
        kwargs = t.bind(input, info)
        if t.is_async:
            coro = t.function(**kwargs)
        elif t.inline:
            return t.function(**kwargs)
        else:
            # abandon_on_cancel: a timeout (the tool's, the session's or the run's) answers
            # at once and leaves a stuck thread behind instead of waiting for it (see
            # managedloop.handler on what an abandoned thread still holds).
            coro = anyio.to_thread.run_sync(
                functools.partial(t.function, **kwargs), abandon_on_cancel=True
            )
        if t.timeout is None:
            return await coro
        with anyio.move_on_after(t.timeout):
            return await coro
        raise ToolTimeoutError(t.name, t.timeout)

    def __repr__(self) -> str:
        return f"Toolset({list(self._tools)!r})"


def definitions_of(tools: Sequence[ToolLike | ToolDefinition]) -> list[ToolDefinition]:
    """Neutral definitions for a mixed list of tools and bare definitions."""
    out = [t if isinstance(t, ToolDefinition) else as_tool(t).definition for t in tools]
    seen: set[str] = set()
    for d in out:
        if d.name in seen:
            raise ToolDefinitionError(f"duplicate tool name {d.name!r}", tool=d.name)
        seen.add(d.name)
    return out


AsyncToolFn = Callable[..., Awaitable[Any]]
