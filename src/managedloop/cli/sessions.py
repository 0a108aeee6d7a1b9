"""``managedloop sessions``: list, show, update, archive and delete Claude sessions.

The credentials come as for ``managedloop run --provider claude``: ``ANTHROPIC_API_KEY``
or ``--bearer-token-file`` (never a key on the command line); ``--base-url`` points at
another endpoint (an emulator). Each verb prints one line per session (``id status
title``) or, with ``--json``, the API's JSON. A failure is one line on stderr and exit
code 1 (bad usage or options: 2).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import anyio

from managedloop.config import MISSING
from managedloop.errors import InvalidOptionsError

__all__ = ["add_parser", "run"]

STATUSES = ("idle", "running", "rescheduling", "terminated")


def add_parser(sub: Any) -> None:
    """Register ``sessions`` and its verbs on the ``managedloop`` parser's subparsers."""
    parser = sub.add_parser("sessions", help="list, show, update, archive, delete Claude sessions")
    verbs = parser.add_subparsers(
        dest="verb", required=True, parser_class=type(parser), help="what to do"
    )

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--base-url", help="API base URL (default: https://api.anthropic.com)")
        p.add_argument("--bearer-token-file", help="JSON {access_token, expires_at}")
        p.add_argument("--json", action="store_true", help="print the API's JSON")

    p = verbs.add_parser("list", help="every session, newest first")
    p.add_argument("--agent-id", help="only this agent's sessions")
    p.add_argument("--status", action="append", choices=STATUSES, help="repeatable")
    p.add_argument("--archived", action="store_true", help="include archived sessions")
    common(p)
    for verb, text in (
        ("get", "one session"),
        ("archive", "archive a session (history stays readable)"),
        ("delete", "delete a session, its events and the files it produced"),
    ):
        p = verbs.add_parser(verb, help=text)
        p.add_argument("session_id", help="the session (sesn_...)")
        common(p)
    p = verbs.add_parser("update", help="retitle a session or change its metadata")
    p.add_argument("session_id", help="the session (sesn_...)")
    p.add_argument("--title", help="the new title")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="metadata")
    p.add_argument("--unset", action="append", default=[], metavar="KEY", help="drop a key")
    common(p)


def _provider(args: argparse.Namespace) -> Any:
    from managedloop.providers.claude import ClaudeManagedAgents

    bearer = getattr(args, "bearer_token_file", None)
    return ClaudeManagedAgents(
        base_url=args.base_url if args.base_url else MISSING,
        bearer_token_file=bearer if bearer else MISSING,
        api_key=None if bearer else MISSING,
    )


def _call(args: argparse.Namespace, provider: Any) -> Callable[[], Awaitable[Any]]:
    if args.verb == "list":
        return lambda: provider.list_sessions(
            agent_id=args.agent_id, statuses=args.status or (), include_archived=args.archived
        )
    if args.verb == "get":
        return lambda: provider.get_session(args.session_id)
    if args.verb == "archive":
        return lambda: provider.archive_session(args.session_id)
    if args.verb == "delete":
        return lambda: provider.delete_session(args.session_id)
    metadata: dict[str, str | None] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidOptionsError(f"--set takes KEY=VALUE, got {item!r}", option="set")
        metadata[key] = value
    metadata.update(dict.fromkeys(args.unset))
    return lambda: provider.update_session(
        args.session_id, title=args.title, metadata=metadata or None
    )


def _line(session: dict[str, Any]) -> str:
    if session.get("type") == "session_deleted":
        return f"{session.get('id')} deleted"
    archived = " (archived)" if session.get("archived_at") else ""
    return f"{session.get('id')} {session.get('status')} {session.get('title') or '-'}{archived}"


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run one ``sessions`` verb; the exit code (errors raise, and ``managedloop.cli.main``
    reports them: 2 for bad usage or options, 1 for a failure)."""
    answer = anyio.run(_call(args, _provider(args)))
    if args.json:
        print(json.dumps(answer, indent=2), file=out)
    else:
        for session in answer if isinstance(answer, list) else [answer]:
            print(_line(session), file=out)
    return 0
