"""``managedloop worker``: serve a self-hosted environment's work queue from this machine.

A long-running process for a fleet: it polls the ``self_hosted`` environment's queue and
serves every session that lands on it (built-in tools run in ``--workdir``), with the
SDK's ``EnvironmentWorker`` per item (see
:mod:`managedloop.providers.claude._selfhosted`). On SIGTERM or SIGINT it drains: no new
item is taken, running tool calls finish and their results are posted (at most
``--drain-timeout`` seconds), the items are released, and it exits 0.

The environment key is read from the environment (``ANTHROPIC_ENVIRONMENT_KEY``, the name
the SDK's own worker reads) or from ``--environment-key-file``, never from the command line
(where ``ps`` shows it); no tool subprocess sees it. The organisation API key is not
needed: a worker's every request carries the environment key or an item's token.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from typing import Any, TextIO

__all__ = ["add_parser", "run"]

KEY_VARIABLE = "ANTHROPIC_ENVIRONMENT_KEY"


def add_parser(sub: Any) -> None:
    """Register ``worker`` on the ``managedloop`` parser's subparsers."""
    p = sub.add_parser(
        "worker",
        help="serve a self-hosted environment's built-in tools from this machine",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("environment", help="the self_hosted environment's id (env_...)")
    p.add_argument("--workdir", default=".", help="where the tools run (default: .)")
    p.add_argument(
        "--environment-key-file",
        help=f"read the environment key from this file (default: ${KEY_VARIABLE})",
    )
    p.add_argument("--base-url", help="the API's base URL (default: $ANTHROPIC_BASE_URL)")
    p.add_argument("--worker-id", help="this worker's id (default: <hostname>-<12 hex>)")
    p.add_argument("--tool-timeout", type=float, help="seconds per tool call (default: 300)")
    p.add_argument("--max-output", type=int, help="characters per tool result (default: 100000)")
    p.add_argument(
        "--max-idle",
        type=float,
        default=60.0,
        help="seconds to hold a session that ended its turn (default: 60; -1: until it ends)",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=300.0,
        help="on SIGTERM/SIGINT, seconds to let running tool calls finish (default: 300)",
    )


def _key(args: argparse.Namespace) -> str:
    from managedloop.errors import InvalidOptionsError

    if args.environment_key_file:
        with open(args.environment_key_file, encoding="utf-8") as f:
            key = f.read().strip()
    else:
        key = os.environ.get(KEY_VARIABLE, "")
    if not key:
        raise InvalidOptionsError(
            f"no environment key: set {KEY_VARIABLE} or pass --environment-key-file",
            option="environment_key",
        )
    return key


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Serve until SIGTERM/SIGINT; 0 after a clean drain."""
    import anyio

    from managedloop.providers.claude import SandboxWorker, SelfHostedEnvironment

    key = _key(args)
    options: dict[str, Any] = {}
    if args.tool_timeout is not None:
        options["tool_timeout"] = args.tool_timeout
    if args.max_output is not None:
        options["max_output"] = args.max_output
    sandbox = SelfHostedEnvironment(
        environment_id=args.environment,
        environment_key=key,
        workdir=args.workdir,
        max_idle=args.max_idle if args.max_idle >= 0 else None,
        worker_id=args.worker_id,
        **options,
    )
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    for name in ("managedloop", "anthropic.lib.environments", "anthropic.lib.tools"):
        logging.getLogger(name).setLevel(logging.INFO)  # claims, calls, stops; not each poll

    async def serve() -> None:
        import anthropic

        base_url = args.base_url or os.environ.get("ANTHROPIC_BASE_URL")
        # The worker's client holds only the environment key: every request goes through
        # the SDK's bearer-only copies of it (the key, or a work item's sessions token).
        client = anthropic.AsyncAnthropic(api_key=None, auth_token=key, base_url=base_url)
        async with client:
            worker = SandboxWorker(client, sandbox)
            await worker.check_key()  # a refused key: exit 2 now, not a silent idle worker
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:

                async def on_signal() -> None:
                    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                        async for signum in signals:
                            print(
                                f"managedloop worker: {signal.Signals(signum).name}: draining",
                                file=sys.stderr,
                                flush=True,
                            )
                            stop.set()
                            return

                tg.start_soon(on_signal)
                print(
                    f"managedloop worker {worker.worker_id}: serving {args.environment} "
                    f"in {sandbox.workdir}",
                    file=out,
                    flush=True,
                )
                await worker.run(stop, drain_timeout=args.drain_timeout)
                tg.cancel_scope.cancel()
            print(f"managedloop worker {worker.worker_id}: drained", file=out, flush=True)

    try:
        anyio.run(serve)
    except BaseExceptionGroup as group:  # a task's failure: report it as itself
        raise group.exceptions[0] from None
    return 0
