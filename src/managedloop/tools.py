"""Tools: ``@tool``, :class:`Tool`, :class:`Toolset` and the neutral :class:`ToolDefinition`.

A tool's JSON schema is derived once, at definition time, from the function's type hints,
defaults and docstring (pydantic does the derivation and, at call time, the validation).
A definition that cannot work fails at once with :class:`ToolDefinitionError`: a parameter
type with no JSON schema, ``*args``/``**kwargs``, or two tools with one name in a toolset.

What a host sees of a tool is only its :class:`ToolDefinition` (name, description, input
schema); the function itself always runs in this process.

Tools an MCP server serves come from :meth:`Toolset.from_mcp` (extra ``managedloop[mcp]``;
the protocol side is :mod:`managedloop._mcp`, whose docstring gives the rules for names,
schemas and results). Listing happens once, in ``from_mcp``, over a short connection of its
own: the definitions are then fixed values like any other tool's (an ``AgentSpec``'s digest
covers them). Each agent session opens its own connection per server through
:meth:`Toolset.lifespan`, which the session driver enters when the session opens and leaves
when it ends, on every path (a result, an error, a timeout, a cancellation, a
``KeyboardInterrupt``); a stdio server's process is gone afterwards.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import re
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, get_type_hints, overload

import anyio

from managedloop._loops import syncify
from managedloop._threads import run_sync as run_in_thread
from managedloop._tool_failures import ToolTimeoutError, UnknownToolError
from managedloop.errors import ToolDefinitionError, ToolError
from managedloop.results import SessionInfo, ToolResult

if TYPE_CHECKING:
    import pydantic
    import pydantic.json_schema

    from managedloop._mcp import Connection, Server

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
        "_fields",
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
        import pydantic  # loaded by _input_model; here for its exception classes

        self._fields: Any = None  # bind's validator, made on the first call
        try:
            schema = self._model.model_json_schema(schema_generator=_schema_without_titles())
        except pydantic.PydanticUserError as exc:
            raise _no_schema(tool_name, function) from exc
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
        fields = self._fields
        if fields is None:
            fields = self._fields = _fields_validator(self._model)
        if fields is not False:
            kwargs: dict[str, Any] = fields.validate_python(arguments)[0]
        else:
            validated = self._model.__pydantic_validator__.validate_python(arguments)
            kwargs = {name: getattr(validated, name) for name in self._model_params}
        if self._info_param is not None:
            kwargs[self._info_param] = info
        return kwargs


def _fields_validator(model: type[pydantic.BaseModel]) -> Any:
    """A validator of the input model's fields alone, or ``False`` when the model is not a
    plain one (nested model definitions, a custom ``__init__``...).

    Its ``validate_python`` returns ``(fields, extra, fields_set)``: the call's keyword
    arguments as a fresh dict, without building a model instance to read them back from
    (half the cost of a call's validation). It runs the model's own field schema under
    the model's own config (title, ``extra="forbid"``), so what it accepts, the values it
    gives and the ``ValidationError`` it raises are the model's.
    """
    import pydantic_core

    schema: Any = model.__pydantic_core_schema__ if model.__pydantic_complete__ else None
    if (
        not isinstance(schema, dict)
        or schema.get("type") != "model"
        or schema["schema"].get("type") != "model-fields"
        or schema.get("custom_init")
        or schema.get("root_model")
        or schema.get("post_init")
    ):
        return False
    return pydantic_core.SchemaValidator(schema["schema"], schema.get("config"))


@functools.cache
def _schema_without_titles() -> type[pydantic.json_schema.GenerateJsonSchema]:
    """Pydantic's schema generator minus the auto-generated titles: tokens a model does not
    need. Made on first use: pydantic stays off ``import managedloop``'s path (~20 ms) and
    loads with the first ``@tool``."""
    import pydantic.json_schema

    class _SchemaWithoutTitles(pydantic.json_schema.GenerateJsonSchema):
        def field_title_should_be_set(self, schema: Any) -> bool:
            return False

    return _SchemaWithoutTitles


def _input_model(
    function: Callable[..., Any], tool_name: str, param_docs: Mapping[str, str]
) -> tuple[type[pydantic.BaseModel], tuple[str, ...], str | None]:
    import pydantic  # the first @tool pays for it, not `import managedloop`

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
        raise _no_schema(tool_name, function, fields) from exc
    return model, tuple(fields), info_param


def _no_schema(
    tool_name: str, function: Callable[..., Any], fields: dict[str, Any] | None = None
) -> ToolDefinitionError:
    """The error for a parameter whose type has no JSON Schema, naming that parameter.
    Pydantic's own text is left out: its advice (``arbitrary_types_allowed``, a core-schema
    hook) is about pydantic models and cannot help a tool, whose schema goes to a model."""
    import pydantic

    if fields is None:
        fields = {
            name: (hint, ...)
            for name, hint in get_type_hints(function).items()
            if name != "return" and hint is not SessionInfo
        }
    for name, spec in fields.items():
        try:
            alone = pydantic.create_model("probe", **{name: spec})
            alone.model_json_schema(schema_generator=_schema_without_titles())
        except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError, TypeError):
            shown = inspect.formatannotation(spec[0])
            return ToolDefinitionError(
                f"tool {tool_name!r}: parameter {name!r} ({shown}) has no JSON Schema; give "
                "it a type a model can be told about (str, int, float, bool, Literal, an "
                "Enum, a list or dict of those, a dataclass, a TypedDict, a pydantic model)",
                tool=tool_name,
                param=name,
            )
    return ToolDefinitionError(f"tool {tool_name!r}: its input has no JSON Schema", tool=tool_name)


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
            thread. Saves the thread hop, which costs more than all the rest of a call ("The
            tool-call floor" in ``bench/README.md``); only for fast functions that never block
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

# Seconds an MCP tool call may take by default: a server that never answers must not hold a
# session whose run has no timeout; long enough for the slow tools MCP servers wrap (builds,
# searches). ``from_mcp(timeout=...)`` changes it; the session's ``tool_timeout`` also applies.
MCP_TOOL_TIMEOUT = 300.0
MCP_CONNECT_TIMEOUT = 30.0  # seconds to start/reach a server and finish its handshake
MCP_MAX_RESULT_CHARS = 100_000  # of one result's text; a hostile server cannot flood a context
_PREFIX_RE = re.compile(r"[A-Za-z0-9_-]{0,63}")


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


def tools_of(items: Iterable[Any]) -> tuple[Tool[..., Any] | ToolDefinition, ...]:
    """``items`` as tools and bare definitions: a :class:`Toolset` gives its tools, a plain
    function is wrapped once (an ``AgentSpec``'s ``tools`` may mix all of these)."""
    out: list[Tool[..., Any] | ToolDefinition] = []
    for item in items:
        if isinstance(item, Toolset):
            out.extend(item)
        else:
            out.append(item if isinstance(item, ToolDefinition) else as_tool(item))
    return tuple(out)


class _McpTool(Tool[..., Any]):
    """A tool an MCP server serves. Its definition comes from the server's listing; a call
    goes to the connection its session opened (:meth:`Toolset.lifespan`), whose server
    validates the input itself."""

    __slots__ = ("_connection", "remote_name", "server")

    # No Tool.__init__: there is no Python function whose signature gives the schema.
    def __init__(
        self,
        definition: ToolDefinition,
        *,
        server: Server,
        remote_name: str,
        timeout: float | None,
        connection: Connection | None = None,
    ) -> None:
        self.definition = definition
        self.server = server
        self.remote_name = remote_name
        self.timeout = timeout
        self._connection = connection
        self.function = self._forward
        self.is_async = True
        self.inline = False
        self.requires_approval: ApprovalRule = False  # the server's tools hold nothing here

    def bind(self, arguments: Mapping[str, Any], info: SessionInfo) -> dict[str, Any]:
        return {"arguments": dict(arguments)}

    def bound(self, connection: Connection) -> _McpTool:
        return _McpTool(
            self.definition,
            server=self.server,
            remote_name=self.remote_name,
            timeout=self.timeout,
            connection=connection,
        )

    async def _forward(self, arguments: dict[str, Any]) -> ToolResult:
        if self._connection is None:
            raise ToolError(
                f"MCP tool {self.name!r} is not connected: its toolset serves calls inside an "
                "agent session (or inside `async with toolset.lifespan() as live`)"
            )
        text, is_error = await self._connection.call(self.remote_name, arguments, self.timeout)
        return ToolResult(tool_use_id="", text=text, is_error=is_error)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, mcp={self.server.label})"


