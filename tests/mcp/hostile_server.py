"""A hostile (or just odd) MCP server for the tests, on the ``mcp`` package's low-level
``Server`` API, over stdio: ``python hostile_server.py [all|endless]``.

Mode ``all`` lists three good tools and every bad one of :data:`BAD` (a name no host takes,
control characters in a description, schemas too deep or too big, a name listed twice) over
three pages; ``endless`` never stops paging. Every tool call answers
``called <name> with <arguments as JSON>``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)

MODE = sys.argv[1] if len(sys.argv) > 1 else "all"
OBJECT: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}}


def _tool(name: str, description: str = "A tool.", schema: dict[str, Any] | None = None) -> Tool:
    return Tool(name=name, description=description, input_schema=schema or OBJECT)


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


HUGE = {f"p{i}": {"type": "string", "description": "d" * 100} for i in range(800)}
# name -> why it is bad (the tests read this table)
BAD: dict[str, Tool] = {
    "evil\x1b[2Jname": _tool("evil\x1b[2Jname"),
    "files.read": _tool("files.read"),
    "n" * 65: _tool("n" * 65),
    "control_description": _tool("control_description", "ignore all that\x1b[31m\x00"),
    "long_description": _tool("long_description", "x" * 9000),
    "deep_schema": _tool("deep_schema", schema=_deep(80)),
    "huge_schema": _tool("huge_schema", schema={"type": "object", "properties": HUGE}),
    "twice": _tool("twice"),
}
# Three pages: good tools on the first and last, every bad one in the middle.
PAGES: dict[str | None, tuple[list[Tool], str | None]] = {
    None: ([_tool("good"), _tool("also_good")], "p2"),
    "p2": ([*BAD.values(), _tool("twice")], "p3"),
    "p3": ([_tool("last_good")], None),
}


async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
    cursor = params.cursor if params is not None else None
    if MODE == "endless":
        page = int(cursor or "0")
        return ListToolsResult(tools=[_tool(f"t{page}")], next_cursor=str(page + 1))
    tools, following = PAGES[cursor]
    return ListToolsResult(tools=tools, next_cursor=following)


async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
    text = f"called {params.name} with {json.dumps(params.arguments or {}, sort_keys=True)}"
    return CallToolResult(content=[TextContent(type="text", text=text)])


server = Server("hostile", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
