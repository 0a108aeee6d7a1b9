"""What the ``managedloop`` command shows: the demo's and ``run``'s summary table, the
operations commands' tables and JSON documents, and the live progress of a long wait.

Results go to stdout; progress, notes and errors to stderr, so ``--json`` output and a
pipe stay clean. Tables use ``rich`` when it is installed (the ``cli`` extra), plain text
otherwise.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from managedloop.results import SessionResult

__all__ = [
    "CELL",
    "Out",
    "Progress",
    "Waiting",
    "make_console",
    "plain_table",
    "render_table",
    "result_doc",
    "summary_rows",
    "write_doc",
]

CELL = 34  # characters per table cell line: three host columns fit a 120-column terminal


# -- a session's summary ---------------------------------------------------------------


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
        min(max(len(line) for cell in col for line in cell.splitlines() or [""]), CELL)
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


# -- the operations commands' output ---------------------------------------------------


@dataclass
class Out:
    """Where a command writes: ``out`` for results, stderr for progress and errors."""

    out: TextIO
    json: bool
    err: TextIO = field(default_factory=lambda: sys.stderr)

    def doc(self, doc: dict[str, Any]) -> None:
        self.out.write(json.dumps(doc, ensure_ascii=False) + "\n")

    def table(self, title: str, headers: list[str], rows: list[list[str]]) -> None:
        try:
            from rich.table import Table
        except ImportError:  # the `cli` extra is not installed: plain text
            self.out.write(f"{title}\n{plain_table(headers, rows)}\n")
            return
        # min_width: a title wider than the columns would otherwise wrap mid-phrase
        table = Table(title=title, title_justify="left", header_style="bold", min_width=len(title))
        for h in headers:
            table.add_column(h, overflow="fold")
        for row in rows:
            table.add_row(*row)
        make_console(self.out).print(table)

    def line(self, text: str) -> None:
        self.out.write(text + "\n")


def plain_table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell (no wrapping: ids and names stay copyable)."""
    widths = [max(len(c) for c in col) for col in zip(headers, *rows, strict=True)]
    lines = [headers, ["-" * w for w in widths], *rows]
    return "\n".join(
        " | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def make_console(file: TextIO) -> Any:
    """The ``rich`` console for ``file``: colour and live updates on a terminal, plain text
    120 columns wide elsewhere (a log, a pipe). Tests replace it to force a terminal."""
    from rich.console import Console

    terminal = hasattr(file, "isatty") and file.isatty()
    return Console(file=file, width=None if terminal else 120, highlight=False)


class Progress:
    """The AgentCore wait's ``progress=`` callback: a live display on a terminal, a line per
    status change elsewhere, JSON lines with ``--json``."""

    def __init__(self, out: Out) -> None:
        self.out = out
        self.last: tuple[str, str | None] | None = None
        self.display: Any = None
        self.tasks: dict[str, Any] = {}
        self.console: Any = None

    def __call__(self, ctx: Any) -> None:
        what = (
            f"endpoint {ctx.endpoint_name}"
            if ctx.phase == "endpoint"
            else f"harness {ctx.harness_id}"
        )
        status = ctx.last_status or "absent"
        if self.out.json:
            event = {
                "event": "progress",
                "phase": ctx.phase,
                "harness_id": ctx.harness_id,
                "endpoint_name": ctx.endpoint_name,
                "status": ctx.last_status,
                "polls": ctx.polls,
                "elapsed": round(ctx.elapsed, 3),
            }
            self.out.err.write(json.dumps(event) + "\n")
            self.out.err.flush()
            return
        if self.console is None:
            try:
                self.console = make_console(self.out.err)
            except ImportError:
                self.console = False
        if self.console is not False and self.console.is_terminal:
            self._live(ctx.phase, what, status)
            return
        if self.last != (ctx.phase, status):  # a log gets one line per change, not per poll
            self.last = (ctx.phase, status)
            self.out.err.write(
                f"waiting: {what}: {status} (poll {ctx.polls}, {ctx.elapsed:.1f} s)\n"
            )
            self.out.err.flush()

    def _live(self, phase: str, what: str, status: str) -> None:
        from rich.progress import Progress as RichProgress
        from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

        if self.display is None:
            self.display = RichProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TextColumn("[bold]{task.fields[status]}"),
                TimeElapsedColumn(),
                console=self.console,
            )
            self.display.start()
        if phase not in self.tasks:
            for task in self.tasks.values():  # the harness is READY: its row stops
                self.display.update(task, completed=1, total=1)
            self.tasks[phase] = self.display.add_task(what, total=None, status=status)
        done = status == "READY"
        self.display.update(
            self.tasks[phase], status=status, **({"completed": 1, "total": 1} if done else {})
        )

    def close(self) -> None:
        if self.display is not None:
            self.display.stop()
            self.display = None


def write_doc(out: TextIO, doc: dict[str, Any]) -> None:
    """One JSON document on one line of ``out`` (``--json``)."""
    out.write(json.dumps(doc, ensure_ascii=False, default=str) + "\n")
    out.flush()


def result_doc(result: SessionResult) -> dict[str, Any]:
    """A result as ``--json`` shows it: the summary's fields as data (the raw events and
    the transcript stay out: ``SessionResult.to_dict()`` has them)."""
    return {
        "terminal": result.terminal.value,
        "reason": result.reason,
        "stop_reason": result.stop_reason,
        "text": result.text,
        "tool_uses": [
            {"id": u.id, "name": u.name, "input": u.input} for u in result.custom_tool_uses
        ],
        "usage": {
            "input_tokens": result.usage.input_tokens,
            "output_tokens": result.usage.output_tokens,
            "cache_read_input_tokens": result.usage.cache_read_input_tokens,
            "cache_creation_input_tokens": result.usage.cache_creation_input_tokens,
            "cost_usd": result.usage.cost_usd,
            "reported": bool(result.usage.raw or result.usage.total_tokens),
        },
        "turns": result.turns,
        "session_id": result.session_id,
        # the typed result (run --output), as JSON; null without one
        "output": result.to_dict().get("output"),
        "output_strategy": getattr(result, "output_strategy", None),
    }


class Waiting:
    """What a session waits for (the model, a tool), as a spinner on a terminal's stderr;
    nothing at all when stderr is not a terminal (a pipe, a log) or ``rich`` is absent."""

    def __init__(self, err: TextIO) -> None:
        self.console: Any = None
        self.status: Any = None
        if hasattr(err, "isatty") and err.isatty():
            try:
                self.console = make_console(err)
            except ImportError:  # the `cli` extra is not installed
                self.console = None

    def show(self, text: str) -> None:
        if self.console is None:
            return
        if self.status is None:
            self.status = self.console.status(text)
            self.status.start()
        else:
            self.status.update(text)

    def hide(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
