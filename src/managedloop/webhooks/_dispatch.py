"""The dispatcher: one verified delivery to an outcome (admit, attach by id, run the
pending tools through the recording provider, mark the ledger), whatever face it came
through."""

from __future__ import annotations

import inspect
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import anyio

from managedloop import _validate
from managedloop.config import Secret
from managedloop.errors import InvalidOptionsError, ManagedLoopError
from managedloop.hosts import Provider
from managedloop.results import SessionResult
from managedloop.session import run
from managedloop.stores import MemoryStore, Store
from managedloop.webhooks._ledger import PRUNE_INTERVAL, RETENTION, STORE_PREFIX, Ledger
from managedloop.webhooks._recording import Attached
from managedloop.webhooks._signing import TOLERANCE, WebhookEvent, refuse, signing_key, verify

__all__ = [
    "HANDLED_EVENTS",
    "RUNNING_LEASE",
    "Dispatcher",
    "ProviderSource",
    "WebhookOutcome",
    "error_code",
    "log_failure",
]

logger = logging.getLogger("managedloop.webhooks")

HANDLED_EVENTS = frozenset({"session.requires_action", "session.status_idled"})
"""The event types that attach and run pending tools; any other is acknowledged."""
RUNNING_LEASE = 3600.0
"""Seconds a delivery may stay ``running`` before a redelivery of it is processed again:
an hour covers long tool runs; past it the worker most likely died."""

