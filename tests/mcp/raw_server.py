"""A misbehaving MCP server written by hand (JSON-RPC lines over stdio), for what the SDK's
own server API refuses to send: ``python raw_server.py <mode>``.

It speaks the 2025-06-18 handshake (``server/discover`` is refused with -32601, so the
client falls back to ``initialize``) and lists one tool, ``echo``. Modes, for ``tools/call``:
``malformed`` answers a result that is not a ``CallToolResult`` (``content`` is a string);
``garbage`` answers a line that is not JSON and then nothing; ``rpc_error`` answers a
JSON-RPC error whose message is 5,000 characters long. Mode ``array_schema`` lists a tool
whose input schema is not an object schema.
"""

from __future__ import annotations

import json
import sys
from typing import Any

MODE = sys.argv[1] if len(sys.argv) > 1 else "malformed"


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}}
    if MODE == "array_schema":
        schema = {"type": "array", "items": {"type": "string"}}
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            continue  # a notification
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "result": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "raw", "version": "0"},
                    },
                }
            )
        elif method == "tools/list":
            tool = {"name": "echo", "description": "Echo.", "inputSchema": schema}
            send({"jsonrpc": "2.0", "id": ident, "result": {"tools": [tool]}})
        elif method == "tools/call" and MODE == "malformed":
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": "oops", "isError": 7}})
        elif method == "tools/call" and MODE == "garbage":
            sys.stdout.write("this is not JSON\n")
            sys.stdout.flush()
        elif method == "tools/call" and MODE == "rpc_error":
            error = {"code": -32000, "message": "E" * 5000}
            send({"jsonrpc": "2.0", "id": ident, "error": error})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": ident, "result": {}})
        else:
            error = {"code": -32601, "message": f"method not found: {method}"}
            send({"jsonrpc": "2.0", "id": ident, "error": error})


if __name__ == "__main__":
    main()
