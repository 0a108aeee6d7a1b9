"""``managedloop console``: serve the web console (:mod:`managedloop.console`) until Ctrl-C.

::

    managedloop console [--store STORE] [--host 127.0.0.1] [--port 8765] [--read-only]
                        [--resume-with MODULE:ATTR] [--temporal ADDRESS [--namespace NS]]
                        [--user-header NAME]

It binds ``127.0.0.1`` unless told otherwise, and prints the URL to open, with the access
token in it: a random token per start, or the one in ``$MANAGEDLOOP_CONSOLE_TOKEN`` (never
a command-line argument, which other users of the machine see in the process list).
``--store`` names the record's store as ``open_store`` reads it (default: the command
line's SQLite store). ``--resume-with`` is a callable ``(parked) -> (provider, agent)``
importable from the current directory; without it the record's approvals are shown and not
decided. ``--temporal`` adds the durable sessions of a Temporal server.
"""

from __future__ import annotations

import argparse
import importlib
import os
import secrets
import sys
from typing import Any, TextIO

import anyio

__all__ = ["TOKEN_ENV", "add_parser", "run"]

TOKEN_ENV = "MANAGEDLOOP_CONSOLE_TOKEN"  # noqa: S105 - the variable's name, not a token
DEFAULT_PORT = 8765


def add_parser(sub: Any) -> None:
    p = sub.add_parser("console", help="serve the web console over the session record")
    p.add_argument("--store", help="the record's store (a path, redis://..., memory:)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    p.add_argument("--read-only", action="store_true", help="show, never decide")
    p.add_argument(
        "--resume-with",
        metavar="MODULE:ATTR",
        help="a callable (parked) -> (provider, agent) that resumes decided sessions",
    )
    p.add_argument("--temporal", metavar="ADDRESS", help="a Temporal server's address")
    p.add_argument("--namespace", default="default", help="the Temporal namespace")
    p.add_argument("--user-header", help="a header naming who decides (set by your proxy)")


def _load(ref: str) -> Any:
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--resume-with takes module:attr, got {ref!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: modules next to the user
    value: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        value = getattr(value, part)
    if not callable(value):
        raise ValueError(f"--resume-with {ref} is not callable")
    return value


def run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        import uvicorn

        from managedloop import console
    except ImportError:
        print(
            "managedloop: error: the console needs its extra: pip install 'managedloop[console]'",
            file=sys.stderr,
        )
        return 2
    from managedloop.stores import open_store

    try:
        resume_with = _load(args.resume_with) if args.resume_with else None
    except (ImportError, AttributeError, ValueError) as exc:
        print(f"managedloop: error: --resume-with: {exc}", file=sys.stderr)
        return 2
    token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
    store = open_store(args.store)

    async def serve() -> None:
        temporal = None
        if args.temporal:
            from temporalio.client import Client

            temporal = await Client.connect(args.temporal, namespace=args.namespace)
        app = console.app(
            store,
            token=token,
            read_only=args.read_only,
            resume_with=resume_with,
            temporal=temporal,
            user_header=args.user_header,
        )
        config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning")
        server = uvicorn.Server(config)
        ended = anyio.Event()

        async def serving() -> None:
            try:
                await server.serve()  # until Ctrl-C (uvicorn's own signal handling)
            finally:
                ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(serving)
            # uvicorn says it is up with a flag, not an event: look at it until it is
            while not server.started and not ended.is_set():  # noqa: ASYNC110
                await anyio.sleep(0.02)
            if server.started:
                sockets = server.servers[0].sockets if server.servers else []
                port = sockets[0].getsockname()[1] if sockets else args.port
                where = f"[{args.host}]" if ":" in args.host else args.host
                print(f"managedloop console: http://{where}:{port}/?token={token}", file=out)
                if args.host not in ("127.0.0.1", "localhost", "::1"):
                    print(
                        f"managedloop console: listening on {args.host}, not only this "
                        "machine: put it behind a TLS reverse proxy (docs/console.md)",
                        file=out,
                    )
                out.flush()

    try:
        anyio.run(serve)
    except KeyboardInterrupt:
        pass
    finally:
        store.close()
    return 0
