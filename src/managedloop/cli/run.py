"""``managedloop run``: drive a real endpoint with tools from the current directory,
streaming the text as it arrives, then print the summary (or one JSON document)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, TextIO

import anyio

from managedloop.cli.exits import EXIT_INTERRUPTED, CliError, FailedError, UsageError, report
from managedloop.cli.interrupt import run_interruptibly
from managedloop.cli.render import Waiting, render_table, result_doc, summary_rows, write_doc
from managedloop.cli.toolrefs import ToolRefError
from managedloop.cli.toolrefs import load_tools as _load_tools
from managedloop.errors import APIStatusError
from managedloop.provisioning.specs import AgentSpec
from managedloop.results import SessionInfo, SessionResult
from managedloop.session.driver import TEXT_DELTA, run
from managedloop.tools import Toolset

__all__ = ["cmd_run", "load_output", "load_tools"]


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
        write_doc(
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


class _NotFoundError(FailedError):
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
