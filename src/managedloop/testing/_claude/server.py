"""A loopback HTTP server speaking the parts of the Claude Managed Agents ``/v1`` API that
:class:`~managedloop.providers.ClaudeManagedAgents` uses.

Why hand-written: no maintained fake of this API exists, and the point is to test the
production client (the ``anthropic`` SDK) over a real socket. The encoders here are the
minimum the SDK needs (see the wire notes, "checklist for a test fake server"):

* ``event: <type>`` precedes ``data:`` on every SSE frame (the SDK drops frames without
  it), with an ``id:`` line; heartbeats are comment lines;
* either ``Authorization: Bearer`` or ``x-api-key`` is accepted, and any
  ``anthropic-version``; the managed-agents beta header is required on agents,
  environments and sessions calls;
* lists answer ``{"data": [...], "next_page": ...}``; errors use the API's envelope;
* unknown query parameters (``beta=true``) are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import json
import secrets
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import BodyPartReader, web

from managedloop.testing._claude.deployments import Deployments
from managedloop.testing._claude.faults import ClaudeFaults
from managedloop.testing._claude.resources import (
    CRUD_ROUTES,
    RESOURCES,
    RefusedError,
    Resource,
    agent_snapshot,
    api_error,
    new_record,
    update_record,
)
from managedloop.testing._claude.session import CLOSE, DROP, EmuSession, now_iso
from managedloop.testing._claude.webhooks import WebhookSender
from managedloop.testing._claude.work_queue import WorkQueue
from managedloop.testing._loopback import MAX_BODY, LoopbackServer
from managedloop.testing.script import ScriptedAgent, Step

__all__ = ["ClaudeEmulator", "RecordedRequest", "credential_id"]

MANAGED_AGENTS_BETA = "managed-agents-2026-04-01"
_SECRET_HEADERS = frozenset({"authorization", "x-api-key"})
_JSON = web.RequestKey("managedloop_json", Any)
_APPLIED = web.RequestKey("managedloop_applied", bool)
_CALL_TIMEOUT = 10.0  # seconds for call(): the emulator's loop runs nothing slow


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedRequest:
    """One request the emulator received (secret headers removed)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    json: Any = None
    filename: str | None = None
    status: int = 0
    credential: str | None = None
    """A fingerprint of the credential the request carried (``credential_id(secret)``), so
    tests can tell which key or token each attempt used without the secret being kept."""
    applied: bool = False
    """For event sends: whether the server applied the events (even if it then failed)."""


@dataclass
class _File:
    id: str
    filename: str
    mime_type: str
    data: bytes
    created_at: str
    scope_id: str | None = None
    downloadable: bool = False

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "type": "file",
            "filename": self.filename,
            "mime_type": self.mime_type,
            "size_bytes": len(self.data),
            "created_at": self.created_at,
            "downloadable": self.downloadable,
        }
        if self.scope_id is not None:
            out["scope"] = {"type": "session", "id": self.scope_id}
        return out


@dataclass
class _State:
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    environments: dict[str, dict[str, Any]] = field(default_factory=dict)
    sessions: dict[str, EmuSession] = field(default_factory=dict)
    files: dict[str, _File] = field(default_factory=dict)
    owners: dict[str, str | None] = field(default_factory=dict)
    """Record id -> the credential (account) that created it (see ``_visible``)."""

    def records(self, resource: Resource) -> dict[str, dict[str, Any]]:
        """The records of one table resource (``agents``, ``environments``), by id."""
        tables = {"agents": self.agents, "environments": self.environments}
        return tables[resource.collection]


def _body(request: web.Request) -> dict[str, Any]:
    body = request.get(_JSON)
    return body if isinstance(body, dict) else {}


