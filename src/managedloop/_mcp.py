"""The MCP side of ``Toolset.from_mcp``: the official ``mcp`` SDK (extra ``managedloop[mcp]``).

:class:`Server` says where an MCP server is (a command over stdio, or a streamable HTTP
URL); :func:`connect` opens one MCP session to it; a :class:`Connection` lists the server's
tools and forwards calls. The SDK is imported on first use: without the extra,
``ConfigError(code="missing_dependency")`` names what to install.

Invariants (pinned in ``tests/mcp/``):

* **What a server declares is checked before any host sees it.** Tool names must suit every
  host (``[A-Za-z0-9_-]{1,64}``, the strictest rule of the three, with the prefix); a
  description must be at most :data:`MAX_DESCRIPTION` characters with no control character
  but tab and newline; an input schema must be a JSON object schema (``"type": "object"``),
  encodable as strict JSON (no NaN), nested at most
  :data:`~managedloop.handler.MAX_INPUT_DEPTH` deep and at most :data:`MAX_SCHEMA_BYTES`
  long. A bad one is a :class:`~managedloop.ToolDefinitionError` naming the tool (shown
  with ``repr`` and cut short, so a hostile name cannot forge a log line); pick the tools
  you want with ``tools=`` to leave a bad one out. Listing follows ``nextCursor`` for at
  most :data:`MAX_PAGES` pages.
* **Every call is answered.** A result's text blocks are joined with newlines; an embedded
  text resource is its text; images, audio, binary resources and resource links become a
  one-line placeholder (the hosts take text results only); ``structuredContent`` is
  rendered as JSON when no text block came with it (servers that follow the spec send the
  same JSON as a text block too). ``isError`` makes an error result. A JSON-RPC error, a
  server that exits mid-call, a reply that does not validate, a transport failure: each is
  an error result naming the server -- never an exception out of the session, never a
  hang. Text longer than ``max_result_chars`` is cut, with a note saying so.
* **Nothing secret is shown.** A server is named by its command's file name, or by its URL
  with no userinfo and no query; ``env`` values and ``headers`` never appear in a repr, an
  error or a result. The stdio server gets the SDK's minimal environment (``HOME``,
  ``PATH``...) plus ``env``, never the whole environment of this process.
* **A dead server never takes the session down.** The SDK's client lives in a task of its
  own: when its transport fails (an HTTP server that dies mid-call makes the SDK's task
  group fail), the connection is marked lost and the calls in flight and all later ones are
  answered with an error result at once; the agent session goes on. A reply that never
  parses (the SDK logs and drops it) leaves its call to the call's timeout.
* **Closing is complete.** Leaving :func:`connect` (on any path, cancellation included)
  closes the MCP session; for stdio the SDK closes the server's stdin, waits, then
  terminates and kills it, each wait bounded, under a cancellation shield. What the body
  raised comes out as itself, never wrapped in an ``ExceptionGroup``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import pydantic

from managedloop._urls import redact_url
from managedloop.errors import ConfigError, McpError, ToolDefinitionError, ToolError
from managedloop.handler import too_deep

__all__ = [
    "MAX_DESCRIPTION",
    "MAX_PAGES",
    "MAX_SCHEMA_BYTES",
    "Connection",
    "Listed",
    "Server",
    "connect",
    "render",
]

_INSTALL_HINT = "MCP servers as tools need the mcp package: pip install 'managedloop[mcp]'"

# Tool names every host takes: AgentCore and OpenAI-style chat endpoints allow 1-64 of
# these characters (Claude allows 128), and one definition must work on any host.
_HOST_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_DESCRIPTION = 8192  # characters; real descriptions are a paragraph, a prompt-sized blob is not
MAX_SCHEMA_BYTES = 64 * 1024  # a schema is sent on every model call: bound what a server can add
MAX_PAGES = 100  # tools/list pages; a cursor that never ends cannot hang the listing
MAX_ERROR_CHARS = 1000  # of a server's own error message, in the error result
_SHOWN_NAME = 80  # characters of a rejected name shown in an error (as repr)
# Control characters (C0 but tab, newline and carriage return; DEL; C1) and lone surrogates:
# nothing a description needs, and what a hostile one would use to forge terminal or log output.
_BAD_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def _sdk() -> Any:
    try:
        import mcp
        import mcp.client.streamable_http
    except ImportError as exc:
        raise ConfigError(_INSTALL_HINT, code="missing_dependency", package="mcp") from exc
    return mcp


def _shown_url(url: str) -> str:
    """The URL without userinfo, query or fragment (either may carry a token)."""
    redacted = redact_url(url)
    try:
        parts = urlsplit(redacted)
    except ValueError:  # pragma: no cover - redact_url already refused what does not split
        return "<unparseable url>"
    return urlunsplit(parts._replace(query="", fragment=""))


@dataclass(frozen=True, eq=False, slots=True)
class Server:
    """Where an MCP server is and how long to wait for it. Exactly one of ``command`` (stdio)
    and ``url`` (streamable HTTP). ``env`` and ``headers`` are never shown."""

    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    connect_timeout: float = 30.0
    max_result_chars: int = 100_000

    @property
    def label(self) -> str:
        """How errors and reprs name the server: no argument, variable, header or query."""
        if self.command is not None:
            return f"stdio server {os.path.basename(self.command)!r}"
        return f"HTTP server {_shown_url(self.url or '')}"

    def __repr__(self) -> str:
        return f"McpServer({self.label})"


@dataclass(frozen=True, slots=True)
class Listed:
    """One tool as the server lists it, checked: its name there, its name here, the rest."""

    remote_name: str
    name: str
    description: str
    input_schema: dict[str, Any]


def _shown_name(name: object) -> str:
    text = repr(name)
    return text if len(text) <= _SHOWN_NAME else text[: _SHOWN_NAME - 3] + "..."


def check_tool(tool: Any, prefix: str, server: Server) -> Listed:
    """One listed tool as a :class:`Listed`, or a :class:`ToolDefinitionError` saying why not."""
    remote = tool.name
    name = prefix + remote if isinstance(remote, str) else remote
    where = f"MCP {server.label}"
    if not isinstance(name, str) or not _HOST_NAME_RE.fullmatch(name):
        raise ToolDefinitionError(
            f"{where}: tool name {_shown_name(name)} is not usable on every host "
            "(1-64 letters, digits, '_' or '-', prefix included); leave it out with tools=",
            tool=_shown_name(name),
        )
    description = tool.description if tool.description is not None else ""
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise ToolDefinitionError(
            f"{where}: the description of tool {name!r} is longer than {MAX_DESCRIPTION} "
            "characters",
            tool=name,
        )
    if _BAD_CHARS.search(description):
        raise ToolDefinitionError(
            f"{where}: the description of tool {name!r} holds control characters",
            tool=name,
        )
    return Listed(
        remote_name=remote,
        name=name,
        description=description,
        input_schema=_checked_schema(tool.input_schema, name, where),
    )


def _checked_schema(schema: Any, name: str, where: str) -> dict[str, Any]:
    def bad(why: str) -> ToolDefinitionError:
        return ToolDefinitionError(f"{where}: the input schema of tool {name!r} {why}", tool=name)

    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise bad('is not a JSON object schema ("type": "object")')
    if too_deep(schema):
        raise bad("is nested too deep")
    try:
        encoded = json.dumps(schema, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (ValueError, TypeError, UnicodeEncodeError, RecursionError) as exc:
        raise bad(f"is not strict JSON ({type(exc).__name__})") from None
    if len(encoded) > MAX_SCHEMA_BYTES:
        raise bad(f"is longer than {MAX_SCHEMA_BYTES} bytes")
    copy: dict[str, Any] = json.loads(encoded)  # plain JSON, detached from the SDK's model
    return copy


def render(result: Any, max_chars: int) -> tuple[str, bool]:
    """A ``CallToolResult`` as ``(text, is_error)`` (the rules are in the module docstring)."""
    parts: list[str] = []
    has_text = False
    for block in result.content or ():
        kind = getattr(block, "type", None)
        if kind == "text":
            has_text = True
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(
                f"[{kind} content: {block.mime_type}, {len(block.data)} base64 characters, "
                "not shown]"
            )
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            if isinstance(text, str):
                has_text = True
                parts.append(text)
            else:
                mime = resource.mime_type or "unknown type"
                parts.append(f"[binary resource {resource.uri}: {mime}, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.name} {block.uri}]")
        else:  # pragma: no cover - the SDK's content union has no other member today
            parts.append(f"[{kind} content, not shown]")
    structured = getattr(result, "structured_content", None)
    if structured is not None and not has_text:
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    if len(text) > max_chars:
        text = (
            text[:max_chars] + f"\n[result cut: {len(text)} characters, the first {max_chars} "
            "shown]"
        )
    return text, result.is_error is True


class Connection:
    """One open MCP session: list the tools, forward calls (each answered, see module docs)."""

    __slots__ = ("_client", "_lost", "lost", "server")

    def __init__(self, server: Server, client: Any) -> None:
        self.server = server
        self._client = client
        self.lost: str | None = None
        """Why the connection is gone (the transport failed, or it was closed), else None."""
        self._lost = anyio.Event()

    def lose(self, why: str) -> None:
        """The connection is gone: calls in flight and later ones answer with ``why``."""
        if self.lost is None:
            self.lost = why
        self._lost.set()

    async def list_tools(
        self, prefix: str = "", include: Collection[str] | None = None
    ) -> list[Listed]:
        """Every tool (all pages), checked; only those named in ``include`` when given."""
        sdk = _sdk()
        found: list[Listed] = []
        seen: set[str] = set()
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            try:
                page = await self._client.list_tools(cursor=cursor)
            except (sdk.MCPError, pydantic.ValidationError, RuntimeError) as exc:
                raise McpError(
                    f"MCP {self.server.label}: tools/list failed ({_why(exc, sdk)})",
                    code="mcp_protocol",
                ) from None
            for tool in page.tools:
                if include is not None and tool.name not in include:
                    continue
                listed = check_tool(tool, prefix, self.server)
                if listed.name in seen:
                    raise ToolDefinitionError(
                        f"MCP {self.server.label}: lists tool {listed.name!r} twice",
                        tool=listed.name,
                    )
                seen.add(listed.name)
                found.append(listed)
            cursor = page.next_cursor
            if cursor is None:
                break
        else:
            raise McpError(
                f"MCP {self.server.label}: tools/list did not end within {MAX_PAGES} pages",
                code="mcp_protocol",
            )
        missing = sorted(set(include or ()) - {t.remote_name for t in found})
        if missing:
            raise ToolDefinitionError(
                f"MCP {self.server.label}: lists no tool named {', '.join(map(repr, missing))}",
                tool=missing[0],
            )
        return found

    async def call(
        self, name: str, arguments: Mapping[str, Any], timeout: float | None
    ) -> tuple[str, bool]:
        """Forward one call; ``(text, is_error)``. A failure of the server or of the protocol
        raises :class:`~managedloop.ToolError` (an error result for the model); a
        cancellation (a timeout of the library, the session ending) propagates."""
        sdk = _sdk()
        if self.lost is not None:
            raise ToolError(
                f"MCP {self.server.label} is gone ({self.lost}); {name!r} was not called"
            )
        result: Any = None
        failed: BaseException | None = None

        async def forward() -> None:
            nonlocal result, failed
            try:
                result = await self._call(name, arguments, timeout)
            except Exception as exc:
                failed = exc
            tg.cancel_scope.cancel()

        async def watch() -> None:
            await self._lost.wait()
            tg.cancel_scope.cancel()

        # The call races the connection's loss: a call the SDK would leave waiting on a dead
        # transport is answered as soon as the transport is known to be gone.
        async with anyio.create_task_group() as tg:
            tg.start_soon(forward)
            tg.start_soon(watch)
        if failed is not None:
            raise ToolError(
                f"MCP {self.server.label} failed the call to {name!r}: {_why(failed, sdk)}"
            ) from None
        if result is None:
            raise ToolError(
                f"MCP {self.server.label} failed the call to {name!r}: the connection was lost "
                f"({self.lost})"
            )
        try:
            return render(result, self.server.max_result_chars)
        except Exception as exc:
            raise ToolError(
                f"MCP {self.server.label} sent a result for {name!r} that cannot be shown "
                f"({type(exc).__name__})"
            ) from None

    async def _call(self, name: str, arguments: Mapping[str, Any], timeout: float | None) -> Any:
        # Never None: the SDK would fall back to its session-wide read timeout, which is our
        # connect_timeout. The library's own bound (Tool.timeout) fires first anyway.
        read_timeout = math.inf if timeout is None else timeout
        return await self._client.call_tool(
            name, dict(arguments), read_timeout_seconds=read_timeout
        )


def _why(exc: BaseException, sdk: Any) -> str:
    """A failure in words that hold no secret: the server's own JSON-RPC message (cut short),
    else only the exception's type (transport errors can quote URLs and headers)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # the SDK's task groups
        exc = exc.exceptions[0]
    if isinstance(exc, sdk.MCPError):
        message = str(getattr(exc.error, "message", "") or "")
        if len(message) > MAX_ERROR_CHARS:
            message = message[:MAX_ERROR_CHARS] + "..."
        return f"MCP error {exc.error.code}: {message}"
    if isinstance(exc, pydantic.ValidationError):
        return "its reply did not match the MCP schema"
    if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | EOFError):
        return "the connection is closed"
    return type(exc).__name__


