"""Credential masking for every text this host produces: errors, their context, logs.

Credentials must never reach a log line, an error's text or its context, whoever wrote
the text: botocore's DEBUG logging prints the canonical request (``botocore.auth``) and
the prepared request's headers (``botocore.endpoint``), and AWS answers a signature
mismatch with a 403 whose message *echoes the canonical request*, signed headers and
all, so ``x-amz-security-token:<token>`` arrives inside the error body. :func:`redact`
masks, in any text: the session token (header, query, JSON or repr form), SigV4
signatures (``Signature=``/``X-Amz-Signature=``), the credential scope of a presigned
URL (``X-Amz-Credential=``), secret-key/token assignments, and the literal values of
the credentials this client holds (whatever form the text has), raw, URL-encoded
(upper- or lower-case escapes, ``+`` for space), JSON-escaped (``\\/`` included) or
backslash-doubled as a ``bytes`` repr shows them.

The log filter (:func:`install_redaction`) masks the literal secrets of every *live*
client as well: botocore.parsers logs a response body at DEBUG, and a body that echoes the
session token or the secret key matches no pattern. It finds them through a weak set of
the :class:`~._clients.Clients` objects (:func:`register`), asking each for its secrets
only while a record is filtered: no secret is copied into a registry, and a client that
goes away drops out by itself.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, Protocol
from urllib.parse import quote, quote_plus

from managedloop.errors import ManagedLoopError

__all__ = ["install_redaction", "leaks", "live_clients", "redact", "register", "scrubbed"]

_REDACTED = "<redacted>"
_VALUE = r"[^\s\"',}&\\]+"
_SECRET_PATTERNS = (
    re.compile(r"(x-amz-security-token[\"']?\s*[:=]\s*b?[\"']?)" + _VALUE, re.IGNORECASE),
    re.compile(r"(x-amz-signature[\"']?\s*[:=]\s*[\"']?)" + _VALUE, re.IGNORECASE),
    re.compile(r"(x-amz-credential[\"']?\s*[:=]\s*[\"']?)" + _VALUE, re.IGNORECASE),
    re.compile(r"(\bSignature=)[0-9a-fA-F]+"),
    # The access key id in a SigV4 Authorization header (``Credential=<key id>/<date>/...``)
    re.compile(r"(\bCredential=)[A-Z0-9]{12,128}(?=/)"),
    re.compile(
        r"((?:aws_secret_access_key|aws_session_token|secret_?access_?key|session_?token)"
        r"[\"']?\s*[:=]\s*b?[\"']?)" + _VALUE,
        re.IGNORECASE,
    ),
)
_REDACTED_LOGGERS = (
    "botocore.auth",  # the canonical request and string to sign
    "botocore.endpoint",  # the prepared request, headers included
    "botocore.parsers",  # response headers and bodies (an echoed token)
    "botocore.credentials",
    "botocore.retryhandler",
    "botocore.httpsession",
    "urllib3.connectionpool",  # request lines (a presigned query)
)
_MIN_LITERAL = 8  # shorter "secrets" (test stubs) would mask ordinary words


def _forms(secret: str) -> set[str]:
    """The ways ``secret`` can be spelled in a log line or an error body."""
    encoded = {quote(secret, safe=""), quote(secret), quote_plus(secret)}
    encoded |= {re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), e) for e in encoded}
    escaped = json.dumps(secret)[1:-1]
    forms = {secret, escaped, escaped.replace("/", "\\/"), *encoded}
    return forms | {f.replace("\\", "\\\\") for f in forms}  # as a bytes repr shows them


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential masked (see above)."""
    for secret in secrets:
        if len(secret) < _MIN_LITERAL:
            continue
        for form in sorted(_forms(secret), key=len, reverse=True):  # longest first
            if form in text:
                text = text.replace(form, _REDACTED)
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


class _HasSecrets(Protocol):
    def secrets(self) -> tuple[str, ...]: ...


_live: weakref.WeakSet[_HasSecrets] = weakref.WeakSet()
_live_lock = threading.Lock()  # records are filtered on any thread (control calls run in one)


def register(owner: _HasSecrets) -> None:
    """Have the log filter mask ``owner.secrets()`` for as long as ``owner`` lives."""
    with _live_lock:
        _live.add(owner)


def live_clients() -> list[_HasSecrets]:
    """The registered owners still alive (a snapshot)."""
    with _live_lock:
        return list(_live)


def _live_secrets() -> set[str]:
    found: set[str] = set()
    for owner in live_clients():
        try:
            found.update(owner.secrets())
        except Exception:  # noqa: S112  # a half-built client must not break logging
            continue
    return found


class _RedactTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        secrets = _live_secrets()
        message = record.getMessage()
        masked = redact(message, secrets)
        if masked != message:
            record.msg = masked
            record.args = None
        if record.exc_info and not record.exc_text:
            # Formatted now, masked, and cached where every Formatter looks first.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, secrets)
        return True


_redaction = _RedactTokens()


def install_redaction() -> None:
    """Mask credentials in botocore's own loggers' records (idempotent)."""
    for name in _REDACTED_LOGGERS:
        target = logging.getLogger(name)
        if _redaction not in target.filters:
            target.addFilter(_redaction)