async def from_mcp(
    command: str | None = None,
    *,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    url: str | None = None,
    headers: Mapping[str, str] | None = None,
    prefix: str = "",
    tools: Collection[str] | None = None,
    timeout: float | None = MCP_TOOL_TIMEOUT,
    connect_timeout: float = MCP_CONNECT_TIMEOUT,
    max_result_chars: int = MCP_MAX_RESULT_CHARS,
) -> Toolset:
    """The tools of an MCP server as a :class:`Toolset` (``Toolset.from_mcp``).

    Give ``command`` (and ``args``, ``env``, ``cwd``) to run the server as a subprocess
    over stdio, or ``url`` (and ``headers``) for a streamable HTTP server. This connects
    once to list the tools (every page) and closes again; each agent session that uses the
    toolset then opens its own connection for as long as the session lives.

    Args:
        command: The server's executable (stdio). Its environment is the MCP SDK's minimal
            one (``HOME``, ``PATH``, ...) plus ``env``, not this process's environment.
        args: Its command-line arguments.
        env: Extra environment variables for it (values are never shown anywhere).
        cwd: Its working directory.
        url: The server's streamable HTTP endpoint (``http(s)://.../mcp``).
        headers: HTTP headers for every request (e.g. ``Authorization``; never shown).
        prefix: Put before every tool name (``"wx_"``: ``get_forecast`` becomes
            ``wx_get_forecast``), to keep two servers' names apart; calls go out under the
            server's own name.
        tools: Only these tools (named as the server names them); a name the server does
            not list is a :class:`~managedloop.ToolDefinitionError`.
        timeout: Seconds one call may take (default 300; ``None``: no bound of its own). The
            session's ``tool_timeout`` applies as well; the first bound to fire wins.
        connect_timeout: Seconds to start or reach the server and to answer its handshake
            and each listing page.
        max_result_chars: Longer result text is cut (with a note saying so).

    Raises:
        ToolDefinitionError: Bad options, or a tool whose name, description or schema would
            not be safe on every host (see :mod:`managedloop._mcp`).
        McpError: The server could not be started, reached or listed (``mcp_unavailable``,
            ``mcp_protocol``).
        ConfigError: The ``mcp`` package is missing (``missing_dependency``).
    """
    from managedloop import _mcp

    server = _mcp.server_from(
        command=command,
        args=args,
        env=env,
        cwd=cwd,
        url=url,
        headers=headers,
        connect_timeout=connect_timeout,
        max_result_chars=max_result_chars,
    )
    if not isinstance(prefix, str) or not _PREFIX_RE.fullmatch(prefix):
        raise ToolDefinitionError(
            f"prefix must be at most 63 letters, digits, '_' or '-', got {prefix!r}",
            option="prefix",
        )
    if tools is not None and (isinstance(tools, str) or not all(isinstance(t, str) for t in tools)):
        raise ToolDefinitionError("tools= must be a collection of tool names", option="tools")
    call_timeout = None if timeout is None else _mcp.seconds("timeout", timeout)
    async with _mcp.connect(server, prime=False) as connection:
        listed = await connection.list_tools(prefix, None if tools is None else set(tools))
    return Toolset(
        _McpTool(
            ToolDefinition(name=t.name, description=t.description, input_schema=t.input_schema),
            server=server,
            remote_name=t.remote_name,
            timeout=call_timeout,
        )
        for t in listed
    )