@asynccontextmanager
async def connect(server: Server, *, prime: bool = True) -> AsyncIterator[Connection]:
    """One MCP session to ``server`` for the ``async with`` block (see module docs).

    A server that cannot be started, reached or initialised within ``connect_timeout``
    raises :class:`~managedloop.McpError` (``code="mcp_unavailable"``). ``prime`` lists
    the tools once first (see ``_prime``); a connection that lists them itself skips it.

    The SDK's client runs in a task of its own (``_own``): its task groups fail when the
    transport does (an HTTP server that dies mid-call), and inside the session's task that
    failure would cancel the whole agent session. Here it only marks the connection lost,
    and every call, in flight or later, is answered with an error result.
    """
    sdk = _sdk()
    connection = Connection(server, None)
    ready = anyio.Event()
    done = anyio.Event()
    failure: list[BaseException] = []
    held: BaseException | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(functools.partial(_own, connection, sdk, ready, done, failure, prime=prime))
        await ready.wait()
        if connection._client is None:  # the SDK did not get through its handshake
            done.set()
            why = _why(failure[0], sdk) if failure else "no reason given"
            held = McpError(
                f"MCP {server.label} could not be started or did not answer its handshake ({why})",
                code="mcp_unavailable",
            )
        else:
            try:
                yield connection
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException as exc:
                # Raised below, once the task group is closed: raised through it, it would
                # come out wrapped in an ExceptionGroup (a ProviderError, a tool's
                # KeyboardInterrupt must reach the caller as themselves).
                held = exc
            finally:
                done.set()
    if held is not None:
        raise held


