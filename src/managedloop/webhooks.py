"""Sessions the host starts: verify a signed webhook, attach by id, run the pending tools.

Claude Managed Agents deployments (scheduled or manually triggered) start sessions with
nobody attached; a session whose agent calls a custom tool then waits in
``requires_action`` and the host notifies a URL by webhook (thin payloads: ``data: {id,
type, ...}`` names the session, nothing more). This module is the receiving end::

    import managedloop.webhooks as mw

    hooks = mw.app(provider, agent=agent, secret=os.environ["ANTHROPIC_WEBHOOK_SIGNING_KEY"])
    # an ASGI app: mount it (Starlette ``Mount("/hooks", app=hooks)``, FastAPI
    # ``app.mount(...)``) or serve it alone; or from any framework:
    outcome = await hooks.handle(body_bytes, request_headers)

For ``session.requires_action`` and ``session.status_idled`` it attaches to the session by
id (``ml.run(provider, agent=agent, resume=session_id)``: the host's history names the
custom tool uses still waiting), runs them locally with the agent's tools (or
``handler=``), answers each once, follows the session to its next terminal and returns
the :class:`~managedloop.SessionResult` in a :class:`WebhookOutcome`. Other event types are
acknowledged and ignored. A session with nothing pending is ``nothing_pending``.

**Verification** (:func:`verify`) is Standard Webhooks: the signed content is
``"<webhook-id>.<webhook-timestamp>.<body>"``, HMAC-SHA256 with the secret (``whsec_``
prefix, then base64; raw ``bytes`` are used as they are), and ``webhook-signature`` is a
space-separated list of ``v1,<base64>`` entries of which one must match (others, and
other versions, are ignored, so a rotated secret's two signatures both work). The compare
is constant-time (:func:`hmac.compare_digest`). The timestamp must be within
``tolerance`` seconds (300, the standard's five minutes) of ``clock()``. A bad signature,
a stale or future timestamp or a malformed header or body raises
:class:`~managedloop.errors.WebhookVerificationError` (``bad_signature``,
``stale_webhook``, ``malformed_webhook``) *before anything else happens*: nothing is
stored, attached or run.

Why by hand rather than ``client.beta.webhooks.unwrap`` (which calls the
``standardwebhooks`` package): that verifier reads the wall clock with a fixed five-minute
window (no clock to inject, so tests would depend on real time, and no tolerance to set),
and a malformed header makes it raise ``ValueError`` / ``binascii.Error`` /
``UnicodeDecodeError`` instead of one named error; it also needs the ``standardwebhooks``
package for thirty lines of HMAC. The tests check this verifier against that one both
ways (its signatures verify here, ours verify there and through ``unwrap``), so the two
cannot drift apart unnoticed.

**At most once per tool use.** A host redelivers a webhook (same ``webhook-id``) when it
did not get a 2xx in time, and one idle can raise two event types. So:

* each ``webhook-id`` is recorded in the store (``running`` → ``done`` / ``failed``); a
  delivery whose id is ``running`` or ``done`` is a ``duplicate`` and runs nothing (a
  ``failed`` one is processed again: that is the host's retry; so is a ``running`` one
  older than ``running_lease``, :data:`RUNNING_LEASE`, left by a worker that died);
* deliveries for one session are handled one at a time in this process (a lock per
  session id, shared by every receiver on the event loop), so two event types for one
  idle cannot run its tools twice: the second finds them answered in the host's history;
* every result is written to the store, keyed by session and tool-use id, *before* it is
  sent; a later delivery that finds that use still pending on the host (the send failed,
  the process died) sends the stored result and does not run the tool again;
* a tool use is marked ``started`` in the store before it runs; a later delivery that
  finds it still pending with no stored result (the process died mid-tool) answers it
  with an error result saying so rather than running it a second time. After a run that
  returns normally, marks of uses that were never run (a ``max_turns`` stop) are removed.
  Uses answered this way are listed in :attr:`WebhookOutcome.from_store` (and appear in
  the result's ``custom_tool_uses`` with an ``input_error`` saying so: they did not run).

The store is any :class:`managedloop.stores.Store` (default: one process-wide
:class:`~managedloop.stores.MemoryStore`); records older than ``retention``
(:data:`RETENTION`, a week) are swept at most once an hour, so the dedupe stays small.
Each read-decide-write on it runs under one process-wide lock, so the checks are atomic
within one process; the ``Store`` protocol has no compare-and-set, so two *processes*
sharing a persistent store and receiving the same delivery at the same instant could both
run it. Route one session's webhooks to one process, or put a lock in front. A receiver
serves one event loop (its per-session locks are the loop's).

**Answer fast, work after.** The ASGI app verifies and de-duplicates before answering,
then (``background=True``, the default) answers ``202`` at once and does the work after
the response, in the same ASGI call (as Starlette's background tasks do), because tool
runs can take longer than a host waits for an answer. Failures are then logged (error
code and message, never the secret, a key or a tool's input) and the delivery is marked
``failed``; the tool uses it did not answer stay pending on the host, so the next
delivery for that session (or a redelivery, or any ``ml.run(..., resume=session_id)``)
picks them up. With ``background=False`` the app answers after the work: ``200`` with the
outcome, or ``500`` on failure so the host redelivers. :meth:`Webhooks.handle` is always
synchronous: it returns the outcome or raises.

HTTP answers: ``202``/``200`` JSON ``{"status": ...}``; ``400`` malformed, ``401`` bad
signature or stale timestamp (``{"error": code}``), ``405`` not a POST, ``413`` a body
over :data:`MAX_BODY`; ``500`` a failed synchronous run.

Not verified against the real service: the exact headers and payload Anthropic sends
(taken from the SDK's ``BetaWebhookEvent`` types and the Standard Webhooks spec) and
whether its ``webhook-id`` equals the payload's event ``id``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

import anyio

from managedloop import _validate
from managedloop.config import Secret
from managedloop.errors import InvalidOptionsError, ManagedLoopError, WebhookVerificationError
from managedloop.hosts import Connection, OpenRequest, Provider, ToolResults, TurnInput, TurnItem
from managedloop.results import SessionResult, ToolResult, ToolUse, TurnResult
from managedloop.session import run
from managedloop.stores import MemoryStore, Store

__all__ = [
    "HANDLED_EVENTS",
    "MAX_BODY",
    "RUNNING_LEASE",
    "STORE_PREFIX",
    "TOLERANCE",
    "WebhookEvent",
    "WebhookOutcome",
    "Webhooks",
    "app",
    "handle",
    "sign",
    "verify",
]

logger = logging.getLogger("managedloop.webhooks")

TOLERANCE = 300.0
"""Seconds a delivery's timestamp may differ from now: Standard Webhooks' five minutes
(long enough for clock skew and a slow queue, short enough to bound replays)."""
MAX_BODY = 1 << 20
"""Bytes: the payloads are thin (ids only); a megabyte is far more than any real one."""
MAX_SIGNATURES = 16
"""Entries in ``webhook-signature``: a sender has one per active secret (two during a
rotation); a header with more is malformed rather than a CPU sink."""
HANDLED_EVENTS = frozenset({"session.requires_action", "session.status_idled"})
"""The event types that attach and run pending tools; any other is acknowledged."""
STORE_PREFIX = "managedloop:webhooks:"
RETENTION = 7 * 24 * 3600.0
"""Seconds a delivery or tool-use record is kept: longer than a host's retry schedule
(Standard Webhooks senders retry for a day or so), so a late redelivery is still caught."""
PRUNE_INTERVAL = 3600.0  # seconds between two sweeps of the store for expired records
RUNNING_LEASE = 3600.0
"""Seconds a delivery may stay ``running`` before a redelivery of it is processed again:
an hour covers long tool runs; past it the worker most likely died."""

_WEBHOOK_ID = re.compile(r"[A-Za-z0-9_.:=+/-]{1,256}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_SECRET_PREFIX = "whsec_"  # noqa: S105 - the key format's prefix, not a key
_STARTED = "started"
_GUARD = threading.Lock()
"""Makes each store read-decide-write atomic within the process (see _Ledger)."""
_SESSION_LOCKS: dict[str, anyio.Lock] = {}
"""One delivery at a time per session id, for every receiver on the process's loop."""


