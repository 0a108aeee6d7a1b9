"""Standard Webhooks signing and verification (see the package docstring): :func:`sign`,
:func:`verify` and the :class:`WebhookEvent` a verified delivery becomes."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from managedloop import _validate
from managedloop.config import Secret
from managedloop.errors import InvalidOptionsError, WebhookVerificationError

__all__ = ["MAX_SIGNATURES", "TOLERANCE", "WebhookEvent", "refuse", "sign", "signing_key", "verify"]

TOLERANCE = 300.0
"""Seconds a delivery's timestamp may differ from now: Standard Webhooks' five minutes
(long enough for clock skew and a slow queue, short enough to bound replays)."""
MAX_SIGNATURES = 16
"""Entries in ``webhook-signature``: a sender has one per active secret (two during a
rotation); a header with more is malformed rather than a CPU sink."""

_WEBHOOK_ID = re.compile(r"[A-Za-z0-9_.:=+/-]{1,256}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SECRET_PREFIX = "whsec_"  # noqa: S105 - the key format's prefix, not a key


@dataclass(frozen=True, kw_only=True, slots=True)
class WebhookEvent:
    """A verified delivery."""

    webhook_id: str
    """The ``webhook-id`` header: the same on every redelivery (the de-duplication key)."""
    timestamp: int
    """The ``webhook-timestamp`` header (Unix seconds)."""
    id: str
    """The payload's event id."""
    type: str
    """The event type, from ``data.type`` (e.g. ``session.requires_action``)."""
    subject_id: str | None
    """``data.id``: the session (deployment, agent...) the event is about."""
    created_at: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    """The payload's ``data`` object as sent."""


def refuse(code: str, message: str) -> WebhookVerificationError:
    return WebhookVerificationError(message, code=code)


def signing_key(secret: str | bytes | Secret) -> bytes:
    """The HMAC key of ``secret``: ``whsec_<base64>`` (the prefix optional) or raw bytes."""
    if isinstance(secret, Secret):
        secret = secret.reveal()
    if isinstance(secret, bytes):
        key = secret
    elif isinstance(secret, str):
        text = secret.removeprefix(_SECRET_PREFIX)
        try:  # padding added: senders often strip it
            key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise InvalidOptionsError(
                "secret must be 'whsec_' followed by base64 (the signing key as shown by the "
                "host), or the raw key bytes",
                option="secret",
            ) from None
    else:
        raise InvalidOptionsError("secret must be a str, bytes or Secret", option="secret")
    if not key:
        raise InvalidOptionsError("secret is empty", option="secret")
    return key


def _headers(headers: Mapping[str, str] | Iterable[tuple[Any, Any]]) -> dict[str, str]:
    """Lower-cased header names; ASGI ``(bytes, bytes)`` pairs accepted. A signing header
    given twice is ambiguous and refused."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: dict[str, str] = {}
    for raw_name, raw_value in items:
        name = raw_name.decode("latin-1") if isinstance(raw_name, bytes) else str(raw_name)
        value = raw_value.decode("latin-1") if isinstance(raw_value, bytes) else str(raw_value)
        name = name.lower()
        if name in out and name.startswith("webhook-"):
            raise refuse("malformed_webhook", f"the {name} header is given twice")
        out[name] = value
    return out


def sign(secret: str | bytes | Secret, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of a delivery (what a sender puts in
    ``webhook-signature``)."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(
    payload: bytes | str,
    headers: Mapping[str, str] | Iterable[tuple[Any, Any]],
    secret: str | bytes | Secret,
    *,
    tolerance: float = TOLERANCE,
    clock: Callable[[], float] | None = None,
) -> WebhookEvent:
    """Verify one delivery (Standard Webhooks; see the module docstring) and parse it.

    Raises :class:`~managedloop.errors.WebhookVerificationError` with code
    ``malformed_webhook`` (a missing or malformed ``webhook-id`` / ``webhook-timestamp`` /
    ``webhook-signature`` header, a body that is not the JSON event object),
    ``stale_webhook`` (timestamp more than ``tolerance`` seconds from ``clock()``, either
    way) or ``bad_signature`` (no ``v1`` entry matches); ``InvalidOptionsError`` for an
    unusable secret or tolerance. The secret never appears in an error.
    """
    _validate.duration("tolerance", tolerance, allow_none=False, allow_zero=True)
    key = signing_key(secret)
    body = payload.encode() if isinstance(payload, str) else bytes(payload)
    h = _headers(headers)
    webhook_id = h.get("webhook-id", "")
    stamp = h.get("webhook-timestamp", "")
    signatures = h.get("webhook-signature", "")
    if not (webhook_id and stamp and signatures):
        raise refuse(
            "malformed_webhook",
            "a webhook needs webhook-id, webhook-timestamp and webhook-signature headers",
        )
    if _WEBHOOK_ID.fullmatch(webhook_id) is None:
        raise refuse("malformed_webhook", "the webhook-id header is malformed")
    if _TIMESTAMP.fullmatch(stamp.strip()) is None:
        raise refuse("malformed_webhook", "webhook-timestamp must be whole Unix seconds")
    timestamp = int(stamp.strip())
    now = (clock or time.time)()
    if abs(now - timestamp) > tolerance:
        raise refuse(
            "stale_webhook",
            f"webhook-timestamp is {int(now - timestamp)} s from now (tolerance {tolerance:g} s)",
        )
    entries = signatures.split()
    if not entries or len(entries) > MAX_SIGNATURES:
        raise refuse("malformed_webhook", "webhook-signature has no entries or too many")
    expected = base64.b64decode(sign(key, webhook_id, timestamp, body)[3:])
    matched = False
    for entry in entries:
        version, _, encoded = entry.partition(",")
        if version != "v1":
            continue  # another scheme (v1a: asymmetric) or junk: not ours to judge
        try:
            candidate = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        # Every entry is compared (no early exit), each in constant time.
        matched = hmac.compare_digest(expected, candidate) or matched
    if not matched:
        raise refuse("bad_signature", "no webhook-signature entry matches the payload")
    return _parse(body, webhook_id, timestamp)


def _parse(body: bytes, webhook_id: str, timestamp: int) -> WebhookEvent:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise refuse("malformed_webhook", "the webhook body is not JSON") from None
    data = value.get("data") if isinstance(value, dict) else None
    if not (isinstance(value, dict) and isinstance(data, dict)):
        raise refuse("malformed_webhook", "the webhook body is not an event with a data object")
    kind, event_id, subject = data.get("type"), value.get("id"), data.get("id")
    if not isinstance(kind, str) or not isinstance(event_id, str):
        raise refuse("malformed_webhook", "the webhook event has no id or data.type")
    created = value.get("created_at")
    return WebhookEvent(
        webhook_id=webhook_id,
        timestamp=timestamp,
        id=event_id,
        type=kind,
        subject_id=subject if isinstance(subject, str) else None,
        created_at=created if isinstance(created, str) else None,
        data=data,
    )
