"""The emulator's webhook sender: signed Standard Webhooks deliveries to URLs you give it.

``emu.webhooks.subscribe(url)`` returns the signing secret (``whsec_<base64>``, generated
unless given) and from then on every session a deployment started POSTs, when it idles:

* ``session.requires_action`` when it waits on tool results or confirmations, and
* ``session.status_idled`` on every idle (a ``requires_action`` one included, as one idle
  can raise both on the real host; a receiver must cope with that),

filtered by the subscription's ``events``. The payload is the thin shape of the SDK's
``BetaWebhookEvent`` (``{"id", "type": "event", "created_at", "data": {"id": <session>,
"type", "organization_id", "workspace_id"}}``); the headers are ``webhook-id`` (the event id,
the same on every redelivery), ``webhook-timestamp`` (Unix seconds from ``clock``, which
tests may replace) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of
"<id>.<timestamp>.<body>">``). Signing is written here, independently of
``managedloop.webhooks``: the tests check it against the ``standardwebhooks`` package.

Every attempt is recorded in ``emu.webhooks.deliveries`` (status ``0`` when the URL could
not be reached). There are no automatic retries: a test calls :meth:`WebhookSender.redeliver`
to send one again (same ``webhook-id`` and body, fresh timestamp and signature), so
retries happen when a test says so, not on a timer. Redirects are not followed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from managedloop.testing._claude.session import now_iso

__all__ = ["DEFAULT_EVENTS", "Delivery", "WebhookSender", "sign_delivery"]

DEFAULT_EVENTS = ("session.requires_action", "session.status_idled")
DELIVERY_TIMEOUT = 30.0  # seconds per POST: a receiver is meant to answer fast (work after)
_WAIT_TIMEOUT = 30.0  # seconds: a safety bound for delivered(), far above any real wait


def sign_delivery(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64>`` for ``secret`` (``whsec_<base64>``): the Standard Webhooks scheme."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


@dataclass(frozen=True, kw_only=True, slots=True)
class Delivery:
    """One POST the emulator made."""

    url: str
    webhook_id: str
    event_type: str
    session_id: str
    body: bytes
    headers: dict[str, str]
    status: int
    """The receiver's HTTP status; ``0`` when it could not be reached."""
    answer: bytes = b""
    """The receiver's response body."""
    attempt: int = 1


@dataclass
class _Subscription:
    url: str
    secret: str
    events: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Message:
    sub: _Subscription
    webhook_id: str
    event_type: str
    session_id: str
    body: bytes
    attempt: int


@dataclass
class WebhookSender:
    """Signed webhook deliveries from one emulator (see the module docstring)."""

    emu: Any  # the ClaudeEmulator (server.py imports this module: no type import back)
    clock: Callable[[], float] = time.time
    """Unix seconds for ``webhook-timestamp`` (replace it to test stale deliveries)."""
    deliveries: list[Delivery] = field(default_factory=list)
    subscriptions: list[_Subscription] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def subscribe(
        self, url: str, *, secret: str | None = None, events: Iterable[str] = DEFAULT_EVENTS
    ) -> str:
        """Send the ``events`` of deployment sessions to ``url``; returns the secret."""
        key = secret or "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
        self.subscriptions.append(_Subscription(url=url, secret=key, events=frozenset(events)))
        return key

    def notify(self, event_type: str, session_id: str) -> None:
        """Deliver one event to every subscription that wants it (on the emulator's loop)."""
        wanted = [s for s in self.subscriptions if event_type in s.events]
        if not wanted:
            return
        event_id = self.emu.mint("wevt_")
        payload = {
            "id": event_id,
            "type": "event",
            "created_at": now_iso(),
            "data": {
                "id": session_id,
                "type": event_type,
                "organization_id": "org_emulator",
                "workspace_id": "wrkspc_emulator",
            },
        }
        body = json.dumps(payload, separators=(",", ":")).encode()
        for sub in wanted:
            self._spawn(_Message(sub, event_id, event_type, session_id, body, 1))

    def redeliver(self, delivery: Delivery) -> None:
        """Send ``delivery`` again: same ``webhook-id`` and body, a fresh signature."""
        sub = next(s for s in self.subscriptions if s.url == delivery.url)
        attempt = 1 + sum(1 for d in self.deliveries if d.webhook_id == delivery.webhook_id)

        message = _Message(
            sub,
            delivery.webhook_id,
            delivery.event_type,
            delivery.session_id,
            delivery.body,
            attempt,
        )
        self._on_loop(lambda: self._spawn(message))

    async def delivered(self, count: int, timeout: float = _WAIT_TIMEOUT) -> list[Delivery]:
        """Wait (on the caller's loop, which may serve the receiver) until ``count``
        deliveries are recorded; returns them. ``timeout`` only bounds a hang."""
        deadline = time.monotonic() + timeout
        while len(self.deliveries) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.deliveries)} of {count} webhook deliveries")
            await asyncio.sleep(0.005)
        return list(self.deliveries)

    async def aclose(self) -> None:
        """Cancel deliveries still in flight (the emulator is stopping)."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    # -- internals -------------------------------------------------------------------
    def _on_loop(self, fn: Callable[[], None]) -> None:
        loop = self.emu._loop
        if loop is not None and threading.current_thread() is not self.emu._thread:
            self.emu.call(fn)
        else:
            fn()

    def _spawn(self, message: _Message) -> None:
        task = asyncio.get_running_loop().create_task(self._post(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, m: _Message) -> None:
        stamp = int(self.clock())
        headers = {
            "content-type": "application/json",
            "webhook-id": m.webhook_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": sign_delivery(m.sub.secret, m.webhook_id, stamp, m.body),
        }
        status, answer = 0, b""
        try:
            timeout = aiohttp.ClientTimeout(total=DELIVERY_TIMEOUT)
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.post(m.sub.url, data=m.body, headers=headers, allow_redirects=False) as resp,
            ):
                answer = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, OSError, TimeoutError):
            status, answer = 0, b""
        self.deliveries.append(
            Delivery(
                url=m.sub.url,
                webhook_id=m.webhook_id,
                event_type=m.event_type,
                session_id=m.session_id,
                body=m.body,
                headers=headers,
                status=status,
                answer=answer,
                attempt=m.attempt,
            )
        )