class Toolset:
    """A collection of :class:`Tool` s that serves their calls (a handler).

    ``Toolset(items)`` takes tools, plain functions and other toolsets (their tools join
    this one); :meth:`from_mcp` makes one from an MCP server's tools.
    """

    __slots__ = ("_servers", "_tools", "approval_free")

    # The sync face first: below, the class body's own ``from_mcp`` hides the function.
    from_mcp_sync = staticmethod(syncify(from_mcp))
    """The blocking face of :meth:`from_mcp` (not inside an event loop)."""
    from_mcp = staticmethod(from_mcp)

    def __init__(self, tools: Iterable[ToolLike | Toolset] = ()) -> None:
        self._tools: dict[str, Tool[..., Any]] = {}
        # The MCP servers behind this toolset's tools, by identity: what lifespan() opens.
        self._servers: dict[int, Server] = {}
        for item in tools:
            for t in item if isinstance(item, Toolset) else (as_tool(item),):
                if t.name in self._tools:
                    raise _duplicate(t, self._tools[t.name])
                self._tools[t.name] = t
                if isinstance(t, _McpTool):
                    self._servers.setdefault(id(t.server), t.server)
        self.approval_free = all(t.requires_approval is False for t in self._tools.values())
        """No tool here ever holds a call for a decision (the loop skips the check)."""

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

    def lifespan(self) -> AbstractAsyncContextManager[Toolset]:
        """What this toolset holds open for one agent session: an async context manager
        that yields the toolset serving that session's calls.

        The session driver enters it when a session opens (before the host is opened) and
        leaves it when the session ends, on every path. Tools from MCP servers get one
        connection per server for that session (closed on leaving, a stdio server's process
        ended); other tools hold nothing, and the toolset itself is yielded.
        """
        if not self._servers:  # the common case: nothing to open, no generator to run
            return nullcontext(self)
        return self._connected(list(self._servers.values()))

    @asynccontextmanager
    async def _connected(self, servers: list[Server]) -> AsyncIterator[Toolset]:
        from managedloop import _mcp

        async with AsyncExitStack() as stack:
            connections: dict[int, Connection] = {}
            for server in servers:
                connections[id(server)] = await stack.enter_async_context(_mcp.connect(server))
            yield Toolset(
                t.bound(connections[id(t.server)]) if isinstance(t, _McpTool) else t
                for t in self._tools.values()
            )

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
            # A timeout (the tool's, the session's or the run's) answers at once and
            # leaves a stuck thread behind instead of waiting for it (managedloop._threads;
            # managedloop.handler on what an abandoned thread still holds).
            coro = run_in_thread(t.function, kwargs)
        if t.timeout is None:
            return await coro
        with anyio.move_on_after(t.timeout):
            return await coro
        raise ToolTimeoutError(t.name, t.timeout)

    def __repr__(self) -> str:
        return f"Toolset({list(self._tools)!r})"


def definitions_of(tools: Sequence[Any]) -> list[ToolDefinition]:
    """Neutral definitions for a mixed list of tools, toolsets and bare definitions."""
    items = tools_of(tools)
    seen: dict[str, Tool[..., Any] | ToolDefinition] = {}
    for item in items:
        name = item.name
        if name in seen:
            raise _duplicate(item, seen[name])
        seen[name] = item
    return [t if isinstance(t, ToolDefinition) else t.definition for t in items]


def _duplicate(
    one: Tool[..., Any] | ToolDefinition, other: Tool[..., Any] | ToolDefinition
) -> ToolDefinitionError:
    hint = (
        " (Toolset.from_mcp(prefix=...) keeps an MCP server's tool names apart)"
        if isinstance(one, _McpTool) or isinstance(other, _McpTool)
        else ""
    )
    return ToolDefinitionError(f"duplicate tool name {one.name!r}{hint}", tool=one.name)


AsyncToolFn = Callable[..., Awaitable[Any]]