# -- verification ------------------------------------------------------------------------
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


def _refuse(code: str, message: str) -> WebhookVerificationError:
    return WebhookVerificationError(message, code=code)


def _key(secret: str | bytes | Secret) -> bytes:
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
            raise _refuse("malformed_webhook", f"the {name} header is given twice")
        out[name] = value
    return out


def sign(secret: str | bytes | Secret, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of a delivery (what a sender puts in
    ``webhook-signature``)."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
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
    key = _key(secret)
    body = payload.encode() if isinstance(payload, str) else bytes(payload)
    h = _headers(headers)
    webhook_id = h.get("webhook-id", "")
    stamp = h.get("webhook-timestamp", "")
    signatures = h.get("webhook-signature", "")
    if not (webhook_id and stamp and signatures):
        raise _refuse(
            "malformed_webhook",
            "a webhook needs webhook-id, webhook-timestamp and webhook-signature headers",
        )
    if _WEBHOOK_ID.fullmatch(webhook_id) is None:
        raise _refuse("malformed_webhook", "the webhook-id header is malformed")
    if _TIMESTAMP.fullmatch(stamp.strip()) is None:
        raise _refuse("malformed_webhook", "webhook-timestamp must be whole Unix seconds")
    timestamp = int(stamp.strip())
    now = (clock or time.time)()
    if abs(now - timestamp) > tolerance:
        raise _refuse(
            "stale_webhook",
            f"webhook-timestamp is {int(now - timestamp)} s from now (tolerance {tolerance:g} s)",
        )
    entries = signatures.split()
    if not entries or len(entries) > MAX_SIGNATURES:
        raise _refuse("malformed_webhook", "webhook-signature has no entries or too many")
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
        raise _refuse("bad_signature", "no webhook-signature entry matches the payload")
    return _parse(body, webhook_id, timestamp)


def _parse(body: bytes, webhook_id: str, timestamp: int) -> WebhookEvent:
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise _refuse("malformed_webhook", "the webhook body is not JSON") from None
    data = value.get("data") if isinstance(value, dict) else None
    if not (isinstance(value, dict) and isinstance(data, dict)):
        raise _refuse("malformed_webhook", "the webhook body is not an event with a data object")
    kind, event_id, subject = data.get("type"), value.get("id"), data.get("id")
    if not isinstance(kind, str) or not isinstance(event_id, str):
        raise _refuse("malformed_webhook", "the webhook event has no id or data.type")
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


# -- outcomes ----------------------------------------------------------------------------
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


# -- the at-most-once bookkeeping ----------------------------------------------------------
class _Ledger:
    """The store records of deliveries and tool uses (see the module docstring). Every
    read-decide-write runs in one worker-thread call under :data:`_GUARD`, so it is atomic
    for every receiver in this process, whichever event loop serves it."""

    def __init__(self, store: Store, prefix: str, clock: Callable[[], float]) -> None:
        self.store = store
        self.prefix = prefix
        self.clock = clock

    def delivery_key(self, webhook_id: str) -> str:
        return f"{self.prefix}delivery:{webhook_id}"

    def tool_key(self, session_id: str, tool_use_id: str) -> str:
        return f"{self.prefix}tool:{session_id}:{tool_use_id}"

    async def get(self, key: str) -> dict[str, Any] | None:
        return await anyio.to_thread.run_sync(self.store.get, key)

    async def put(self, key: str, value: Mapping[str, Any]) -> None:
        stamped = {**value, "at": self.clock()}
        await anyio.to_thread.run_sync(self.store.put, key, stamped)

    async def delete(self, key: str) -> None:
        await anyio.to_thread.run_sync(self.store.delete, key)

    async def admit(self, key: str, session_id: str, lease: float) -> bool:
        """Mark a delivery ``running`` unless it is running (within ``lease``) or done."""

        def decide() -> bool:
            now = self.clock()
            with _GUARD:
                record = self.store.get(key)
                state = record.get("state") if record is not None else None
                since = record.get("since") if record is not None else None
                if state == "running" and isinstance(since, int | float) and now - since > lease:
                    # A worker that died mid-delivery leaves "running" behind: after the
                    # lease it counts as failed, so the host's retry is not refused forever.
                    state = "failed"
                if state in ("running", "done"):
                    return False
                value = {"state": "running", "session_id": session_id, "since": now, "at": now}
                self.store.put(key, value)
                return True

        return await anyio.to_thread.run_sync(decide)

    async def claim(self, key: str, webhook_id: str) -> bool:
        """Mark a tool use ``started`` if nothing is recorded for it yet."""

        def decide() -> bool:
            with _GUARD:
                if self.store.get(key) is not None:
                    return False
                value = {"state": _STARTED, "webhook_id": webhook_id, "at": self.clock()}
                self.store.put(key, value)
                return True

        return await anyio.to_thread.run_sync(decide)

    async def prune(self, retention: float) -> int:
        """Delete records older than ``retention`` seconds; returns how many."""

        def sweep() -> int:
            cutoff = self.clock() - retention
            old = [
                k
                for k, v in self.store.scan(self.prefix).items()
                if isinstance(v.get("at"), int | float) and v["at"] < cutoff
            ]
            for k in old:
                self.store.delete(k)
            return len(old)

        return await anyio.to_thread.run_sync(sweep)


_INTERRUPTED = (
    "an earlier webhook delivery started this tool call and did not finish; managedloop "
    "does not run a tool twice for one tool use, so it was not run again"
)
_FROM_STORE = "answered from the webhook store (not run again)"


class _Attached:
    """A provider that wraps another for one delivery: on attach, tool uses the store has
    already answered (or started) are marked so the loop does not run them; every result
    is written to the store before it is sent. Built on the public host contract only."""

    def __init__(self, inner: Provider, ledger: _Ledger, session_id: str, webhook_id: str):
        self.inner = inner
        self.name = inner.name  # telemetry and errors name the real host
        self.supports_outcomes = False  # a resumed run sends results only
        self.supports_raw_events = False
        self.ledger = ledger
        self.session_id = session_id
        self.webhook_id = webhook_id
        self.overrides: dict[str, ToolResult] = {}
        """Answers from the store (or for an interrupted run), by tool-use id."""
        self.claimed: set[str] = set()
        self.recorded: set[str] = set()

    def __getattr__(self, name: str) -> Any:  # cache_identity, artifact_store, ...
        return getattr(self.inner, name)

    async def open(self, request: OpenRequest) -> Connection:
        conn = await self.inner.open(request)
        try:
            conn.pending_tool_uses = await self._mark(list(conn.pending_tool_uses))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await conn.aclose()
            raise
        return _RecordingConnection(conn, self)

    async def _mark(self, uses: list[ToolUse]) -> list[ToolUse]:
        out = []
        for use in uses:
            record = await self.ledger.get(self.ledger.tool_key(self.session_id, use.id or ""))
            if record is not None and isinstance(record.get("result"), dict):
                self.overrides[use.id or ""] = ToolResult.from_dict(record["result"])
            elif record is not None:
                self.overrides[use.id or ""] = ToolResult(
                    tool_use_id=use.id or "", text=_INTERRUPTED, is_error=True
                )
            if use.id in self.overrides:
                # An input_error is answered without running the tool (handler.py); the
                # answer itself is replaced in _RecordingConnection.turn.
                out.append(replace(use, input_error=_FROM_STORE))
            else:
                out.append(use)
        await self.claim(u for u in out if u.input_error is None)
        return out

    async def claim(self, uses: Iterable[ToolUse]) -> None:
        for use in uses:
            if not use.id or use.id in self.claimed or use.id in self.recorded:
                continue
            key = self.ledger.tool_key(self.session_id, use.id)
            if await self.ledger.claim(key, self.webhook_id):
                self.claimed.add(use.id)

    async def record(self, results: ToolResults) -> ToolResults:
        fixed = [self.overrides.get(r.tool_use_id, r) for r in results.results]
        for r in fixed:
            if r.tool_use_id and r.tool_use_id not in self.overrides:
                key = self.ledger.tool_key(self.session_id, r.tool_use_id)
                await self.ledger.put(key, {"result": r.to_dict(), "webhook_id": self.webhook_id})
                self.recorded.add(r.tool_use_id)
        return replace(results, results=fixed)

    async def release_unrun(self) -> None:
        """After a normal return: uses claimed but never run (the loop stopped first)."""
        for tid in self.claimed - self.recorded:
            await self.ledger.delete(self.ledger.tool_key(self.session_id, tid))


class _RecordingConnection:
    """The wrapped connection: results go through the store on their way out."""

    def __init__(self, inner: Connection, owner: _Attached) -> None:
        self._inner = inner
        self._owner = owner
        self.pending_tool_uses: list[ToolUse] = inner.pending_tool_uses
        self.session_id: str | None = inner.session_id  # fixed once attached
        self.resumed: bool = inner.resumed

    def __getattr__(self, name: str) -> Any:  # normalize, recover, send, ...
        return getattr(self._inner, name)

    async def turn(self, input: TurnInput) -> AsyncIterator[TurnItem]:
        if isinstance(input, ToolResults):
            input = await self._owner.record(input)
        async for item in self._inner.turn(input):
            if isinstance(item, TurnResult) and item.custom_tool_uses:
                await self._owner.claim(item.custom_tool_uses)
            yield item

    def transcript(self) -> list[dict[str, Any]] | None:
        return self._inner.transcript()

    async def interrupt(self) -> None:
        await self._inner.interrupt()

    async def aclose(self) -> None:
        await self._inner.aclose()


# -- the receiver ------------------------------------------------------------------------
_DEFAULT_STORE: Store | None = None


def _default_store() -> Store:
    global _DEFAULT_STORE
    if _DEFAULT_STORE is None:
        _DEFAULT_STORE = MemoryStore()
    return _DEFAULT_STORE


ProviderSource = Provider | Callable[[], Provider | Awaitable[Provider]]


class Webhooks:
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
        self._key = _key(secret)  # checked now; kept as bytes, never shown
        self._provider = provider
        self.agent = agent
        self.handler = handler
        self.tolerance = float(tolerance)
        self.clock = clock
        self.background = background
        self.run_options = dict(run_options or {})
        self.on_outcome = on_outcome
        self.running_lease = float(running_lease)
        self._ledger = _Ledger(
            store if store is not None else _default_store(), store_prefix, clock or time.time
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
            raise _refuse("malformed_webhook", "the event's data.id is not a session id")
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
                await self._ledger.put(
                    key, {"state": "failed", "session_id": sid, "error": _code(exc)}
                )
            _log_failure(event, exc)
            raise
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                _SESSION_LOCKS.pop(sid, None)
        await self._ledger.put(key, {"state": "done", "session_id": sid, "status": outcome.status})
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
        attached = _Attached(provider, self._ledger, sid, event.webhook_id)
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
            await _answer(send, 405, {"error": "method_not_allowed"}, allow="POST")
            return
        body = await _read_body(receive)
        if body is None:
            await _answer(send, 413, {"error": "payload_too_large"})
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
            await _answer(send, status, {"error": exc.code})
            return
        if outcome is not None:
            await _answer(send, 200, outcome.to_json())
            return
        if self.background:
            accepted = WebhookOutcome(
                status="accepted",
                webhook_id=event.webhook_id,
                event_type=event.type,
                session_id=event.subject_id,
            )
            await _answer(send, 202, accepted.to_json())
            try:
                done = await self._process(event)
            except Exception:
                return  # logged by _process; the delivery is marked failed
            await self._report(done)
            return
        try:
            done = await self._process(event)
        except Exception as exc:
            await _answer(send, 500, {"error": _code(exc), "webhook_id": event.webhook_id})
            return
        await self._report(done)
        await _answer(send, 200, done.to_json())

    async def _report(self, outcome: WebhookOutcome) -> None:
        if self.on_outcome is None:
            return
        try:
            value = self.on_outcome(outcome)
            if inspect.isawaitable(value):
                await value
        except Exception as exc:
            logger.error("webhook on_outcome callback raised %s", type(exc).__name__)


def _code(exc: BaseException) -> str:
    return exc.code if isinstance(exc, ManagedLoopError) else type(exc).__name__


def _log_failure(event: WebhookEvent, exc: BaseException) -> None:
    # The message of a ManagedLoopError never holds a secret (errors.py); anything else is
    # named by type only: a foreign exception's text may quote a request or a tool's input.
    detail = exc.message if isinstance(exc, ManagedLoopError) else ""
    logger.error(
        "webhook %s (%s) for session %s failed: %s %s; its unanswered tool uses stay "
        "pending on the host",
        event.webhook_id,
        event.type,
        event.subject_id,
        _code(exc),
        detail,
    )


async def _read_body(receive: Callable[[], Awaitable[MutableMapping[str, Any]]]) -> bytes | None:
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


async def _answer(send: Any, status: int, body: Mapping[str, Any], allow: str = "") -> None:
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
