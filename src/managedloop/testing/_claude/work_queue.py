"""The work queue of the emulator's ``self_hosted`` environments (``host-surface-2026-12.md`` §1).

A session created on an environment whose config is ``{"type": "self_hosted"}`` queues a
work item; a worker long-polls the queue with the environment key, acks the item, claims
it with a first heartbeat and serves the session's built-in tool uses (``agent.tool_use``,
answered with ``user.tool_result``) until it stops the item. What is imitated, as the SDK's
``anthropic.lib.environments`` runs it:

* **poll** ``GET /v1/environments/{env}/work/poll``: ``block_ms`` 1-999 (``0`` or more is a
  ``400``; absent = non-blocking), ``reclaim_older_than_ms`` (default 5000: an item polled
  but not acked for that long is offered again), header ``Anthropic-Worker-ID``. No work is
  ``200`` with body ``null``. The item carries ``secret``: URL-safe base64 (unpadded) of
  ``{"sessions_token": ...}``, the bearer for that item's heartbeat, stop and session calls.
* **ack** moves a polled item to ``starting`` and off the queue (``409`` if not pending).
* **heartbeat** takes ``expected_last_heartbeat`` (``NO_HEARTBEAT`` first, then the echo):
  a stale value is ``412`` with ``details.error_code: "heartbeat_precondition_failed"`` and
  ``details.current_state``; once ``stopping``/``stopped`` it answers
  ``lease_extended: false`` without the check. A lease not renewed within its TTL belongs to
  a dead worker: the item is queued again (reclaim), its heartbeat cleared.
* **stop** (``{"force": bool}``) ends the item; ``409`` if already stopped.
* **stats**, **list** (environment key only: an API key is refused), **retrieve** and
  **update** (API key only: the environment key and the sessions token are refused).
* A session whose item is stopped queues a new one when it gets new input (a long-dormant
  session coming back).

Credentials (§1.2): the API key for retrieve/update; the environment key
(:meth:`WorkQueue.environment_key`; the service issues it in the console, no API does) for
poll, ack and list; heartbeat, stop and stats take any of the three. The sessions token and
the environment key also authorise that environment's sessions' own endpoints (the SDK's
worker reads and answers the session with them).

Time is the queue's ``clock`` (``time.monotonic`` unless a test gives another), and
:meth:`WorkQueue.expire_leases` ends every lease at once, so a test of a dead worker needs
no wall-clock wait. Faults: ``hang_polls`` (the next N polls never answer),
``fail_heartbeats`` (the next N heartbeats are answered with ``heartbeat_status``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from managedloop.testing._claude.resources import api_error
from managedloop.testing._claude.session import now_iso

if TYPE_CHECKING:
    from managedloop.testing._claude.session import EmuSession

__all__ = ["WorkItem", "WorkQueue"]

NO_HEARTBEAT = "NO_HEARTBEAT"
DEFAULT_TTL = 300  # seconds: the service's default lease (the SDK assumes it until told)
DEFAULT_RECLAIM_MS = 5000
WORKERS_SEEN_FOR = 30.0  # seconds: ``stats.workers_polling`` counts ids seen this recently
_LIVE = ("queued", "starting", "active", "stopping")


@dataclass
class WorkItem:
    """One work item (the emulator's own record; :meth:`to_wire` is the API's shape)."""

    id: str
    environment_id: str
    session_id: str
    sessions_token: str
    created_at: str
    state: str = "queued"
    metadata: dict[str, str] = field(default_factory=dict)
    acknowledged_at: str | None = None
    started_at: str | None = None
    latest_heartbeat_at: str | None = None
    stop_requested_at: str | None = None
    stopped_at: str | None = None
    offered_at: float | None = None
    """Clock time of the poll that offered it (pending until acked), else ``None``."""
    worker_id: str | None = None
    lease_expires: float = float("inf")
    ttl_seconds: int = DEFAULT_TTL
    polls: int = 0
    """How many times a poll offered this item (a reclaimed one is offered again)."""

    def to_wire(self, *, with_secret: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "type": "work",
            "environment_id": self.environment_id,
            "data": {"type": "session", "id": self.session_id},
            "state": self.state,
            "metadata": dict(self.metadata),
            "created_at": self.created_at,
            "acknowledged_at": self.acknowledged_at,
            "started_at": self.started_at,
            "latest_heartbeat_at": self.latest_heartbeat_at,
            "stop_requested_at": self.stop_requested_at,
            "stopped_at": self.stopped_at,
            "secret": None,
        }
        if with_secret:
            payload = json.dumps({"sessions_token": self.sessions_token}).encode()
            out["secret"] = base64.urlsafe_b64encode(payload).decode().rstrip("=")
        return out

    def lease_state(self) -> dict[str, Any]:
        return {
            "last_heartbeat": self.latest_heartbeat_at,
            "lease_extended": False,
            "state": self.state,
            "ttl_seconds": self.ttl_seconds,
        }


def _secret(request: web.Request) -> str | None:
    """The credential a request presents (``x-api-key`` wins over a bearer, as the
    emulator's middleware reads it)."""
    key = request.headers.get("x-api-key")
    if key is not None:
        return key
    auth = request.headers.get("authorization", "")
    return auth[len("Bearer ") :] if auth.startswith("Bearer ") else None


class WorkQueue:
    """The work queues of every ``self_hosted`` environment of one emulator."""

    def __init__(self, emulator: Any) -> None:
        self._emu = emulator  # the ClaudeEmulator (its state, mint, api_key and pager)
        self.items: dict[str, WorkItem] = {}
        self.keys: dict[str, str] = {}
        """Environment id -> its environment key."""
        self.clock: Callable[[], float] = time.monotonic
        self.hang_polls = 0
        """Fault: the next N polls hang until the client gives up."""
        self.fail_heartbeats = 0
        """Fault: the next N heartbeats are answered with :attr:`heartbeat_status`."""
        self.heartbeat_status = 503
        self.polls = 0
        self._seen_workers: dict[str, float] = {}
        self._arrived: asyncio.Event | None = None
        self._beats = 0

    # -- helpers for tests and the emulator ---------------------------------------------
    def environment_key(self, environment_id: str) -> str:
        """The environment key of a ``self_hosted`` environment (minted on first use)."""
        env = self._emu.state.environments.get(environment_id)
        config = env.get("config") if env is not None else None
        if not isinstance(config, dict) or config.get("type") != "self_hosted":
            raise ValueError(f"{environment_id!r} is not a self_hosted environment")
        if environment_id not in self.keys:
            self.keys[environment_id] = f"envkey-emu-{secrets.token_hex(12)}"
        return self.keys[environment_id]

    def self_hosted(self, environment_id: str) -> bool:
        env = self._emu.state.environments.get(environment_id)
        config = env.get("config") if env is not None else None
        return isinstance(config, dict) and config.get("type") == "self_hosted"

    def of_session(self, session_id: str) -> list[WorkItem]:
        """The work items of one session, oldest first."""
        return [i for i in self.items.values() if i.session_id == session_id]

    def expire_leases(self) -> None:
        """End every held lease now, as if its worker had died and the TTL passed."""
        for item in self.items.values():
            if item.state in ("starting", "active"):
                item.lease_expires = float("-inf")

    def enqueue(self, session: EmuSession) -> WorkItem:
        item = WorkItem(
            id=self._emu.mint("work_"),
            environment_id=session.environment_id,
            session_id=session.id,
            sessions_token=f"sesstok-emu-{secrets.token_hex(12)}",
            created_at=now_iso(),
        )
        self.items[item.id] = item
        if self._arrived is not None:
            self._arrived.set()
        return item

    def on_input(self, session: EmuSession) -> None:
        """A self-hosted session got input: queue an item unless a live one serves it."""
        if not any(i.state in _LIVE for i in self.of_session(session.id)):
            self.enqueue(session)

    def authorizes(self, secret: str, path: str) -> bool:
        """Whether ``secret`` (an environment key or a sessions token) may call ``path``."""
        parts = path.strip("/").split("/")
        if len(parts) >= 4 and parts[:2] == ["v1", "environments"] and parts[3] == "work":
            env_id = parts[2]
            if secrets.compare_digest(self.keys.get(env_id, "\0"), secret):
                return True
            return any(
                i.environment_id == env_id and secrets.compare_digest(i.sessions_token, secret)
                for i in self.items.values()
            )
        if len(parts) >= 3 and parts[:2] == ["v1", "sessions"]:
            session = self._emu.state.sessions.get(parts[2])
            if session is None:
                return False
            key = self.keys.get(session.environment_id, "\0")
            if secrets.compare_digest(key, secret):
                return True
            return any(
                secrets.compare_digest(i.sessions_token, secret)
                for i in self.of_session(session.id)
                if i.state != "stopped"
            )
        return False

    def _stamp(self) -> str:
        """An RFC 3339 time unique to this beat (the precondition compares it verbatim, so
        two beats in one clock tick must still differ)."""
        self._beats += 1
        at = dt.datetime.now(dt.UTC) + dt.timedelta(microseconds=self._beats)
        return at.isoformat().replace("+00:00", "Z")

    # -- HTTP ---------------------------------------------------------------------------
    def add_routes(self, r: web.UrlDispatcher) -> None:
        base = "/v1/environments/{env}/work"
        r.add_get(base + "/poll", self._poll)  # before {work_id}: "poll" is not an id
        r.add_get(base + "/stats", self._stats)
        r.add_get(base, self._list)
        r.add_get(base + "/{work_id}", self._retrieve)
        r.add_post(base + "/{work_id}", self._update)
        r.add_post(base + "/{work_id}/ack", self._ack)
        r.add_post(base + "/{work_id}/heartbeat", self._heartbeat)
        r.add_post(base + "/{work_id}/stop", self._stop)

    def _credential(self, request: web.Request) -> str:
        """Which credential the request carries: ``api_key``, ``environment_key``,
        ``sessions_token`` or ``none``."""
        secret = _secret(request)
        if secret is None:
            return "none"
        if secrets.compare_digest(secret, self._emu.api_key):
            return "api_key"
        env_id = request.match_info["env"]
        if secrets.compare_digest(self.keys.get(env_id, "\0"), secret):
            return "environment_key"
        return "sessions_token"

    def _environment(self, request: web.Request) -> web.Response | None:
        env_id = request.match_info["env"]
        if env_id not in self._emu.state.environments:
            return api_error(404, f"environment {env_id!r} not found", "not_found_error")
        if not self.self_hosted(env_id):
            return api_error(400, "this environment is not self_hosted; it has no work queue")
        return None

    def _item(self, request: web.Request) -> WorkItem | web.Response:
        refused = self._environment(request)
        if refused is not None:
            return refused
        item = self.items.get(request.match_info["work_id"])
        if item is None or item.environment_id != request.match_info["env"]:
            return api_error(404, "work item not found", "not_found_error")
        return item

    def _reclaim(self, environment_id: str, older_than_ms: int) -> None:
        now = self.clock()
        for item in self.items.values():
            if item.environment_id != environment_id:
                continue
            offered = item.offered_at
            stale = offered is not None and now - offered >= older_than_ms / 1000
            if item.state == "queued" and stale:
                item.offered_at = None  # polled, never acked: offer it again
            if item.state in ("starting", "active") and now >= item.lease_expires:
                # The worker holding it stopped heartbeating: the item goes back to the queue.
                item.state = "queued"
                item.offered_at = None
                item.worker_id = None
                item.latest_heartbeat_at = None
                item.lease_expires = float("inf")

    def _next(self, environment_id: str) -> WorkItem | None:
        for item in self.items.values():
            queued = item.state == "queued" and item.offered_at is None
            if item.environment_id == environment_id and queued:
                return item
        return None

    async def _poll(self, request: web.Request) -> web.StreamResponse:
        refused = self._environment(request)
        if refused is not None:
            return refused
        if self._credential(request) != "environment_key":
            return api_error(401, "poll takes the environment key", "authentication_error")
        try:
            block = request.query.get("block_ms")
            block_ms = None if block is None else int(block)
            reclaim = int(request.query.get("reclaim_older_than_ms", DEFAULT_RECLAIM_MS))
        except ValueError:
            return api_error(400, "block_ms and reclaim_older_than_ms must be integers")
        if block_ms is not None and not 1 <= block_ms <= 999:
            return api_error(400, "block_ms: must be between 1 and 999")
        self.polls += 1
        env_id = request.match_info["env"]
        worker = request.headers.get("anthropic-worker-id")
        if worker:
            self._seen_workers[worker] = self.clock()
        if self.hang_polls > 0:
            self.hang_polls -= 1
            await asyncio.Event().wait()  # never answered: the client's timeout must end it
        self._reclaim(env_id, reclaim)
        item = self._next(env_id)
        if item is None and block_ms is not None:
            self._arrived = self._arrived or asyncio.Event()
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), block_ms / 1000)
            self._reclaim(env_id, reclaim)
            item = self._next(env_id)
        gone = request.transport is None or request.transport.is_closing()
        if item is None or gone:  # a poller that went away is offered nothing
            return web.json_response(None)
        item.offered_at = self.clock()
        item.worker_id = worker
        item.polls += 1
        return web.json_response(item.to_wire(with_secret=True))

    async def _ack(self, request: web.Request) -> web.Response:
        item = self._item(request)
        if isinstance(item, web.Response):
            return item
        if self._credential(request) != "environment_key":
            return api_error(401, "ack takes the environment key", "authentication_error")
        if item.state != "queued" or item.offered_at is None:
            return api_error(409, f"work item is {item.state}, not pending", "conflict_error")
        item.state = "starting"
        item.acknowledged_at = now_iso()
        item.offered_at = None
        item.lease_expires = self.clock() + item.ttl_seconds
        return web.json_response(item.to_wire())

    async def _heartbeat(self, request: web.Request) -> web.Response:
        item = self._item(request)
        if isinstance(item, web.Response):
            return item
        if self.fail_heartbeats > 0:
            self.fail_heartbeats -= 1
            return api_error(self.heartbeat_status, "heartbeat failed (emulated)", "api_error")
        if item.state in ("stopping", "stopped"):
            return web.json_response({"type": "work_heartbeat", **item.lease_state()})
        expected = request.query.get("expected_last_heartbeat", NO_HEARTBEAT)
        current = item.latest_heartbeat_at or NO_HEARTBEAT
        if expected != current or item.state == "queued":
            body = {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "expected_last_heartbeat does not match the stored heartbeat",
                    "details": {
                        "error_code": "heartbeat_precondition_failed",
                        "current_state": item.lease_state(),
                    },
                },
                "request_id": "req_emulator",
            }
            return web.json_response(body, status=412, headers={"x-should-retry": "false"})
        try:
            ttl = int(request.query.get("desired_ttl_seconds", item.ttl_seconds))
        except ValueError:
            return api_error(400, "desired_ttl_seconds must be an integer")
        stamp = self._stamp()
        item.latest_heartbeat_at = stamp
        item.started_at = item.started_at or now_iso()
        item.state = "active"
        item.ttl_seconds = max(1, ttl)
        item.lease_expires = self.clock() + item.ttl_seconds
        return web.json_response(
            {
                "type": "work_heartbeat",
                "last_heartbeat": stamp,
                "lease_extended": True,
                "state": item.state,
                "ttl_seconds": item.ttl_seconds,
            }
        )

    async def _stop(self, request: web.Request) -> web.Response:
        item = self._item(request)
        if isinstance(item, web.Response):
            return item
        if item.state == "stopped":
            return api_error(409, "work item is already stopped", "conflict_error")
        now = now_iso()
        item.stop_requested_at = item.stop_requested_at or now
        item.state = "stopped"
        item.stopped_at = now
        item.offered_at = None
        return web.json_response(item.to_wire())

    async def _stats(self, request: web.Request) -> web.Response:
        refused = self._environment(request)
        if refused is not None:
            return refused
        env_id = request.match_info["env"]
        queued = [i for i in self.items.values() if i.environment_id == env_id]
        waiting = [i for i in queued if i.state == "queued" and i.offered_at is None]
        pending = [i for i in queued if i.state == "queued" and i.offered_at is not None]
        now = self.clock()
        polling = [w for w, t in self._seen_workers.items() if now - t <= WORKERS_SEEN_FOR]
        return web.json_response(
            {
                "type": "work_queue_stats",
                "depth": len(waiting),
                "pending": len(pending),
                "oldest_queued_at": waiting[0].created_at if waiting else None,
                "workers_polling": len(polling),
            }
        )

    async def _list(self, request: web.Request) -> web.Response:
        refused = self._environment(request)
        if refused is not None:
            return refused
        if self._credential(request) != "environment_key":
            return api_error(401, "list takes the environment key", "authentication_error")
        env_id = request.match_info["env"]
        items = [i.to_wire() for i in self.items.values() if i.environment_id == env_id]
        page: web.Response = self._emu._page(request, items)
        return page

    async def _retrieve(self, request: web.Request) -> web.Response:
        item = self._item(request)
        if isinstance(item, web.Response):
            return item
        if self._credential(request) != "api_key":
            return api_error(401, "retrieve takes the API key", "authentication_error")
        return web.json_response(item.to_wire())

    async def _update(self, request: web.Request) -> web.Response:
        item = self._item(request)
        if isinstance(item, web.Response):
            return item
        if self._credential(request) != "api_key":
            return api_error(401, "update takes the API key", "authentication_error")
        raw = await request.read()  # cached by the middleware, which parsed it already
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        metadata = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(metadata, dict):
            return api_error(400, "metadata: required, an object")
        for key, value in metadata.items():
            if value is None:
                item.metadata.pop(key, None)
            elif isinstance(value, str):
                item.metadata[key] = value
            else:
                return api_error(400, f"metadata.{key}: must be a string or null")
        return web.json_response(item.to_wire())
