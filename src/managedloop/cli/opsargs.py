"""The operations commands' arguments (``provision``, ``tag``, ``resolve``, ``prune``,
``ls``): what :mod:`managedloop.cli.ops` runs, as the ``managedloop`` parser reads it."""

from __future__ import annotations

import argparse
from typing import Any

from managedloop.cli.exits import TABLE

__all__ = ["COMMANDS", "EXIT_HELP", "add_parsers"]

COMMANDS = ("provision", "tag", "resolve", "prune", "ls")

EXIT_HELP = "exit codes:\n" + "\n".join(f"  {code:<5}{meaning}" for code, meaning in TABLE)


def add_parsers(sub: Any) -> None:
    """Register the commands on the ``managedloop`` parser's subparsers."""

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--store", help="a store: PATH, sqlite:PATH, file:PATH, memory:, redis://HOST..."
        )
        p.add_argument(
            "--json", action="store_true", help="one JSON document on stdout (logs on stderr)"
        )

    # Raw: the exit-code table keeps its lines (the options' help still wraps)
    kw: dict[str, Any] = {
        "epilog": EXIT_HELP,
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
    p = sub.add_parser("provision", help="build the spec's agent/environment if absent", **kw)
    p.add_argument(
        "spec", help="a TOML spec file (format: docs/cli.md, or pydoc managedloop.cli.specfile)"
    )
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
