"""Credential masking for every text this host produces: errors, their context, logs.

Credentials must never reach a log line, an error's text or its context, whoever wrote
the text: botocore's DEBUG logging prints the canonical request (``botocore.auth``) and
the prepared request's headers (``botocore.endpoint``), and AWS answers a signature
mismatch with a 403 whose message *echoes the canonical request*, signed headers and
all, so ``x-amz-security-token:<token>`` arrives inside the error body. :func:`redact`
masks, in any text: the session token (header, query, JSON or repr form), SigV4
signatures (``Signature=``/``X-Amz-Signature=``), the credential scope of a presigned
URL (``X-Amz-Credential=``), secret-key/token assignments, and the literal values of
the credentials this client holds (whatever form the text has).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from managedloop.errors import ManagedLoopError

__all__ = ["install_redaction", "leaks", "redact", "scrubbed"]

_REDACTED = "<redacted>"
_VALUE = r"[^\s\"',}&\\]+"
_SECRET_PATTERNS = (
    re.compile(r"(x-amz-security-token[\"']?\s*[:=]\s*b?[\"']?)" + _VALUE, re.IGNORECASE),
    re.compile(r"(x-amz-signature[\"']?\s*[:=]\s*[\"']?)" + _VALUE, re.IGNORECASE),
    re.compile(r"(x-amz-credential[\"']?\s*[:=]\s*[\"']?)" + _VALUE, re.IGNORECASE),
    re.compile(r"(\bSignature=)[0-9a-fA-F]+"),
    re.compile(
        r"((?:aws_secret_access_key|aws_session_token|secret_?access_?key|session_?token)"
        r"[\"']?\s*[:=]\s*b?[\"']?)" + _VALUE,
        re.IGNORECASE,
    ),
)
_REDACTED_LOGGERS = ("botocore.auth", "botocore.endpoint", "botocore.parsers")
_MIN_LITERAL = 8  # shorter "secrets" (test stubs) would mask ordinary words


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential masked (see above)."""
    for secret in secrets:
        if len(secret) >= _MIN_LITERAL and secret in text:
            text = text.replace(secret, _REDACTED)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1" + _REDACTED, text)
    return text


def _redact_value(value: Any, secrets: Iterable[str]) -> Any:
    """A context value with every string inside it redacted (dicts, lists, tuples)."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, Mapping):
        return {k: _redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_redact_value(v, secrets) for v in value)
    return value


def scrubbed(error: ManagedLoopError, secrets: Iterable[str] = ()) -> ManagedLoopError:
    """``error`` with its message, args and context redacted in place (and returned)."""
    secrets = tuple(secrets)
    error.args = tuple(_redact_value(a, secrets) for a in error.args)
    for key, value in list(error.context.items()):
        error.context[key] = _redact_value(value, secrets)
    return error


def leaks(exc: BaseException, secrets: Iterable[str] = ()) -> bool:
    """Whether ``exc`` (its text or its botocore response) holds a credential."""
    secrets = tuple(secrets)
    text = f"{exc!s}\n{getattr(exc, 'response', '')!r}"
    return redact(text, secrets) != text


class _RedactTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg = masked
            record.args = None
        return True


_redaction = _RedactTokens()


def install_redaction() -> None:
    """Mask credentials in botocore's own loggers' records (idempotent)."""
    for name in _REDACTED_LOGGERS:
        target = logging.getLogger(name)
        if _redaction not in target.filters:
            target.addFilter(_redaction)
