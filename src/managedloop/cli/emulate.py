"""``managedloop emulate HOST``: serve a host's loopback emulator until Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
import inspect
from types import ModuleType

from managedloop.cli.exits import FailedError, UsageError

__all__ = ["cmd_emulate"]


def _check_port(host: str, port: int) -> None:
    if not 0 <= port <= 65535:  # a socket would raise OverflowError: say it as usage
        raise UsageError(f"emulate {host}: --port must be 0..65535, got {port}")


def cmd_emulate(args: argparse.Namespace, module: ModuleType) -> int:
    from managedloop.testing import EmulatorStartError  # loads aiohttp: only when emulating

    _check_port(args.host, args.port)
    kwargs = {"json": True} if args.json else {}
    if args.json and "json" not in inspect.signature(module.emulate).parameters:
        raise UsageError(f"emulate {args.host}: this host's emulator has no --json output")
    with contextlib.suppress(KeyboardInterrupt):
        try:
            module.emulate(args.host, args.port, **kwargs)
        except EmulatorStartError as exc:
            if exc.code == "port_in_use":  # the user's choice of port: usage, exit 2
                where = f"{exc.context.get('host', '127.0.0.1')}:{args.port}"
                raise UsageError(
                    f"emulate {args.host}: cannot serve on {where}: port {args.port} is "
                    "already in use; pick another --port (0 picks a free one)"
                ) from None
            raise FailedError(
                exc.code, f"emulate {args.host}: the emulator did not start: {exc.message}"
            ) from None
        except OSError as exc:  # no socket at all (e.g. out of file descriptors)
            raise FailedError(
                "emulator_start_failed", f"emulate {args.host}: the emulator did not start: {exc}"
            ) from None
    return 0