def _bound(
    handler: Callable[[Resource, web.Request], Awaitable[web.Response]], resource: Resource
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A route handler serving ``resource`` through one of the generic CRUD handlers."""

    async def serve(request: web.Request) -> web.Response:
        return await handler(resource, request)

    return serve


def _not_found(resource: Resource) -> web.Response:
    return api_error(404, f"{resource.kind} not found", "not_found_error")


def _owner(request: web.Request) -> str | None:
    secret, _ = _credential(request.headers)
    return credential_id(secret) if secret is not None else None


def _credential(headers: Mapping[str, str]) -> tuple[str | None, bool]:
    """The secret a request presents and whether it came as a bearer token (an
    ``x-api-key`` header wins over ``Authorization: Bearer``)."""
    key = headers.get("x-api-key")
    if key is not None:
        return key, False
    auth = headers.get("authorization", "")
    if auth.startswith("Bearer "):
        return auth[len("Bearer ") :], True
    return None, False


def credential_id(secret: str) -> str:
    """The fingerprint :attr:`RecordedRequest.credential` uses for ``secret``."""
    return hashlib.sha256(secret.encode()).hexdigest()[:16]


class ClaudeEmulator(LoopbackServer):
    """A Claude Managed Agents API on ``127.0.0.1`` (a free port), driven by a script.

    Usable as ``with ClaudeEmulator() as emu:`` or ``async with`` (a start that fails
    raises :class:`~managedloop.testing.EmulatorStartError`). ``emu.base_url`` and
    ``emu.api_key`` configure an ``anthropic.AsyncAnthropic``; ``emu.requests`` records
    every request (secret headers removed); ``emu.agent`` is the :class:`ScriptedAgent`
    every session plays; ``emu.faults`` injects failures.
    """

    label = "Claude emulator"

    def __init__(
        self,
        script: Sequence[Step] | ScriptedAgent | None = None,
        *,
        faults: ClaudeFaults | None = None,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        confirm_tools: Sequence[str] = (),
    ) -> None:
        super().__init__(host=host, port=port)
        self.agent = script if isinstance(script, ScriptedAgent) else ScriptedAgent(script)
        self.confirm_tools = frozenset(confirm_tools)
        """Server tools whose uses ask for a ``user.tool_confirmation`` first (permission
        ``ask``): the run idles on ``requires_action`` naming the ``agent.tool_use`` until
        it is allowed (the tool runs) or denied (an error result with the deny message)."""
        self.faults = faults or ClaudeFaults()
        self.api_key = api_key or f"sk-ant-emu-{secrets.token_hex(12)}"
        self.bearer_tokens: set[str] = set()
        """Bearer tokens accepted besides the API key (for bearer-file auth tests)."""
        self.requests: list[RecordedRequest] = []
        self.state = _State()
        self._ids = itertools.count(1)
        self.deployments = Deployments(self)  # testing/_claude/deployments.py
        self.webhooks = WebhookSender(self)  # testing/_claude/webhooks.py
        self.work = WorkQueue(self)  # testing/_claude/work_queue.py: self_hosted environments

    # -- lifecycle (start, stop, ``with``, ``async with``: see testing/_loopback.py) ----
    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` once started (``""`` before: no port yet)."""
        return f"http://{self.host}:{self.port}" if self.port else ""

    async def _before_cleanup(self) -> None:
        for session in self.state.sessions.values():
            if session.run_task is not None:
                session.run_task.cancel()
            session.close_streams()
        await self.webhooks.aclose()

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the emulator's loop and return its result (thread-safe)."""
        assert self._loop is not None

        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(_CALL_TIMEOUT)

    # -- helpers for tests -------------------------------------------------------------
    def mint(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}{secrets.token_hex(3)}"

    def session(self, session_id: str | None = None) -> EmuSession:
        """A session's state (the only one when ``session_id`` is omitted)."""
        if session_id is None:
            (only,) = self.state.sessions.values()
            return only
        return self.state.sessions[session_id]

    def events(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """A session's event history as emitted."""
        return list(self.session(session_id).events)

    def sent_events(
        self, session_id: str | None = None, *, applied_only: bool = True
    ) -> list[dict[str, Any]]:
        """User events POSTed to the session, in order, as sent. By default only sends the
        server applied (a 429 or an injected 5xx before handling delivered nothing)."""
        sid = self.session(session_id).id
        out: list[dict[str, Any]] = []
        for r in self.requests:
            is_send = r.method == "POST" and r.path == f"/v1/sessions/{sid}/events"
            if is_send and r.json and (r.applied or not applied_only):
                out.extend(r.json.get("events", []))
        return out

    def inject_frame(self, frame: bytes, session_id: str | None = None) -> None:
        """Write ``frame`` verbatim to every live stream of a session (e.g. a malformed SSE
        frame a hostile server could send); it is not recorded in the history."""

        def put() -> None:
            for queue in self.session(session_id).subscribers:
                queue.put_nowait(frame)

        if self._loop is not None and threading.current_thread() is not self._thread:
            self.call(put)
        else:
            put()

    def write_output(self, session_id: str, name: str, data: bytes | str) -> dict[str, Any]:
        """Simulate the agent writing ``/mnt/session/outputs/<name>``: a session-scoped,
        downloadable file appears in the Files API."""
        payload = data.encode() if isinstance(data, str) else data

        def make() -> dict[str, Any]:
            f = _File(
                id=self.mint("file_"),
                filename=name,
                mime_type="application/octet-stream",
                data=payload,
                created_at=now_iso(),
                scope_id=session_id,
                downloadable=True,
            )
            self.state.files[f.id] = f
            return f.to_wire()

        if self._loop is not None and threading.current_thread() is not self._thread:
            result: dict[str, Any] = self.call(make)
            return result
        return make()

    def routes(self) -> list[tuple[str, str]]:
        """Every ``(method, path template)`` the emulator serves, e.g. ``("GET",
        "/v1/sessions/{id}/events")`` (the implicit ``HEAD`` of each ``GET`` left out), so a
        conformance test can cover each one and a new route cannot be missed."""
        app = self._app()  # a fresh app: the route table does not need the server running
        return [
            (route.method, route.resource.canonical)
            for route in app.router.routes()
            if route.method != "HEAD" and route.resource is not None
        ]

    # -- HTTP -------------------------------------------------------------------------
    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=MAX_BODY)
        r = app.router
        for resource in RESOURCES:
            self._add_crud_routes(r, resource)
        r.add_post("/v1/sessions", self._create_session)
        r.add_get("/v1/sessions", self._list_sessions)
        r.add_get("/v1/sessions/{id}", self._get_session)
        r.add_post("/v1/sessions/{id}/archive", self._archive_session)
        r.add_delete("/v1/sessions/{id}", self._delete_session)
        r.add_post("/v1/sessions/{id}/events", self._send_events)
        r.add_get("/v1/sessions/{id}/events", self._list_events)
        r.add_get("/v1/sessions/{id}/events/stream", self._stream)
        r.add_post("/v1/sessions/{id}/resources", self._add_resource)
        r.add_get("/v1/sessions/{id}/resources", self._list_resources)
        r.add_post("/v1/files", self._upload_file)
        r.add_get("/v1/files", self._list_files)
        r.add_get("/v1/files/{id}", self._get_file)
        r.add_get("/v1/files/{id}/content", self._download_file)
        r.add_delete("/v1/files/{id}", self._delete_file)
        self.deployments.add_routes(r)
        self.work.add_routes(r)
        return app

    def _authorized(self, secret: str | None, bearer: bool) -> bool:
        if secret is None:
            return False
        if secrets.compare_digest(secret, self.api_key):
            return True
        return bearer and secret in self.bearer_tokens

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body: Any = None
        ctype = request.headers.get("content-type", "")
        if request.can_read_body and ctype.startswith("application/json"):
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                return api_error(400, "invalid JSON body")
        secret, bearer = _credential(request.headers)
        request[_JSON] = body
        # Recorded on arrival (a stream's handler returns only when the stream ends), then
        # updated with the status once answered.
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            query={k: request.query.getall(k) for k in request.query},
            headers={
                k.lower(): v for k, v in request.headers.items() if k.lower() not in _SECRET_HEADERS
            },
            json=body,
            credential=credential_id(secret) if secret is not None else None,
        )
        self.requests.append(recorded)
        # An environment key or a work item's sessions token (bearer) reaches that
        # environment's work queue and its sessions (work_queue.WorkQueue.authorizes).
        delegated = bearer and secret is not None and self.work.authorizes(secret, request.path)
        if not self._authorized(secret, bearer) and not delegated:
            response: web.StreamResponse = api_error(
                401, "invalid x-api-key or bearer token", "authentication_error"
            )
        else:
            response = await self._dispatch(request, handler)
        done = dataclasses.replace(
            recorded, status=response.status, applied=bool(request.get(_APPLIED))
        )
        for i in range(len(self.requests) - 1, -1, -1):  # tests may have cleared the list
            if self.requests[i] is recorded:
                self.requests[i] = done
                break
        return response

    async def _dispatch(self, request: web.Request, handler: Any) -> web.StreamResponse:
        path = request.path
        needs_beta = path.startswith(("/v1/agents", "/v1/environments", "/v1/sessions"))
        beta = request.headers.get("anthropic-beta", "")
        if needs_beta and MANAGED_AGENTS_BETA not in beta.split(","):
            return api_error(400, f"this endpoint requires the {MANAGED_AGENTS_BETA} beta header")
        f = self.faults
        if f.before_request is not None:
            f.before_request(request.method, path)
        if f.matches(request.method, path):
            if f.rate_limit > 0:
                f.rate_limit -= 1
                resp = api_error(429, "rate limited (emulated)", "rate_limit_error")
                resp.headers["retry-after"] = f.retry_after
                return resp
            if f.server_errors > 0:
                f.server_errors -= 1
                return api_error(f.server_error_status, "internal error (emulated)", "api_error")
        result: web.StreamResponse = await handler(request)
        return result

    # -- agents and environments (one table: resources.RESOURCES) ---------------------
    def _add_crud_routes(self, router: web.UrlDispatcher, resource: Resource) -> None:
        handlers = {
            "create": self._create_record,
            "list": self._list_records,
            "get": self._get_record,
            "update": self._update_record,
            "archive": self._archive_record,
            "delete": self._delete_record,
        }
        for operation, method, path in CRUD_ROUTES:
            if operation in resource.operations:
                route = f"/v1/{resource.collection}{path}"
                router.add_route(method, route, _bound(handlers[operation], resource))

    def _record(self, resource: Resource, request: web.Request) -> dict[str, Any] | None:
        return self.state.records(resource).get(request.match_info["id"])

    async def _create_record(self, resource: Resource, request: web.Request) -> web.Response:
        try:
            record = new_record(
                resource,
                _body(request),
                mint=self.mint,
                now=now_iso(),
                existing=self._visible(resource, request, live=True),
            )
        except RefusedError as exc:
            return api_error(exc.status, exc.message)
        self.state.records(resource)[record["id"]] = record
        self.state.owners[record["id"]] = _owner(request)
        return web.json_response(record)

    async def _list_records(self, resource: Resource, request: web.Request) -> web.Response:
        archived = request.query.get("include_archived") == "true"
        return self._page(request, self._visible(resource, request, live=not archived))

    def _visible(
        self, resource: Resource, request: web.Request, *, live: bool
    ) -> list[dict[str, Any]]:
        """The records of the requesting credential's account (each credential is an
        account; records a test put in ``state`` directly belong to every account)."""
        owner = _owner(request)
        return [
            r
            for r in self.state.records(resource).values()
            if self.state.owners.get(r["id"], owner) == owner and not (live and r["archived_at"])
        ]

    async def _get_record(self, resource: Resource, request: web.Request) -> web.Response:
        record = self._record(resource, request)
        if record is None:
            return _not_found(resource)
        return web.json_response(record)

    async def _update_record(self, resource: Resource, request: web.Request) -> web.Response:
        record = self._record(resource, request)
        if record is None:
            return _not_found(resource)
        try:
            update_record(record, _body(request), now=now_iso())
        except RefusedError as exc:
            return api_error(exc.status, exc.message)
        return web.json_response(record)

    async def _archive_record(self, resource: Resource, request: web.Request) -> web.Response:
        record = self._record(resource, request)
        if record is None:
            return _not_found(resource)
        record["archived_at"] = record["archived_at"] or now_iso()
        return web.json_response(record)

    async def _delete_record(self, resource: Resource, request: web.Request) -> web.Response:
        record = self.state.records(resource).pop(request.match_info["id"], None)
        if record is None:
            return _not_found(resource)
        return web.json_response({"id": record["id"], "type": f"{resource.kind}_deleted"})

    # -- sessions -----------------------------------------------------------------------
    async def _create_session(self, request: web.Request) -> web.Response:
        body = _body(request)
        ref = body.get("agent")
        agent_id = ref.get("id") if isinstance(ref, Mapping) else ref
        agent = self.state.agents.get(agent_id) if isinstance(agent_id, str) else None
        if agent is None:
            return api_error(404, f"agent {agent_id!r} not found", "not_found_error")
        if agent["archived_at"]:
            return api_error(400, "agent is archived")
        env_id = body.get("environment_id")
        env = self.state.environments.get(env_id) if isinstance(env_id, str) else None
        if env is None:
            return api_error(404, f"environment {env_id!r} not found", "not_found_error")
        session = EmuSession(
            session_id=self.mint("sesn_"),
            agent=agent_snapshot(agent),
            environment_id=env_id,  # type: ignore[arg-type]
            metadata=body.get("metadata") or {},
            title=body.get("title"),
            script=self.agent,
            faults=self.faults,
            mint=self.mint,
            confirm_tools=self.confirm_tools,
            self_hosted=self.work.self_hosted(str(env_id)),
            on_input=self.work.on_input,
        )
        self.state.sessions[session.id] = session
        if session.self_hosted:
            self.work.enqueue(session)
        for res in body.get("resources") or []:
            if isinstance(res, Mapping) and res.get("type") == "file":
                session.resources.append(self._resource(res))
        initial = body.get("initial_events") or []
        if initial:
            session.accept([dict(e) for e in initial])
        return web.json_response(session.to_wire())

    def _get(self, request: web.Request) -> EmuSession | web.Response:
        session = self.state.sessions.get(request.match_info["id"])
        if session is None:
            return api_error(404, "session not found", "not_found_error")
        return session

    async def _get_session(self, request: web.Request) -> web.Response:
        session = self._get(request)
        if isinstance(session, web.Response):
            return session
        return web.json_response(session.to_wire())

    async def _list_sessions(self, request: web.Request) -> web.Response:
        items = [s.to_wire() for s in self.state.sessions.values()]
        resp = self._page(request, items)
        return resp

    async def _archive_session(self, request: web.Request) -> web.Response:
        session = self._get(request)
        if isinstance(session, web.Response):
            return session
        if session.status == "running":
            return api_error(409, "session is running; interrupt it first")
        session.archived_at = session.archived_at or now_iso()
        return web.json_response(session.to_wire())

    async def _delete_session(self, request: web.Request) -> web.Response:
        session = self._get(request)
        if isinstance(session, web.Response):
            return session
        if session.status == "running":
            return api_error(409, "session is running; interrupt it first")
        session.emit({"type": "session.deleted"})
        session.close_streams()
        del self.state.sessions[session.id]
        for f in [f for f in self.state.files.values() if f.scope_id == session.id]:
            del self.state.files[f.id]
        return web.json_response({"id": session.id, "type": "session_deleted"})

    # -- events -------------------------------------------------------------------------
    async def _send_events(self, request: web.Request) -> web.Response:
        session = self._get(request)
        if isinstance(session, web.Response):
            return session
        body = _body(request)
        events = body.get("events")
        if not isinstance(events, list) or not events:
            return api_error(400, "events: value must contain at least 1 item")
        if session.archived_at:
            return api_error(409, "session is archived")
        if session.status == "terminated":
            return api_error(409, "session is terminated")
        for ev in events:
            if not isinstance(ev, Mapping) or not isinstance(ev.get("type"), str):
                return api_error(400, "each event needs a type")
            if ev["type"] == "user.custom_tool_result":
                tid = ev.get("custom_tool_use_id")
                if tid not in session.open_calls:
                    return api_error(400, f"custom_tool_use_id {tid!r} is not awaiting a result")
            if ev["type"] == "user.tool_result":
                if not session.self_hosted:
                    return api_error(400, "user.tool_result is valid only on self_hosted")
                tid = ev.get("tool_use_id")
                if tid not in session.open_sandbox:
                    return api_error(400, f"tool_use_id {tid!r} is not awaiting a result")
            if ev["type"] == "user.tool_confirmation":
                tid = ev.get("tool_use_id")
                if tid not in session.open_confirmations:
                    return api_error(400, f"tool_use_id {tid!r} is not awaiting a confirmation")
                if ev.get("result") not in ("allow", "deny"):
                    return api_error(400, "result must be 'allow' or 'deny'")
        echoes = session.accept([dict(e) for e in events])
        request[_APPLIED] = True
        if self.faults.accept_then_fail > 0:
            self.faults.accept_then_fail -= 1
            return api_error(
                500, "internal error after accepting the events (emulated)", "api_error"
            )
        return web.json_response({"data": echoes})

    async def _list_events(self, request: web.Request) -> web.Response:
        session = self._get(request)
        if isinstance(session, web.Response):
            return session
        items = list(session.events)
        types = request.query.getall("types[]", []) or request.query.getall("types", [])
        if types:
            items = [e for e in items if e["type"] in types]
        if request.query.get("order") == "desc":
            items.reverse()
        return self._page(request, items)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        session = self._get(request)
        if isinstance(session, web.Response):
            return session
        queue: asyncio.Queue[Any] = asyncio.Queue()
        session.subscribers.append(queue)
        resp = web.StreamResponse(
            headers={"content-type": "text/event-stream", "cache-control": "no-cache"}
        )
        try:
            await resp.prepare(request)
            while True:
                beat = self.faults.heartbeat
                try:
                    item = await asyncio.wait_for(queue.get(), beat) if beat else await queue.get()
                except TimeoutError:
                    await resp.write(b": ping\n\n")
                    continue
                if item is DROP:
                    if self.faults.clean_close:
                        break
                    if request.transport is not None:
                        request.transport.abort()
                    return resp
                if item is CLOSE:
                    break
                if isinstance(item, bytes):  # a raw frame (inject_frame): sent verbatim
                    await resp.write(item)
                    continue
                data = json.dumps(item, separators=(",", ":"))
                await resp.write(
                    f"event: {item['type']}\nid: {item['id']}\ndata: {data}\n\n".encode()
                )
            with contextlib.suppress(ConnectionError):
                await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if queue in session.subscribers:
                session.subscribers.remove(queue)
        return resp

    # -- resources and files ------------------------------------------------------------
    def _resource(self, body: Mapping[str, Any]) -> dict[str, Any]:
        now = now_iso()
        file_id = body.get("file_id")
        return {
            "id": self.mint("sesrsc_"),
            "type": "file",
            "file_id": file_id,
            "mount_path": body.get("mount_path") or f"/mnt/session/uploads/{file_id}",
            "created_at": now,
            "updated_at": now,
        }

    async def _add_resource(self, request: web.Request) -> web.Response:
        session = self._get(request)
        if isinstance(session, web.Response):
            return session
        body = _body(request)
        if body.get("type") != "file" or body.get("file_id") not in self.state.files:
            return api_error(404, "file not found", "not_found_error")
        res = self._resource(body)
        session.resources.append(res)
        return web.json_response(res)

    async def _list_resources(self, request: web.Request) -> web.Response:
        session = self._get(request)
        if isinstance(session, web.Response):
            return session
        return self._page(request, list(session.resources))

    async def _upload_file(self, request: web.Request) -> web.Response:
        reader = await request.multipart()
        name, mime, data = "upload", "application/octet-stream", b""
        async for part in reader:
            if isinstance(part, BodyPartReader) and part.name == "file":
                name = getattr(part, "filename", None) or name
                mime = part.headers.get("content-type", mime) if part.headers else mime
                data = bytes(await part.read())
        f = _File(
            id=self.mint("file_"), filename=name, mime_type=mime, data=data, created_at=now_iso()
        )
        self.state.files[f.id] = f
        return web.json_response(f.to_wire())

    async def _list_files(self, request: web.Request) -> web.Response:
        scope = request.query.get("scope_id")
        items = [
            f.to_wire() for f in self.state.files.values() if scope is None or f.scope_id == scope
        ]
        return self._page(request, items)

    async def _get_file(self, request: web.Request) -> web.Response:
        f = self.state.files.get(request.match_info["id"])
        if f is None:
            return api_error(404, "file not found", "not_found_error")
        return web.json_response(f.to_wire())

    async def _download_file(self, request: web.Request) -> web.Response:
        f = self.state.files.get(request.match_info["id"])
        if f is None:
            return api_error(404, "file not found", "not_found_error")
        if not f.downloadable:
            return api_error(400, "this file is not downloadable (an uploaded input)")
        return web.Response(body=f.data, content_type="application/octet-stream")

    async def _delete_file(self, request: web.Request) -> web.Response:
        f = self.state.files.pop(request.match_info["id"], None)
        if f is None:
            return api_error(404, "file not found", "not_found_error")
        return web.json_response({"id": f.id, "type": "file_deleted"})

    # -- pagination ---------------------------------------------------------------------
    @staticmethod
    def _page(request: web.Request, items: list[Any]) -> web.Response:
        try:
            limit = max(1, min(1000, int(request.query.get("limit", "20"))))
            start = int(request.query.get("page", "page_0").removeprefix("page_"))
        except ValueError:
            return api_error(400, "invalid limit or page")
        chunk = items[start : start + limit]
        end = start + len(chunk)
        next_page = f"page_{end}" if end < len(items) else None
        return web.json_response({"data": chunk, "next_page": next_page})
