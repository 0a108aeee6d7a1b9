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

Exit codes: the command line's one table (:mod:`managedloop.cli.exits`; 4 is a partial
prune, whose report says which version failed, with ``--json`` under ``reports``). A
read-only command (``resolve``, ``ls``, ``prune --dry-run``) never creates a store: one
that does not exist yet reads as empty.

Secrets never appear: credentials are read from the environment variables the spec file
names, never printed, never stored; a Redis URL's password is masked in every label.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TextIO

import anyio

from managedloop.cli.exits import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_USAGE,
    CliError,
    UsageError,
    classify,
    report,
)
from managedloop.cli.opsargs import COMMANDS, add_parsers
from managedloop.cli.render import Out, Progress
from managedloop.cli.specfile import (
    SpecError,
    SpecFile,
    agent_digest,
    execution_role_arn,
    load,
    make_provider,
    open_spec_store,
)
from managedloop.errors import ManagedLoopError, ProvisioningError
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

_HEX = frozenset("0123456789abcdef")

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


class _PartialError(Exception):
    def __init__(self, message: str, doc: dict[str, Any]) -> None:
        super().__init__(message)
        self.doc = doc


# ---------------------------------------------------------------------------- hosts


def _agent_kind(spec: SpecFile) -> str:
    return "agent" if spec.host == "claude" else "harness"


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


async def _provision(args: argparse.Namespace, spec: SpecFile, store: Store, out: Out) -> Any:
    watch = _Watch(store)
    provider = make_provider(spec)
    results: list[tuple[Handle, str]] = []

    def status(kind: str, base: str, handle: Handle) -> str:
        key = lifecycle.index_key(kind, base, handle.digest8)
        return "built" if key in watch.written else "cached"

    progress = Progress(out)
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
                    "execution_role_arn": execution_role_arn(spec),
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
        raise UsageError(f"--digest takes 8 or 64 lowercase hex characters, got {text!r}")
    return value[:8]


async def _tag(args: argparse.Namespace, spec: SpecFile, store: Store, out: Out) -> Any:
    if args.environment:
        if spec.host != "claude" or spec.environment is None:
            raise UsageError(
                "--environment tags a Claude environment: this spec has none "
                "(on AgentCore the harness folds the environment in)"
            )
        kind, base, current = "environment", spec.environment_base, spec.environment.digest
    else:
        kind, base, current = _agent_kind(spec), spec.agent_base, await agent_digest(spec)
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


async def _resolve(args: argparse.Namespace, spec: SpecFile | None, store: Store, out: Out) -> Any:
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
        raise UsageError("--only environment: this spec has no separate environment to prune")
    return targets


async def _prune(args: argparse.Namespace, spec: SpecFile, store: Store, out: Out) -> Any:
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
            # A harness version the host cannot delete is only forgotten by the store.
            forgot = "would forget" if r["dry_run"] else "forgotten (the host keeps versions)"
            rows = [[n, action] for n in r["archived"]]
            rows += [[n, forgot] for n in r.get("forgotten", [])]
            rows += [[n, "kept"] for n in r["kept"]]
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


async def _ls(args: argparse.Namespace, spec: SpecFile, store: Store, out: Out) -> Any:
    provider = make_provider(spec)
    agent_kind = _agent_kind(spec)
    targets = [(agent_kind, spec.agent_base, (await agent_digest(spec))[:8])]
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


_Command = Callable[[argparse.Namespace, Any, Store, Out], Awaitable[Any]]
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
        raise UsageError(f"--keep must be at least 1, got {keep}")


def run(args: argparse.Namespace, stdout: TextIO) -> int:
    """Run one operations command; returns its exit code (see the module docstring)."""
    out = Out(out=stdout, json=bool(args.json))
    store: Store | None = None
    try:
        _check_keep(args)
        path = getattr(args, "spec", None)
        spec = load(path) if path else None
        store, label = open_spec_store(spec, args.store, create=_writes(args))
        runner = _RUNNERS[args.command]

        async def main() -> Any:
            return await runner(args, spec, store, out)

        doc = anyio.run(main)
        if out.json:
            out.doc({"ok": True, "command": args.command, "store": label, **doc})
        return EXIT_OK
    except _PartialError as exc:
        return _error(out, args, CliError(EXIT_PARTIAL, "prune_partial", str(exc), exc.doc))
    except _NotFoundError as exc:
        return _error(out, args, CliError(EXIT_NOT_FOUND, exc.code, str(exc)))
    except SpecError as exc:
        return _error(out, args, CliError(EXIT_USAGE, exc.code, str(exc)))
    except (UsageError, ManagedLoopError, ImportError, KeyboardInterrupt) as exc:
        # KeyboardInterrupt: asyncio cancels the run first, and the verbs roll back on that
        error = classify(exc)
        assert error is not None
        return _error(out, args, error)
    finally:
        if store is not None:
            store.close()


def _writes(args: argparse.Namespace) -> bool:
    """Whether the command may write the store (a read-only one never creates it)."""
    if args.command in ("resolve", "ls"):
        return False
    return not (args.command == "prune" and args.dry_run)


def _error(out: Out, args: argparse.Namespace, error: CliError) -> int:
    return report(error, command=args.command, json_doc=out.json, out=out.out, err=out.err)