_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_SESSION_LOCKS: dict[str, anyio.Lock] = {}
"""One delivery at a time per session id, for every receiver on the process's loop."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WebhookOutcome:
    """What one delivery did."""

    status: str
    """``completed`` (tools answered, ``result`` set), ``nothing_pending`` (the session
    waits on nothing this process can answer), ``duplicate`` (this ``webhook-id`` is
    being or was handled), ``ignored`` (an event type that runs nothing) or ``accepted``
    (the ASGI app's answer before background work)."""
    webhook_id: str
    event_type: str
    session_id: str | None = None
    result: SessionResult | None = None
    """The session's result after its pending tools were answered (``completed``)."""
    from_store: tuple[str, ...] = ()
    """Tool-use ids answered from the store (stored result re-sent, or an interrupted run
    answered with an error), never run again."""

    def to_json(self) -> dict[str, Any]:
        """The HTTP answer's body: ids and status only (no result text, no tool input)."""
        out: dict[str, Any] = {"status": self.status, "webhook_id": self.webhook_id}
        if self.session_id is not None:
            out["session_id"] = self.session_id
        if self.result is not None:
            out["terminal"] = self.result.terminal.value
        return out


_DEFAULT_STORE: Store | None = None


def default_store() -> Store:
    global _DEFAULT_STORE
    if _DEFAULT_STORE is None:
        _DEFAULT_STORE = MemoryStore()
    return _DEFAULT_STORE


ProviderSource = Provider | Callable[[], Provider | Awaitable[Provider]]


class Dispatcher:
    """What a delivery does, whatever face it came through: verify, de-duplicate, attach
    and run the pending tools (:class:`Webhooks` adds the ASGI face)."""

    def __init__(
        self,
        provider: ProviderSource,
        *,
        agent: Any,
        secret: str | bytes | Secret,
        store: Store | None = None,
        handler: Any = None,
        tolerance: float = TOLERANCE,
        clock: Callable[[], float] | None = None,
        background: bool = True,
        run_options: Mapping[str, Any] | None = None,
        on_outcome: Callable[[WebhookOutcome], Any] | None = None,
        store_prefix: str = STORE_PREFIX,
        running_lease: float = RUNNING_LEASE,
        retention: float = RETENTION,
    ) -> None:
        if not (hasattr(provider, "open") or callable(provider)):
            raise InvalidOptionsError(
                "provider must be a provider or a factory returning one", option="provider"
            )
        if agent is None:
            raise InvalidOptionsError("agent= is required (the tools that serve the calls)")
        _validate.duration("tolerance", tolerance, allow_none=False, allow_zero=True)
        _validate.duration("running_lease", running_lease, allow_none=False)
        _validate.duration("retention", retention, allow_none=False)
        if store is not None and not isinstance(store, Store):
            raise InvalidOptionsError("store must be a managedloop.stores.Store", option="store")
        if clock is not None and not callable(clock):
            raise InvalidOptionsError("clock must be callable", option="clock")
        if not isinstance(background, bool):
            raise InvalidOptionsError("background must be a bool", option="background")
        self._key = signing_key(secret)  # checked now; kept as bytes, never shown
        self._provider = provider
        self.agent = agent
        self.handler = handler
        self.tolerance = float(tolerance)
        self.clock = clock
        self.background = background
        self.run_options = dict(run_options or {})
        self.on_outcome = on_outcome
        self.running_lease = float(running_lease)
        self._ledger = Ledger(
            store if store is not None else default_store(), store_prefix, clock or time.time
        )
        self.retention = float(retention)
        self._pruned_at: float | None = None
        self._busy = 0
        self._idle: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"Webhooks(agent={getattr(self.agent, 'name', self.agent)!r}, secret=<hidden>)"

    # -- the plain-function face ---------------------------------------------------------
    def verify(self, body: bytes | str, headers: Any) -> WebhookEvent:
        return verify(body, headers, self._key, tolerance=self.tolerance, clock=self.clock)

    async def handle(self, body: bytes | str, headers: Any) -> WebhookOutcome:
        """Verify, de-duplicate and (for a handled event type) run the pending tools; returns
        the outcome, raises ``WebhookVerificationError`` (nothing happened) or the run's
        error (the delivery is marked ``failed``; unanswered tool uses stay pending)."""
        event = self.verify(body, headers)
        outcome = await self._admit(event)
        if outcome is not None:
            return outcome
        return await self._process(event)

    async def _admit(self, event: WebhookEvent) -> WebhookOutcome | None:
        """``None`` when the delivery is to be processed (it is then marked ``running``)."""
        if event.type not in HANDLED_EVENTS:
            return WebhookOutcome(
                status="ignored",
                webhook_id=event.webhook_id,
                event_type=event.type,
                session_id=event.subject_id,
            )
        sid = event.subject_id
        if sid is None or _SESSION_ID.fullmatch(sid) is None:
            raise refuse("malformed_webhook", "the event's data.id is not a session id")
        key = self._ledger.delivery_key(event.webhook_id)
        if not await self._ledger.admit(key, sid, self.running_lease):
            return WebhookOutcome(
                status="duplicate",
                webhook_id=event.webhook_id,
                event_type=event.type,
                session_id=sid,
            )
        return None

    async def _process(self, event: WebhookEvent) -> WebhookOutcome:
        sid = event.subject_id
        assert sid is not None
        key = self._ledger.delivery_key(event.webhook_id)
        lock = _SESSION_LOCKS.setdefault(sid, anyio.Lock())
        try:
            async with lock:
                outcome = await self._attach_and_run(event, sid)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await self._ledger.finish(
                    key, {"state": "failed", "session_id": sid, "error": error_code(exc)}
                )
            log_failure(event, exc)
            raise
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                _SESSION_LOCKS.pop(sid, None)
        await self._ledger.finish(
            key, {"state": "done", "session_id": sid, "status": outcome.status}
        )
        await self._maybe_prune()
        return outcome

    async def _maybe_prune(self) -> None:
        """Keep the dedupe small: at most once per :data:`PRUNE_INTERVAL`, drop records
        older than ``retention``."""
        now = self._ledger.clock()
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_INTERVAL:
            return
        self._pruned_at = now
        await self._ledger.prune(self.retention)

    async def _attach_and_run(self, event: WebhookEvent, sid: str) -> WebhookOutcome:
        provider, owned = await self._provider_for_delivery()
        attached = Attached(provider, self._ledger, sid, event.webhook_id)
        try:
            options: dict[str, Any] = dict(self.run_options)
            if self.handler is not None:
                options["handler"] = self.handler
            try:
                result = await run(
                    cast(Provider, attached), agent=self.agent, resume=sid, **options
                )
            except ManagedLoopError as exc:
                if exc.code != "nothing_to_send":
                    raise
                return WebhookOutcome(
                    status="nothing_pending",
                    webhook_id=event.webhook_id,
                    event_type=event.type,
                    session_id=sid,
                )
            await attached.release_unrun()
        finally:
            if owned:
                closer = getattr(provider, "aclose", None)
                if closer is not None:
                    with anyio.CancelScope(shield=True):
                        await closer()
        return WebhookOutcome(
            status="completed",
            webhook_id=event.webhook_id,
            event_type=event.type,
            session_id=sid,
            result=result,
            from_store=tuple(sorted(attached.overrides)),
        )

    async def _provider_for_delivery(self) -> tuple[Provider, bool]:
        source: Any = self._provider
        if hasattr(source, "open"):
            return cast(Provider, source), False
        made = source()
        if inspect.isawaitable(made):
            made = await made
        if not hasattr(made, "open"):
            raise InvalidOptionsError(
                "the provider factory did not return a provider", option="provider"
            )
        return cast(Provider, made), True

    async def drain(self) -> None:
        """Wait until no delivery is being worked on (background work included)."""
        while self._busy:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()


def error_code(exc: BaseException) -> str:
    return exc.code if isinstance(exc, ManagedLoopError) else type(exc).__name__


def log_failure(event: WebhookEvent, exc: BaseException) -> None:
    # The message of a ManagedLoopError never holds a secret (errors.py); anything else is
    # named by type only: a foreign exception's text may quote a request or a tool's input.
    detail = exc.message if isinstance(exc, ManagedLoopError) else ""
    logger.error(
        "webhook %s (%s) for session %s failed: %s %s; its unanswered tool uses stay "
        "pending on the host",
        event.webhook_id,
        event.type,
        event.subject_id,
        error_code(exc),
        detail,
    )