async def _prime(client: Any) -> None:
    """List every page once on a new connection: the SDK keys per-tool state on the listing
    (output schemas it validates results against, ``x-mcp-header`` arguments it mirrors
    into headers on 2026-07-28 connections). A failure here is the calls' to report."""
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        try:
            page = await client.list_tools(cursor=cursor)
        except Exception:
            return
        cursor = page.next_cursor
        if cursor is None:
            return


async def _own(
    connection: Connection,
    sdk: Any,
    ready: anyio.Event,
    done: anyio.Event,
    failure: list[BaseException],
    *,
    prime: bool,
) -> None:
    """Open the SDK's client, hold it until ``done``, close it: all in this one task."""
    server = connection.server
    try:
        async with AsyncExitStack() as stack:
            if server.command is not None:
                target: Any = sdk.StdioServerParameters(
                    command=server.command,
                    args=list(server.args),
                    env=dict(server.env) or None,
                    cwd=server.cwd,
                )
            else:
                import httpx2

                http = await stack.enter_async_context(
                    httpx2.AsyncClient(
                        headers=dict(server.headers),
                        # The SDK's own defaults: 30 s to connect, 300 s of silence on a stream.
                        timeout=httpx2.Timeout(30.0, read=300.0),
                    )
                )
                target = sdk.client.streamable_http.streamable_http_client(
                    server.url, http_client=http
                )
            client = sdk.Client(target, read_timeout_seconds=server.connect_timeout, cache=None)
            await stack.enter_async_context(client)
            if prime:
                await _prime(client)
            connection._client = client
            ready.set()
            await done.wait()
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:  # the transport failed: the session goes on without it
        failure.append(exc)
        connection.lose(_why(exc, sdk))
    finally:
        connection.lose("the connection is closed")
        ready.set()


