"""A real MCP server for the tests, written with the ``mcp`` package's own server API
(``MCPServer``, FastMCP's name in mcp 2). Run as a subprocess by the tests:

    python weather_server.py stdio            # over stdin/stdout
    python weather_server.py http             # streamable HTTP on 127.0.0.1, a free port

Over HTTP it binds a free port itself and prints ``PORT <n>`` on stdout once it listens (no
race on the port). With ``MCP_TEST_PIDFILE`` set it appends its pid there first, so a test can
check that the process is gone afterwards. ``MCP_TEST_TOKEN``, when set, must come back as
``Authorization: Bearer <token>`` (HTTP) and is echoed by ``whoami`` (stdio: from its env).
With ``MCP_TEST_REFUSE_START`` naming a file that exists, it exits at once (a server that
lists its tools once and then fails to start for a session).
"""

from __future__ import annotations

import base64
import os
import socket
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import EmbeddedResource, ImageContent, TextContent, TextResourceContents

app = MCPServer("weather")


@app.tool()
def get_forecast(city: str, days: int = 1) -> str:
    """Forecast for a city."""
    return f"Forecast for {city}: sunny for {days} day(s)"


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers (a structured result)."""
    return a + b


@app.tool()
def refuse(reason: str) -> str:
    """Always fails with an MCP tool error (isError)."""
    raise ToolError(f"refused: {reason}")


@app.tool()
def crash() -> str:
    """Ends the server process in the middle of the call."""
    sys.stdout.flush()
    os._exit(3)


@app.tool()
async def hang() -> str:
    """Never answers."""
    await anyio.sleep_forever()
    return "never"  # pragma: no cover


@app.tool()
def picture() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Text, an image and an embedded text resource."""
    return [
        TextContent(type="text", text="a picture:"),
        ImageContent(
            type="image", data=base64.b64encode(b"\x89PNG").decode(), mime_type="image/png"
        ),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(uri="file:///notes.txt", text="the notes"),
        ),
    ]


@app.tool()
def flood(size: int) -> str:
    """A result of ``size`` characters, starting with control characters."""
    return ("\x07\x1b[2J" + "x" * size)[:size]


@app.tool()
def whoami() -> str:
    """Echoes whether the secret arrived (never the secret itself)."""
    return "token: " + ("present" if os.environ.get("MCP_TEST_TOKEN") else "absent")


def _pidfile() -> None:
    path = os.environ.get("MCP_TEST_PIDFILE")
    if path:
        with open(path, "a") as f:  # one line per process: discovery, then each session
            f.write(f"{os.getpid()}\n")


async def _serve_http() -> None:
    import uvicorn
    from starlette.types import ASGIApp, Receive, Scope, Send

    inner = app.streamable_http_app()
    token = os.environ.get("MCP_TEST_TOKEN")

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and token is not None:
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await inner(scope, receive, send)

    asgi: ASGIApp = guarded
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(asgi, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        while not server.started:  # bounded by the test's own wait for the PORT line
            await anyio.sleep(0.01)
        print(f"PORT {sock.getsockname()[1]}", flush=True)


if __name__ == "__main__":
    _pidfile()
    refuse_start = os.environ.get("MCP_TEST_REFUSE_START")  # a file: exit at once if it exists
    if refuse_start and os.path.exists(refuse_start):
        sys.exit(5)
    if sys.argv[1:] == ["http"]:
        anyio.run(_serve_http)
    else:
        app.run()
