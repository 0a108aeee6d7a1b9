"""The ``managedloop`` command's exit codes and error reports: one table for every command.

==========  ===============================================================================
exit code   meaning
==========  ===============================================================================
``0``       done, including "nothing to do" (everything already built, nothing to prune)
``1``       failed: the session, the host, the network or the store (a named error)
``2``       bad usage or configuration, found before any request: a bad flag or value, a
            bad spec file or store URL, a missing environment variable, missing or refused
            credentials (the same on every host), an invalid option
``3``       not found: an unknown tag, a version the store does not track, ``tag`` of a
            version never provisioned
``4``       partial prune: some versions were archived, then one failed
``130``     interrupted (Ctrl-C), the shell's convention for SIGINT
==========  ===============================================================================

An error is one line on stderr, ``managedloop: <word>: <code>: <message>`` (``error`` for
exit 2, ``not found`` for 3, ``failed`` otherwise; ``managedloop: interrupted: <what was
cancelled>`` for 130), never a traceback. With ``--json`` the same error is also one JSON
document on stdout::

    {"ok": false, "command": ..., "exit": N, "error": {"code": ..., "message": ...}}
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from managedloop.errors import (
    AuthenticationError,
    ConfigError,
    InvalidOptionsError,
    ManagedLoopError,
    ProvisioningError,
    ToolDefinitionError,
)

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_PARTIAL",
    "EXIT_USAGE",
    "TABLE",
    "CliError",
    "FailedError",
    "UsageError",
    "classify",
    "report",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_PARTIAL = 4
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT

TABLE: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "done (also: nothing to do)"),
    (EXIT_FAILED, "failed (the session, host, network or store)"),
    (EXIT_USAGE, "bad usage or configuration (before any request; missing credentials too)"),
    (EXIT_NOT_FOUND, "not found (unknown tag, untracked version)"),
    (EXIT_PARTIAL, "partial prune (some archived, then one failed)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
)

_USAGE_ERRORS = (InvalidOptionsError, ConfigError, ToolDefinitionError, AuthenticationError)
_NOT_FOUND_CODES = ("unknown_tag", "untracked_digest", "not_provisioned")
_WORDS = {EXIT_USAGE: "error", EXIT_NOT_FOUND: "not found", EXIT_INTERRUPTED: "interrupted"}


class CliError(Exception):
    """A command's failure with its exit code, a stable ``code`` and a message."""

    def __init__(
        self, exit: int, code: str, message: str, extra: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.exit = exit
        self.code = code
        self.message = message
        self.extra = dict(extra or {})


class UsageError(Exception):
    """Bad command-line usage that argparse cannot check (exit 2, code ``usage``)."""


class FailedError(CliError):
    """A failure that is not the user's usage (exit code 1, a message, no traceback)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(EXIT_FAILED, code, message)


def classify(exc: BaseException) -> CliError | None:
    """The exit code and code of a library error (``None``: not one of ours)."""
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, UsageError):
        return CliError(EXIT_USAGE, "usage", str(exc))
    if isinstance(exc, ProvisioningError):
        exit = EXIT_NOT_FOUND if exc.code in _NOT_FOUND_CODES else EXIT_FAILED
        return CliError(exit, exc.code, exc.message)
    if isinstance(exc, _USAGE_ERRORS):
        # AuthenticationError: credentials missing, expired or refused are configuration,
        # whichever host found out (Claude before the request, AgentCore's botocore chain
        # while signing it), so a script sees one code.
        return CliError(EXIT_USAGE, exc.code, exc.message)
    if isinstance(exc, ManagedLoopError):
        return CliError(EXIT_FAILED, exc.code, exc.message)
    if isinstance(exc, KeyboardInterrupt):
        return CliError(EXIT_INTERRUPTED, "interrupted", "cancelled")
    if isinstance(exc, ImportError):  # an optional SDK (anthropic, botocore, redis) is missing
        return CliError(EXIT_FAILED, "missing_dependency", str(exc))
    return None


def report(
    error: CliError, *, command: str | None, json_doc: bool, out: TextIO, err: TextIO
) -> int:
    """Write ``error`` (stderr, and stdout with ``--json``); return its exit code."""
    if json_doc:
        doc: dict[str, Any] = {"ok": False}
        if command is not None:
            doc["command"] = command
        doc["exit"] = error.exit
        doc["error"] = {"code": error.code, "message": error.message}
        out.write(json.dumps({**doc, **error.extra}, ensure_ascii=False) + "\n")
        out.flush()
    word = _WORDS.get(error.exit, "failed")
    code = "" if error.code == word else f"{error.code}: "  # not "interrupted: interrupted"
    err.write(f"managedloop: {word}: {code}{error.message}\n")
    err.flush()
    return error.exit
