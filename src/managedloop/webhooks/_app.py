"""The receiver's faces: :class:`Webhooks`, the ASGI app (answer fast, work after), and
:func:`app` / :func:`handle`, which build one."""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from managedloop.config import Secret
from managedloop.errors import WebhookVerificationError
from managedloop.webhooks._dispatch import (
    Dispatcher,
    ProviderSource,
    WebhookOutcome,
    error_code,
)

__all__ = ["MAX_BODY", "Webhooks", "app", "handle"]

logger = logging.getLogger("managedloop.webhooks")

MAX_BODY = 1 << 20
"""Bytes: the payloads are thin (ids only); a megabyte is far more than any real one."""


class Webhooks(Dispatcher):
    """The webhook receiver: an ASGI app (``await hooks(scope, receive, send)``) and
    :meth:`handle` for any framework. Build it with :func:`app`.

    ``provider`` is a provider (``ClaudeManagedAgents``, reused for every delivery) or a
    zero-argument factory (sync or async) called per delivery, whose providers are closed
    after use. ``agent`` is what ``ml.run`` takes (an ``AgentSpec`` whose tools serve the
    calls, or a handle with ``handler=``). ``secret`` is the signing key (``whsec_...``).
    ``run_options`` go to ``ml.run`` (``timeout``, ``max_turns``, ``tool_timeout``...).
    ``store`` holds the dedupe records (see the module docstring; ``store_prefix`` starts
    their keys, ``retention`` is how long they are kept, ``running_lease`` how long a
    ``running`` delivery blocks its redeliveries); ``tolerance`` and ``clock`` are
    :func:`verify`'s; ``background`` chooses when the ASGI app answers; ``on_outcome`` is
    called (sync or async) with each outcome the ASGI app produced.
    """

    # -- the ASGI face -------------------------------------------------------------------
    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        if scope["type"] == "lifespan":  # served alone: nothing to start or stop
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope.get("method") != "POST":
            await answer(send, 405, {"error": "method_not_allowed"}, allow="POST")
            return
        body = await read_body(receive)
        if body is None:
            await answer(send, 413, {"error": "payload_too_large"})
            return
        self._busy += 1
        try:
            await self._serve(body, scope.get("headers") or [], send)
        finally:
            self._busy -= 1
            if not self._busy and self._idle is not None:
                self._idle.set()
                self._idle = None

    async def _serve(self, body: bytes, headers: Any, send: Any) -> None:
        try:
            event = self.verify(body, headers)
            outcome = await self._admit(event)
        except WebhookVerificationError as exc:
            logger.warning("webhook refused: %s", exc.code)
            status = 400 if exc.code == "malformed_webhook" else 401
            await answer(send, status, {"error": exc.code})
            return
        if outcome is not None:
            await answer(send, 200, outcome.to_json())
            return
        if self.background:
            accepted = WebhookOutcome(
                status="accepted",
                webhook_id=event.webhook_id,
                event_type=event.type,
                session_id=event.subject_id,
            )
            await answer(send, 202, accepted.to_json())
            try:
                done = await self._process(event)
            except Exception:
                return  # logged by _process; the delivery is marked failed
            await self._report(done)
            return
        try:
            done = await self._process(event)
        except Exception as exc:
            await answer(send, 500, {"error": error_code(exc), "webhook_id": event.webhook_id})
            return
        await self._report(done)
        await answer(send, 200, done.to_json())

    async def _report(self, outcome: WebhookOutcome) -> None:
        if self.on_outcome is None:
            return
        try:
            value = self.on_outcome(outcome)
            if inspect.isawaitable(value):
                await value
        except Exception as exc:
            logger.error("webhook on_outcome callback raised %s", type(exc).__name__)


async def read_body(receive: Callable[[], Awaitable[MutableMapping[str, Any]]]) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def answer(send: Any, status: int, body: Mapping[str, Any], allow: str = "") -> None:
    data = json.dumps(body, separators=(",", ":")).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if allow:
        headers.append((b"allow", allow.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


def app(
    provider: ProviderSource,
    *,
    agent: Any,
    secret: str | bytes | Secret,
    **options: Any,
) -> Webhooks:
    """The ASGI webhook receiver (a :class:`Webhooks`); ``options`` are its keywords
    (``store``, ``handler``, ``tolerance``, ``clock``, ``background``, ``run_options``,
    ``on_outcome``)."""
    return Webhooks(provider, agent=agent, secret=secret, **options)


async def handle(
    body: bytes | str,
    headers: Any,
    *,
    provider: ProviderSource,
    agent: Any,
    secret: str | bytes | Secret,
    **options: Any,
) -> WebhookOutcome:
    """One delivery from any framework: :meth:`Webhooks.handle` on a receiver built for
    this call. De-duplication holds across calls through the store (by default the
    process-wide :class:`~managedloop.stores.MemoryStore`) and the process-wide locks; a
    long-lived :func:`app` (or :class:`Webhooks`) saves re-checking the options per call.
    """
    return await Webhooks(provider, agent=agent, secret=secret, **options).handle(body, headers)