def seconds(name: str, value: Any) -> float:
    """A positive finite number of seconds, else a named error."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ToolDefinitionError(
            f"{name} must be a finite number of seconds > 0, got {value!r}", option=name
        )
    return float(value)


def server_from(
    *,
    command: str | None,
    args: Sequence[str],
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str] | None,
    url: str | None,
    headers: Mapping[str, str] | None,
    connect_timeout: float,
    max_result_chars: int,
) -> Server:
    """A checked :class:`Server` (bad input is a :class:`ToolDefinitionError`, nothing shown
    of ``env`` or ``headers`` values)."""
    if (command is None) == (url is None):
        raise ToolDefinitionError("from_mcp takes exactly one of command= (stdio) and url= (HTTP)")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise ToolDefinitionError("command= must be a non-empty string")
    if isinstance(args, str) or not all(isinstance(a, str) for a in args):
        raise ToolDefinitionError("args= must be a sequence of strings (not one string)")
    for option, mapping in (("env", env), ("headers", headers)):
        if mapping is not None and not (
            isinstance(mapping, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items())
        ):
            raise ToolDefinitionError(f"{option}= must map strings to strings", option=option)
    if url is not None:
        if not isinstance(url, str):
            raise ToolDefinitionError("url= must be a string")
        try:
            scheme = urlsplit(url).scheme
        except ValueError:
            scheme = ""
        if scheme not in ("http", "https"):
            raise ToolDefinitionError(f"url= must be an http(s) URL, got {_shown_url(url)!r}")
    if headers and command is not None:
        raise ToolDefinitionError("headers= are for url= servers; a stdio server takes env=")
    if env and url is not None:
        raise ToolDefinitionError("env= is for command= servers; an HTTP server takes headers=")
    if (
        isinstance(max_result_chars, bool)
        or not isinstance(max_result_chars, int)
        or (max_result_chars < 1)
    ):
        raise ToolDefinitionError(
            f"max_result_chars must be an integer >= 1, got {max_result_chars!r}"
        )
    return Server(
        command=command,
        args=tuple(args),
        env=dict(env or {}),
        cwd=os.fspath(cwd) if cwd is not None else None,
        url=url,
        headers=dict(headers or {}),
        connect_timeout=seconds("connect_timeout", connect_timeout),
        max_result_chars=max_result_chars,
    )
