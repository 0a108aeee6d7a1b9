"""``managedloop demo``: one small agent (two tools) on every host's emulator, or on the
offline in-process model (``--local-model``), printed as one table."""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from typing import Any, Literal, TextIO

from managedloop.cli import hosts as host_modules
from managedloop.cli.exits import UsageError
from managedloop.cli.hosts import HOSTS
from managedloop.cli.render import render_table, result_doc, summary_rows, write_doc
from managedloop.errors import ConfigError, ManagedLoopError
from managedloop.provisioning.specs import AgentSpec
from managedloop.testing.script import ModelRequest, Reply, Step, call, say
from managedloop.tools import tool

__all__ = [
    "DEMO_PROMPT",
    "cmd_demo",
    "convert_temperature",
    "demo_agent",
    "demo_script",
    "get_weather",
]

DEMO_PROMPT = "What is the weather in Paris, in Fahrenheit?"


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


def cmd_demo_model(args: argparse.Namespace, out: TextIO) -> int:
    """The demo agent on the offline in-process model instead of the emulators."""
    from managedloop.cli import local as local_cli

    try:
        result = local_cli.demo_model(demo_agent(), args.prompt)
    except ConfigError as exc:  # the extra is not installed
        raise UsageError(f"demo --local-model: {exc.message}") from None
    if args.json:
        host = {"host": "local-model", "label": local_cli.MODEL_LABEL, "ok": True}
        write_doc(
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
        module = host_modules.host_module(host)
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
        write_doc(out, doc if ok else {**doc, "exit": code})
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
