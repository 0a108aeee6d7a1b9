"""The operations commands: ``provision``, ``tag``, ``resolve``, ``prune``, ``ls``.

They run the provisioning lifecycle (:mod:`managedloop.provisioning.lifecycle`) from a
spec file (format: :mod:`managedloop.cli.specfile`) against a persistent store, so a cron
job, a deploy step and a developer's shell all see the same agents::

    managedloop provision SPEC [--tag TAG ...]        build what is absent (a store hit
                                                      makes no request); tag the result
    managedloop tag SPEC TAG [--digest HEX] [--environment]
                                                      point base:TAG at the spec's version
                                                      (or at an older --digest)
    managedloop resolve BASE:TAG [--spec SPEC] [--kind K]
                                                      print the handle a tag points at
    managedloop prune SPEC --keep N [--dry-run] [--only agent|environment]
                                                      archive (AgentCore: delete) old,
                                                      untagged versions, oldest first
    managedloop ls SPEC [--keep N]                    the host's versions of the spec's
                                                      bases, their tags, what is stored,
                                                      and with --keep what prune archives

Every command takes ``--store STORE`` (overrides the spec file's ``store``; default an
SQLite file in the user's cache directory) and ``--json``: one JSON document on stdout,
``{"ok": true, "command": ..., ...}``, or ``{"ok": false, "exit": N, "error": {"code",
"message"}}``; with ``--json`` the AgentCore wait reports progress as JSON lines on stderr
(``{"event": "progress", "phase": "ready"|"endpoint", "status", "polls", "elapsed",
...}``). Without ``--json``, tables on stdout (``rich`` when installed, plain text
otherwise) and, while a harness and its endpoint become READY, a live progress display
on stderr (on a terminal; elsewhere, such as a cron log, one line per status change).

Exit codes (stable; a cron job branches on them):

* ``0`` — done, including "nothing to do" (everything was already built; nothing to prune);
* ``1`` — failed: the host, the network or the store (a named error on stderr);
* ``2`` — usage: a bad flag, a bad spec file, a missing environment variable, an invalid
  option (all detected before any request);
* ``3`` — not found: an unknown tag, a tag whose version the store does not track, or
  ``tag`` of a version that was never provisioned;
* ``4`` — partial prune: some versions were archived, then one failed (the report says
  which, with ``--json`` under ``reports``);
* ``130`` — interrupted (Ctrl-C).

Argument errors argparse itself finds (a missing positional, ``--keep x``) exit 2 with a
plain message on stderr, also under ``--json``.

Secrets never appear: credentials are read from the environment variables the spec file
names, never printed, never stored; a Redis URL's password is masked in every label.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio

from managedloop.cli.specfile import SpecError, SpecFile, load, open_spec_store
from managedloop.config import MISSING
from managedloop.errors import (
    ConfigError,
    InvalidOptionsError,
    ManagedLoopError,
    ProvisioningError,
    ToolDefinitionError,
)
from managedloop.provisioning import lifecycle
from managedloop.provisioning.handles import Handle
from managedloop.provisioning.names import version_of
from managedloop.stores import Store, Updater

__all__ = [
    "COMMANDS",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "EXIT_USAGE",
    "add_parsers",
    "run",
    "set_testing",
]

COMMANDS = ("provision", "tag", "resolve", "prune", "ls")
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_PARTIAL = 4
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT
_NOT_FOUND_CODES = ("unknown_tag", "untracked_digest", "not_provisioned")
_USAGE_ERRORS = (InvalidOptionsError, ConfigError, ToolDefinitionError)
_HEX = frozenset("0123456789abcdef")

EXIT_HELP = """exit codes: 0 done (also: nothing to do), 1 failed (host, network, store),
2 usage (bad flag, spec file or environment; before any request), 3 not found (unknown
tag, untracked version), 4 partial prune (some archived, then one failed), 130
interrupted"""

_testing: dict[str, Any] = {}


def set_testing(*, clock: Any = None, sleep: Any = None) -> None:
    """Tests: the clock and sleep the AgentCore waits use (share a ``ManualClock`` with the
    emulator so waits are exact); ``set_testing()`` restores the real ones."""
    _testing.clear()
    if clock is not None:
        _testing["clock"] = clock
    if sleep is not None:
        _testing["sleep"] = sleep


class _NotFoundError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class _UsageError(Exception):
    """A bad flag value that argparse cannot check (exit 2, code ``usage``)."""


class _PartialError(Exception):
    def __init__(self, message: str, doc: dict[str, Any]) -> None:
        super().__init__(message)
        self.doc = doc


# ---------------------------------------------------------------------------- parsing


def add_parsers(sub: Any) -> None:
    """Register the commands on the ``managedloop`` parser's subparsers."""

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", help="a store: PATH, sqlite:PATH, file:PATH, redis://...")
        p.add_argument("--json", action="store_true", help="one JSON document on stdout")

    kw: dict[str, Any] = {"epilog": EXIT_HELP}
    p = sub.add_parser("provision", help="build the spec's agent/environment if absent", **kw)
    p.add_argument("spec", help="a TOML spec file (format: pydoc managedloop.cli.specfile)")
    p.add_argument("--tag", action="append", default=[], help="then tag it (repeatable)")
    common(p)

    p = sub.add_parser("tag", help="point BASE:TAG at the spec's version", **kw)
    p.add_argument("spec", help="a TOML spec file")
    p.add_argument("tag", help="the tag, e.g. prod")
    p.add_argument("--digest", help="tag this provisioned version (8 or 64 hex) instead")
    p.add_argument("--environment", action="store_true", help="tag the environment (Claude)")
    common(p)

    p = sub.add_parser("resolve", help="print the handle BASE:TAG points at", **kw)
    p.add_argument("ref", help="BASE:TAG")
    p.add_argument("--spec", help="read the store from this spec file")
    p.add_argument(
        "--kind",
        choices=("agent", "environment", "harness"),
        help="which kind when one base has the tag for several",
    )
    common(p)

    p = sub.add_parser("prune", help="archive old untagged versions of the spec's bases", **kw)
    p.add_argument("spec", help="a TOML spec file")
    p.add_argument("--keep", type=int, required=True, help="how many newest versions to keep")
    p.add_argument("--dry-run", action="store_true", help="report, archive nothing")
    p.add_argument("--only", choices=("agent", "environment"), help="prune one base only")
    common(p)

    p = sub.add_parser("ls", help="the host's versions of the spec's bases, tags, store", **kw)
    p.add_argument("spec", help="a TOML spec file")
    p.add_argument("--keep", type=int, help="also show what prune --keep N would archive")
    common(p)


# ---------------------------------------------------------------------------- output


@dataclass
class _Out:
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
            self.out.write(f"{title}\n{_plain_table(headers, rows)}\n")
            return
        table = Table(title=title, title_justify="left", header_style="bold")
        for h in headers:
            table.add_column(h, overflow="fold")
        for row in rows:
            table.add_row(*row)
        make_console(self.out).print(table)

    def line(self, text: str) -> None:
        self.out.write(text + "\n")


def _plain_table(headers: list[str], rows: list[list[str]]) -> str:
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


class _Progress:
    """The AgentCore wait's ``progress=`` callback: a live display on a terminal, a line per
    status change elsewhere, JSON lines with ``--json``."""

    def __init__(self, out: _Out) -> None:
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
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        if self.display is None:
            self.display = Progress(
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


# ---------------------------------------------------------------------------- hosts


def make_provider(spec: SpecFile, environ: Mapping[str, str] | None = None) -> Any:
    """The host's provider from the spec's settings; credentials from the environment."""
    env = os.environ if environ is None else environ
    s = spec.host_settings
    if spec.host == "claude":
        from managedloop.providers.claude import ClaudeManagedAgents

        variable = spec.credential_env["api_key"]
        bearer = s.get("bearer_token_file")
        key = env.get(variable) or None
        if key is None and not bearer:
            raise SpecError(
                f"{spec.path}: the environment variable {variable} (host.api_key_env) is not "
                "set: it holds the API key"
            )
        kwargs: dict[str, Any] = {
            "api_key": None if bearer else key,
            "bearer_token_file": bearer or None,
            "base_url": s.get("base_url", MISSING),
        }
        if "max_retries" in s:
            kwargs["max_retries"] = s["max_retries"]
        return ClaudeManagedAgents(**kwargs)
    from managedloop.providers.agentcore import BedrockAgentCore

    creds: dict[str, Any] = {}
    for name, variable in spec.credential_env.items():
        if not env.get(variable):
            raise SpecError(
                f"{spec.path}: the environment variable {variable} (host.{name}_env) is not set"
            )
        creds[f"aws_{name}"] = env[variable]
    session = None
    if s.get("profile"):
        import botocore.session

        session = botocore.session.Session(profile=s["profile"])
    return BedrockAgentCore(
        region_name=s.get("region"),
        endpoint_url=s.get("endpoint_url"),
        control_endpoint_url=s.get("control_endpoint_url"),
        session=session,
        **creds,
    )


def _agent_kind(spec: SpecFile) -> str:
    return "agent" if spec.host == "claude" else "harness"


async def _agent_digest(spec: SpecFile) -> str:
    """The digest of the spec's agent on its host, without credentials or a request (on
    AgentCore the harness digest folds the environment in: the host's own rule)."""
    if spec.host == "claude":
        return spec.agent.digest
    from managedloop.providers.agentcore import BedrockAgentCore

    with BedrockAgentCore(region_name="us-east-1") as offline:  # never sends: digest only
        async with offline.lifecycle() as host:
            return host.agent_digest(spec.agent, spec.environment)


def _handle_doc(handle: Handle, status: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": handle.kind, **handle.to_dict()}
    if status is not None:
        doc["status"] = status
    return doc


class _Watch:
    """A store that notes which keys were written: ``ensure`` writes an index entry only
    when it built (or adopted) a version, so "written" means "not a store hit"."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.written: set[str] = set()

    def get(self, key: str) -> dict[str, Any] | None:
        return self.store.get(key)

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        self.written.add(key)
        self.store.put(key, value)

    def update(self, key: str, fn: Updater) -> dict[str, Any] | None:
        self.written.add(key)
        return self.store.update(key, fn)

    def delete(self, key: str) -> bool:
        return self.store.delete(key)

    def scan(self, prefix: str) -> dict[str, dict[str, Any]]:
        return self.store.scan(prefix)

    def close(self) -> None:
        self.store.close()


# ---------------------------------------------------------------------------- commands


async def _provision(args: argparse.Namespace, spec: SpecFile, store: Store, out: _Out) -> Any:
    watch = _Watch(store)
    provider = make_provider(spec)
    results: list[tuple[Handle, str]] = []

    def status(kind: str, base: str, handle: Handle) -> str:
        key = lifecycle.index_key(kind, base, handle.digest8)
        return "built" if key in watch.written else "cached"

    progress = _Progress(out)
    try:
        async with provider:
            if spec.host == "claude":
                if spec.environment is not None:
                    env = await lifecycle.ensure_environment(
                        provider, spec.environment, store=watch
                    )
                    results.append((env, status("environment", spec.environment_base, env)))
                agent = await lifecycle.ensure_agent(provider, spec.agent, store=watch)
            else:
                s = spec.host_settings
                options: dict[str, Any] = {
                    "execution_role_arn": s.get("execution_role_arn"),
                    "endpoint_name": s.get("endpoint_name", "DEFAULT"),
                    "progress": progress,
                    **_testing,
                }
                for key in ("timeout", "poll_interval"):
                    if key in s:
                        options[key] = s[key]
                agent = await lifecycle.ensure_agent(
                    provider, spec.agent, store=watch, environment=spec.environment, **options
                )
    finally:
        progress.close()
    results.append((agent, status(agent.kind, spec.agent_base, agent)))
    for name in args.tag:
        for handle, _ in results:
            base = spec.environment_base if handle.kind == "environment" else spec.agent_base
            await lifecycle.tag(base, name, handle, store=store)
    doc = {
        "handles": [_handle_doc(h, st) for h, st in results],
        "tags": list(args.tag),
        "built": sum(st == "built" for _, st in results),
    }
    if not out.json:
        rows = [[h.kind, h.name, h.id, st] for h, st in results]
        out.table("provisioned", ["kind", "name", "id", "status"], rows)
        if doc["built"] == 0:
            out.line("nothing to build: every version was already in the store")
        for name in args.tag:
            out.line(f"tagged {name}")
    return doc


def _digest8(text: str) -> str:
    value = text.strip()
    if len(value) not in (8, 64) or not set(value) <= _HEX:
        raise _UsageError(f"--digest takes 8 or 64 lowercase hex characters, got {text!r}")
    return value[:8]


async def _tag(args: argparse.Namespace, spec: SpecFile, store: Store, out: _Out) -> Any:
    if args.environment:
        if spec.host != "claude" or spec.environment is None:
            raise _UsageError(
                "--environment tags a Claude environment: this spec has none "
                "(on AgentCore the harness folds the environment in)"
            )
        kind, base, current = "environment", spec.environment_base, spec.environment.digest
    else:
        kind, base, current = _agent_kind(spec), spec.agent_base, await _agent_digest(spec)
    digest8 = _digest8(args.digest) if args.digest else current[:8]
    lifecycle.parse_reference(f"{base}:{args.tag}")  # a malformed tag fails before any write
    if not await lifecycle.is_tracked(base, digest8, kind=kind, store=store):
        raise _NotFoundError(
            "not_provisioned",
            f"{kind} {base} version {digest8} is not in the store: run `managedloop "
            "provision` first (or give the --digest of a provisioned version)",
        )
    previous: str | None = None
    try:
        previous = (await lifecycle.resolve(f"{base}:{args.tag}", store=store, kind=kind)).digest8
    except ProvisioningError:  # no such tag yet (or it pointed at a forgotten version)
        previous = None
    await lifecycle.tag(base, args.tag, digest8, store=store, kind=kind)
    ref = f"{base}:{args.tag}"
    if not out.json:
        moved = "" if previous in (None, digest8) else f" (was {previous})"
        out.line(f"{ref} -> {kind} {digest8}{moved}")
    return {"ref": ref, "kind": kind, "digest8": digest8, "previous": previous}


async def _resolve(args: argparse.Namespace, spec: SpecFile | None, store: Store, out: _Out) -> Any:
    handle = await lifecycle.resolve(args.ref, store=store, kind=args.kind)
    if not out.json:
        rows = [[k, str(v)] for k, v in _handle_doc(handle).items()]
        out.table(args.ref, ["field", "value"], rows)
    return {"ref": args.ref, "handle": _handle_doc(handle)}


def _prune_targets(spec: SpecFile, only: str | None) -> list[tuple[str, str]]:
    targets = []
    if only in (None, "agent"):
        targets.append(("agent", spec.agent_base))
    if only in (None, "environment") and spec.host == "claude" and spec.environment is not None:
        targets.append(("environment", spec.environment_base))
    if not targets:
        raise _UsageError("--only environment: this spec has no separate environment to prune")
    return targets


async def _prune(args: argparse.Namespace, spec: SpecFile, store: Store, out: _Out) -> Any:
    targets = _prune_targets(spec, args.only)
    provider = make_provider(spec)
    reports: list[dict[str, Any]] = []
    failure: ProvisioningError | None = None
    async with provider:
        for what, base in targets:
            verb = lifecycle.prune_agents if what == "agent" else lifecycle.prune_environments
            try:
                report = await verb(
                    provider, base, keep=args.keep, store=store, dry_run=args.dry_run
                )
            except ProvisioningError as exc:
                partial = exc.context.get("report")
                if exc.code != "prune_partial" or not isinstance(partial, lifecycle.PruneReport):
                    raise
                reports.append(partial.to_dict())
                failure = exc
                break  # the first failure stops the prune, as the verbs do
            reports.append(report.to_dict())
    if not out.json:
        for r in reports:
            action = "would archive" if r["dry_run"] else "archived"
            rows = [[n, action] for n in r["archived"]] + [[n, "kept"] for n in r["kept"]]
            if r["failed"]:
                rows.append([r["failed"], f"FAILED ({r['reason']})"])
            title = f"{r['kind']} {r['base']}: prune --keep {args.keep}"
            if rows:
                out.table(title, ["version", "action"], rows)
            else:
                out.line(f"{title}: no versions")
    doc = {"dry_run": args.dry_run, "keep": args.keep, "reports": reports}
    if failure is not None:
        raise _PartialError(f"{failure.code}: {failure.message}", doc)
    return doc


async def _ls(args: argparse.Namespace, spec: SpecFile, store: Store, out: _Out) -> Any:
    provider = make_provider(spec)
    agent_kind = _agent_kind(spec)
    targets = [(agent_kind, spec.agent_base, (await _agent_digest(spec))[:8])]
    if spec.host == "claude" and spec.environment is not None:
        targets.append(("environment", spec.environment_base, spec.environment.digest8))
    bases: list[dict[str, Any]] = []

    async with provider:
        async with provider.lifecycle() as host:
            for kind, base, current in targets:
                live = lifecycle.versions(await host.listing(kind), base, host.policy)
                tags: dict[str, Any] = dict(await lifecycle.tags(base, kind=kind, store=store))
                rows: list[dict[str, Any]] = []
                for item in live:
                    d8 = str(version_of(item.name, base, host.policy))
                    rows.append(
                        {
                            "name": item.name,
                            "id": item.id,
                            "arn": item.extra.get("arn"),
                            "digest8": d8,
                            "created_at": item.created_at,
                            "status": item.extra.get("status"),
                            "tags": sorted(t for t, v in tags.items() if v == d8),
                            "stored": await lifecycle.is_tracked(base, d8, kind=kind, store=store),
                            "current": d8 == current,
                        }
                    )
                bases.append(
                    {
                        "kind": kind,
                        "base": base,
                        "current": current,
                        "tags": tags,
                        "versions": rows,
                    }
                )
        if args.keep is not None:
            for b in bases:
                verb = (
                    lifecycle.prune_environments
                    if b["kind"] == "environment"
                    else lifecycle.prune_agents
                )
                report = await verb(provider, b["base"], keep=args.keep, store=store, dry_run=True)
                doomed = set(report.archived)
                for v in b["versions"]:
                    v["prune"] = "archive" if v["name"] in doomed else "keep"
    if not out.json:
        for b in bases:
            headers = ["version", "id", "created", "tags", "stored", "current"]
            if spec.host == "agentcore":
                headers.insert(3, "status")
            if args.keep is not None:
                headers.append(f"prune --keep {args.keep}")
            table: list[list[str]] = []
            for v in b["versions"]:
                row = [v["name"], v["id"], v["created_at"], ", ".join(v["tags"]) or "-"]
                row += ["yes" if v["stored"] else "-", "*" if v["current"] else ""]
                if spec.host == "agentcore":
                    row.insert(3, str(v["status"]))
                if args.keep is not None:
                    row.append(v["prune"])
                table.append(row)
            title = f"{b['kind']} {b['base']} (spec version {b['current']})"
            if table:
                out.table(title, headers, table)
            else:
                out.line(f"{title}: no live versions on the host")
            dangling = sorted(
                t for t, d in b["tags"].items() if d not in {v["digest8"] for v in b["versions"]}
            )
            for t in dangling:
                out.line(f"tag {b['base']}:{t} -> {b['tags'][t]} (not live on the host)")
    return {"bases": bases}


_Command = Callable[[argparse.Namespace, Any, Store, _Out], Awaitable[Any]]
_RUNNERS: dict[str, _Command] = {
    "provision": _provision,
    "tag": _tag,
    "resolve": _resolve,
    "prune": _prune,
    "ls": _ls,
}


# ---------------------------------------------------------------------------- entry


def _check_keep(args: argparse.Namespace) -> None:
    keep = getattr(args, "keep", None)
    if keep is not None and keep < 1:
        raise _UsageError(f"--keep must be at least 1, got {keep}")


def run(args: argparse.Namespace, stdout: TextIO) -> int:
    """Run one operations command; returns its exit code (see the module docstring)."""
    out = _Out(out=stdout, json=bool(args.json))
    store: Store | None = None
    try:
        _check_keep(args)
        path = getattr(args, "spec", None)
        spec = load(path) if path else None
        store, label = open_spec_store(spec, args.store)
        runner = _RUNNERS[args.command]

        async def main() -> Any:
            return await runner(args, spec, store, out)

        doc = anyio.run(main)
        if out.json:
            out.doc({"ok": True, "command": args.command, "store": label, **doc})
        return EXIT_OK
    except _PartialError as exc:
        return _error(out, EXIT_PARTIAL, "prune_partial", str(exc), exc.doc)
    except _NotFoundError as exc:
        return _error(out, EXIT_NOT_FOUND, exc.code, str(exc))
    except SpecError as exc:
        return _error(out, EXIT_USAGE, "invalid_spec", str(exc))
    except _UsageError as exc:
        return _error(out, EXIT_USAGE, "usage", str(exc))
    except ProvisioningError as exc:
        code = EXIT_NOT_FOUND if exc.code in _NOT_FOUND_CODES else EXIT_FAILED
        return _error(out, code, exc.code, exc.message)
    except _USAGE_ERRORS as exc:
        return _error(out, EXIT_USAGE, exc.code, exc.message)
    except ManagedLoopError as exc:
        return _error(out, EXIT_FAILED, exc.code, exc.message)
    except ImportError as exc:  # an optional SDK (anthropic, botocore, redis) is missing
        return _error(out, EXIT_FAILED, "missing_dependency", str(exc))
    except KeyboardInterrupt:  # asyncio cancels the run first: the verbs roll back on that
        return _error(out, EXIT_INTERRUPTED, "interrupted", "interrupted")
    finally:
        if store is not None:
            store.close()


def _error(
    out: _Out, code: int, error: str, message: str, extra: dict[str, Any] | None = None
) -> int:
    if out.json:
        doc: dict[str, Any] = {
            "ok": False,
            "exit": code,
            "error": {"code": error, "message": message},
        }
        out.doc({**doc, **(extra or {})})
    word = "error" if code == EXIT_USAGE else "not found" if code == EXIT_NOT_FOUND else "failed"
    print(f"managedloop: {word}: {error}: {message}", file=out.err)
    return code
