"""The console's ASGI application (Starlette): pages, the live stream, the decisions.

Security, on every request (see docs/console.md):

* **Access token.** Every request needs the console's token: ``Authorization: Bearer``,
  or the ``ml_console`` cookie the console sets (HttpOnly, SameSite=Strict) when a page is
  opened as ``/?token=...`` (the URL the command prints); the token is then dropped from
  the address bar by a redirect. Without it: ``401``. Compared in constant time.
* **CSRF.** Every state change is a ``POST`` carrying the form field ``csrf``, an HMAC of
  the token: ``403`` without it (a page of another origin cannot read it to send it).
* **Content security policy** ``default-src 'none'``; scripts, styles and the live stream
  only from the console itself: no inline script runs, whatever a tool result contains.
* **Exactly once.** A decision is one ``store.update`` of the parked entry
  (:meth:`~managedloop.session.record.SessionRecord.decide`, and a claim key for durable
  sessions): of two people clicking at once, one decides and the other is told who did.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from managedloop.console import _html as h
from managedloop.errors import InvalidOptionsError
from managedloop.results import Approve, Deny
from managedloop.session.driver import run
from managedloop.session.record import PREFIX, SessionRecord, approvals_of, as_record
from managedloop.stores import Store
from managedloop.webhooks import STORE_PREFIX as WEBHOOK_PREFIX

__all__ = ["COOKIE", "PAGE_SIZE", "ResumeWith", "app"]

logger = logging.getLogger("managedloop.console")

COOKIE = "ml_console"
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
MAX_FORM_BYTES = 64 * 1024  # a decision form is a few hundred bytes
MAX_STREAM_SECONDS = 300.0  # then the browser's EventSource reconnects (Last-Event-ID)
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_PROVISIONING_KINDS = ("agent", "environment", "harness")

ResumeWith = Callable[[Mapping[str, Any]], Any]
"""``resume_with(parked) -> (provider, agent)`` (or an awaitable of it), given the parked
entry (``session_id``, ``host``, ``agent``, ``agent_id``, ``model``, ``approvals``...):
what the console passes to ``ml.run`` to resume that session."""


class _Guard:
    """The token and CSRF checks and the security headers, around every request."""

    def __init__(self, app: ASGIApp, token: str, csrf: str) -> None:
        self.app = app
        self.token = token
        self.csrf = csrf

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        given = request.query_params.get("token")
        if given is not None and _same(given, self.token):
            # The printed URL: keep the token in a cookie, drop it from the address bar.
            target = request.url.remove_query_params("token")
            # One leading slash: "//host" would send the browser to another site.
            where = "/" + target.path.lstrip("/") + _q(target.query)
            response: Response = RedirectResponse(where, 303)
            response.set_cookie(
                COOKIE,
                self.token,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
            await _secured(response)(scope, receive, send)
            return
        if not self._authorized(request):
            page = "<!doctype html><title>401</title><p>This console needs its access token."
            await _secured(HTMLResponse(page, 401))(scope, receive, send)
            return
        downstream = receive
        if request.method not in ("GET", "HEAD"):
            if _int(request.headers.get("content-length"), 0, 0, 10**12) > MAX_FORM_BYTES:
                await _secured(HTMLResponse("form too large", 413))(scope, receive, send)
                return
            body = b""
            async for chunk in request.stream():  # bounded also without a content-length
                body += chunk
                if len(body) > MAX_FORM_BYTES:
                    await _secured(HTMLResponse("form too large", 413))(scope, receive, send)
                    return
            if not self._csrf_ok(request, body):
                page = "<!doctype html><title>403</title><p>Missing or wrong CSRF token."
                await _secured(HTMLResponse(page, 403))(scope, receive, send)
                return
            downstream = _replay(body, receive)

        async def secured_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += _SECURITY_HEADERS
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, downstream, secured_send)

    def _authorized(self, request: Request) -> bool:
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and _same(auth[7:].strip(), self.token):
            return True
        cookie = request.cookies.get(COOKIE)
        return cookie is not None and _same(cookie, self.token)

    def _csrf_ok(self, request: Request, body: bytes) -> bool:
        header = request.headers.get("x-csrf-token")
        if header is not None:
            return _same(header, self.csrf)
        if not request.headers.get("content-type", "").startswith(_FORM):
            return False  # the console's forms are url-encoded; nothing else changes state
        values = parse_qs(body.decode("utf-8", "replace")).get("csrf", [])
        return len(values) == 1 and _same(values[0], self.csrf)


_FORM = "application/x-www-form-urlencoded"


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the already-read body on once, then the client's own."""
    given = False

    async def replay() -> Any:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


_SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


def _secured(response: Response) -> Response:
    for name, value in _SECURITY_HEADERS:
        response.headers[name.decode()] = value.decode()
    return response


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))


def _q(query: str) -> str:
    return "?" + query if query else ""


class Console:
    """The state behind the pages: where to read, how to resume, what is allowed."""

    def __init__(
        self,
        record: SessionRecord,
        *,
        csrf: str,
        read_only: bool,
        resume_with: ResumeWith | None,
        temporal: Any,
        poll_interval: float,
        user_header: str | None,
        run_options: Mapping[str, Any],
        list_ttl: float,
    ) -> None:
        self.record = record
        self.store: Store = record.store
        self.csrf = csrf
        self.read_only = read_only
        self.resume_with = resume_with
        self.temporal = temporal
        self.poll_interval = poll_interval
        self.user_header = user_header
        self.run_options = dict(run_options)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.list_ttl = list_ttl
        self._listed: tuple[float, list[dict[str, Any]]] | None = None

    async def all_sessions(self) -> list[dict[str, Any]]:
        """Every summary, sorted: read again when older than ``list_ttl`` seconds (paging
        and filtering within it cost no scan of the store)."""
        now = time.monotonic()
        cached = self._listed
        if cached is not None and now - cached[0] < self.list_ttl:
            return cached[1]
        found: list[dict[str, Any]] = await self.blocking(self.record.sessions)
        self._listed = (now, found)
        return found

    async def blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args)

    def who(self, request: Request) -> str:
        if self.user_header:
            name = request.headers.get(self.user_header)
            if name:
                return name[:200]
        return "console"

    def root(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def page(
        self, request: Request, title: str, body: str, nav: str, status: int = 200
    ) -> Response:
        text = h.layout(self.root(request), title, body, nav=nav, read_only=self.read_only)
        return HTMLResponse(text, status)

    # -- sessions --------------------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        q = request.query_params
        search = (q.get("q") or "").strip().lower()
        status = q.get("status") or ""
        host = q.get("host") or ""
        page = _int(q.get("page"), 1, 1, 10**9)
        per = _int(q.get("per"), PAGE_SIZE, 1, MAX_PAGE_SIZE)
        everyone = await self.all_sessions()
        hosts = sorted({str(s.get("host")) for s in everyone if s.get("host")})
        shown = [
            s
            for s in everyone
            if (not status or s.get("status") == status)
            and (not host or s.get("host") == host)
            and (not search or search in _haystack(s))
        ]
        total = len(shown)
        chunk = shown[(page - 1) * per : page * per]
        wanted = {"q": search, "status": status, "host": host}
        body = self.sessions_body(request, chunk, (total, page, per), hosts, wanted)
        return self.page(request, "Sessions", body, "sessions")

    def sessions_body(
        self,
        request: Request,
        chunk: list[dict[str, Any]],
        counts: tuple[int, int, int],
        hosts: list[str],
        wanted: dict[str, str],
    ) -> str:
        root = self.root(request)
        e = h.e
        total, page, per = counts
        search, status, host = wanted["q"], wanted["status"], wanted["host"]
        statuses = ["running", "parked", "done", "failed", "stopped"]
        form = (
            f'<form method=get action="{e(root)}/" class=filters>'
            f'<input type=search name=q value="{e(search)}" '
            'placeholder="search id, agent, model, host">'
            + h.select("status", statuses, status, "any status")
            + h.select("host", hosts, host, "any host")
            + "<button type=submit>Filter</button></form>"
        )
        rows = []
        for s in chunk:
            sid = str(s.get("session_id"))
            terminal = e(s.get("terminal") or "")
            if s.get("reason"):
                terminal += f' <span class="muted">{e(s.get("reason"))}</span>'
            rows.append(
                [
                    f'<a href="{e(root)}/sessions/{e(_path(sid))}">{e(sid)}</a>',
                    e(s.get("host")),
                    e(s.get("agent") or s.get("agent_id") or ""),
                    h.status_badge(s.get("status")),
                    terminal,
                    h.tokens(s.get("usage")),
                    h.cost(s.get("usage")),
                    e(h.when(s.get("updated_at"))),
                ]
            )
        head = ["Session", "Host", "Agent", "Status", "Terminal", "Tokens", "Cost", "Last activity"]
        pages = max(1, -(-total // per))
        params = {
            **wanted,
            "per": per if per != PAGE_SIZE else None,
        }
        prev = (
            f'<a rel=prev href="{e(h.url(root, "/", page=page - 1, **params))}">← newer</a>'
            if page > 1
            else ""
        )
        nxt = (
            f'<a rel=next href="{e(h.url(root, "/", page=page + 1, **params))}">older →</a>'
            if page < pages
            else ""
        )
        pager = f"<p class=pager>{prev} page {page} of {pages} · {total} sessions {nxt}</p>"
        empty = "<p>No sessions recorded yet.</p>" if not chunk else ""
        return form + pager + (h.table(head, rows, cls="sessions") if chunk else empty) + pager

    async def session(self, request: Request) -> Response:
        sid = request.path_params["sid"]
        summary = await self.blocking(self.record.session, sid)
        if summary is None:
            return self.page(
                request,
                "Not found",
                f"<p>No session {h.e(sid)} in the record.</p>",
                "sessions",
                404,
            )
        items = await self.blocking(self.record.events, sid)
        parked = await self.blocking(self.record.parked, sid)
        root = self.root(request)
        e = h.e
        dl = _facts(summary)
        approvals = "".join(self.approval_cards(request, p) for p in parked)
        if approvals:
            approvals = (
                f"<section class=approvals><h2>Waiting for a decision</h2>{approvals}</section>"
            )
        last = items[-1]["seq"] + 1 if items else 0
        dropped = int(summary.get("entries") or 0) - len(items)
        note = (
            f'<p class="muted">{dropped} older entries are past the record\'s retention.</p>'
            if items and items[0].get("seq", 0) > 0
            else ""
        )
        stream = f"{root}/sessions/{_path(sid)}/stream"
        timeline = (
            f'<h2>Timeline</h2>{note}<ol id=timeline data-stream="{e(stream)}" data-since="{last}">'
            + "".join(h.entry(i) for i in items)
            + "</ol>"
        )
        return self.page(request, f"Session {sid}", dl + approvals + timeline, "sessions")

    async def stream(self, request: Request) -> Response:
        """New timeline entries as server-sent events (``entry``: the entry's HTML;
        ``status``: the session's status), polling the record: any process may write it."""
        sid = request.path_params["sid"]
        since = _int(request.headers.get("last-event-id"), -1, -1, 10**12) + 1
        if since == 0:
            since = _int(request.query_params.get("since"), 0, 0, 10**12)

        async def events() -> AsyncIterator[str]:
            nonlocal since
            status = None
            shown: dict[str, Any] | None = None
            with anyio.move_on_after(MAX_STREAM_SECONDS):
                yield "retry: 1000\n\n"
                while True:
                    items = await self.blocking(self.record.events, sid, since)
                    for item in items:
                        since = int(item["seq"]) + 1
                        data = h.entry(item).replace("\n", "&#10;")
                        yield f"id: {item['seq']}\nevent: entry\ndata: {data}\n\n"
                    summary = await self.blocking(self.record.session, sid)
                    if summary is not None and summary != shown:
                        shown = summary
                        facts = _facts(summary).replace("\n", "&#10;")
                        yield f"event: facts\ndata: {facts}\n\n"
                    now = summary.get("status") if summary else None
                    if now != status:
                        status = now
                        yield f"event: status\ndata: {json.dumps(now)}\n\n"
                    if not items:
                        yield ": idle\n\n"
                    await anyio.sleep(self.poll_interval)

        return StreamingResponse(events(), media_type="text/event-stream")

    # -- approvals -------------------------------------------------------------------------

    def approval_cards(self, request: Request, parked: Mapping[str, Any]) -> str:
        root = self.root(request)
        e = h.e
        sid = str(parked.get("session_id"))
        decided = parked.get("decisions") or {}
        out = []
        for a in parked.get("approvals") or []:
            tid = str(a.get("id"))
            got = decided.get(tid)
            head = (
                f"<div class=card-head><code>{e(a.get('name'))}</code> in "
                f'<a href="{e(root)}/sessions/{e(_path(sid))}">{e(sid)}</a> · '
                f"{e(parked.get('host'))} · "
                f"agent {e(parked.get('agent') or parked.get('agent_id') or '')} · asked by "
                f"{e(a.get('source'))}: {e(a.get('reason'))}</div>{h.pre(a.get('input'))}"
            )
            if isinstance(got, Mapping):
                verdict = "approved" if got.get("decision") == "approve" else "denied"
                action = f"<p class=decided>Already {verdict} by {e(got.get('by'))}.</p>"
            elif self.read_only:
                action = ""
            elif self.resume_with is None:
                action = (
                    "<p class=muted>This console cannot resume sessions "
                    "(started without resume_with).</p>"
                )
            else:
                action = self.decision_form(
                    f"{root}/approvals/{_path(sid)}/{_path(tid)}",
                    {"nonce": str(parked.get("nonce"))},
                )
            failed = parked.get("resume_error")
            if failed:
                action += f"<p class=error>The resume failed: {e(failed)}</p>"
            out.append(f'<div class="card approval" data-tool-use="{e(tid)}">{head}{action}</div>')
        return "".join(out)

    def decision_form(self, action: str, hidden: Mapping[str, str]) -> str:
        e = h.e
        fields = f'<input type=hidden name=csrf value="{e(self.csrf)}">' + "".join(
            f'<input type=hidden name="{e(k)}" value="{e(v)}">' for k, v in hidden.items()
        )
        return (
            f'<form method=post action="{e(action)}" class=decide>{fields}'
            "<button type=submit name=decision value=approve class=approve>Approve</button>"
            '<input type=text name=message placeholder="reason for a denial" maxlength=2000>'
            "<button type=submit name=decision value=deny class=deny>Deny</button></form>"
        )

    async def approvals(self, request: Request) -> Response:
        parked = await self.blocking(self.record.parked)
        cards = "".join(self.approval_cards(request, p) for p in parked)
        durable = await self.temporal_cards(request)
        if not cards and not durable:
            cards = "<p>Nothing waits for a decision.</p>"
        body = cards + (f"<h2>Durable sessions (Temporal)</h2>{durable}" if durable else "")
        return self.page(request, "Approvals", body, "approvals")

    async def decide(self, request: Request) -> Response:
        if self.read_only or self.resume_with is None:
            return self.page(
                request, "Read-only", "<p>This console takes no decisions.</p>", "approvals", 403
            )
        sid = request.path_params["sid"]
        tid = request.path_params["tid"]
        form = await request.form()
        decision = _decision(form)
        if decision is None:
            return self.page(
                request, "Bad request", "<p>Choose Approve or Deny.</p>", "approvals", 400
            )
        nonce = str(form.get("nonce") or "")
        who = self.who(request)
        outcome = await self.blocking(
            lambda: self.record.decide(sid, tid, decision, nonce=nonce, by=who)
        )
        if not outcome.taken:
            earlier = outcome.decision or await self.blocking(self.earlier_decision, sid, tid)
            return self.page(
                request,
                "Already decided",
                self.not_taken(request, sid, earlier),
                "approvals",
                409,
            )
        if outcome.resume and outcome.parked is not None:
            self.spawn(self.resume(sid, outcome.parked))
        return RedirectResponse(f"{self.root(request)}/sessions/{_path(sid)}", 303)

    def earlier_decision(self, sid: str, tid: str) -> dict[str, Any] | None:
        """The decision the timeline holds for ``tid`` (the parked entry is gone once the
        session resumed)."""
        found = [
            i
            for i in self.record.events(sid)
            if i.get("kind") == "decision" and i.get("tool_use_id") == tid
        ]
        return found[-1] if found else None

    def not_taken(self, request: Request, sid: str, decision: Any) -> str:
        e = h.e
        link = f'<a href="{e(self.root(request))}/sessions/{e(_path(sid))}">the session</a>'
        if isinstance(decision, Mapping):
            verdict = "approved" if decision.get("decision") == "approve" else "denied"
            return (
                f"<p class=conflict>This call was already {verdict} by {e(decision.get('by'))} "
                f"at {e(h.when(decision.get('at')))}; your decision was not applied. "
                f"See {link}.</p>"
            )
        return (
            "<p class=conflict>This approval is no longer waiting (it was decided or "
            f"resumed); your decision was not applied. See {link}.</p>"
        )

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def resume(self, sid: str, parked: Mapping[str, Any]) -> None:
        """Resume a parked session with its decisions, through the public ``ml.run``."""
        assert self.resume_with is not None
        try:
            got = self.resume_with(parked)
            if inspect.isawaitable(got):
                got = await got
            provider, agent = got
            await run(
                provider,
                agent=agent,
                resume=parked["result"],
                approvals=approvals_of(parked),
                record=self.record,
                **self.run_options,
            )
        except Exception as exc:
            logger.exception("resuming session %s failed", sid)
            message = f"{type(exc).__name__}: {getattr(exc, 'code', '')}"
            with contextlib.suppress(Exception):
                await self.blocking(self.record.resume_failed, sid, message)

    # -- Temporal --------------------------------------------------------------------------

    async def temporal_client(self) -> Any:
        """The Temporal client: given, or made on first use by the given async factory
        (so it lives on the server's event loop)."""
        if callable(self.temporal) and not hasattr(self.temporal, "list_workflows"):
            got = self.temporal()
            self.temporal = await got if inspect.isawaitable(got) else got
        return self.temporal

    async def temporal_cards(self, request: Request) -> str:
        if self.temporal is None:
            return ""
        from managedloop.contrib import temporal as mlt

        client = await self.temporal_client()

        root = self.root(request)
        e = h.e
        out = []
        # Every running workflow: a session's pending memo is read by mlt.pending (other
        # workflows have none and list nothing).
        query = 'ExecutionStatus = "Running"'
        async for wf in client.list_workflows(query):
            wid = wf.id
            for a in await mlt.pending(client, wid):
                tid = a.id
                claim = await self.blocking(self.store.get, _claim_key(wid, tid))
                head = (
                    f"<div class=card-head><code>{e(a.tool_use.name)}</code> in workflow "
                    f"<code>{e(wid)}</code> · asked by {e(a.source)}: {e(a.reason)}</div>"
                    f"{h.pre(a.tool_use.input)}"
                )
                if claim is not None:
                    verdict = "approved" if claim.get("decision") == "approve" else "denied"
                    action = f"<p class=decided>Already {verdict} by {e(claim.get('by'))}.</p>"
                elif self.read_only:
                    action = ""
                else:
                    action = self.decision_form(f"{root}/temporal/{_path(wid)}/{_path(tid)}", {})
                out.append(
                    f'<div class="card approval durable" data-tool-use="{e(tid)}">'
                    f"{head}{action}</div>"
                )
        return "".join(out)

    async def decide_temporal(self, request: Request) -> Response:
        if self.read_only or self.temporal is None:
            return self.page(
                request, "Read-only", "<p>This console takes no decisions.</p>", "approvals", 403
            )
        from managedloop.contrib import temporal as mlt

        wid = request.path_params["wid"]
        tid = request.path_params["tid"]
        decision = _decision(await request.form())
        if decision is None:
            return self.page(
                request, "Bad request", "<p>Choose Approve or Deny.</p>", "approvals", 400
            )
        client = await self.temporal_client()
        waiting = {a.id for a in await mlt.pending(client, wid)}
        if tid not in waiting:
            return self.page(
                request, "Already decided", self.not_taken(request, wid, None), "approvals", 409
            )
        token = secrets.token_hex(8)
        mine = {
            **decision.to_dict(),
            "by": self.who(request),
            "at": self.record.clock(),
            "token": token,
        }

        def claim(cur: dict[str, Any] | None) -> dict[str, Any]:
            return cur if cur is not None else mine

        got = await self.blocking(self.store.update, _claim_key(wid, tid), claim)
        if got is None or got.get("token") != token:
            return self.page(
                request, "Already decided", self.not_taken(request, wid, got), "approvals", 409
            )
        await mlt.decide(client, wid, {tid: decision})
        return RedirectResponse(f"{self.root(request)}/approvals", 303)

    # -- provisioning and webhooks ---------------------------------------------------------

    async def provisioning(self, request: Request) -> Response:
        keep = _int(request.query_params.get("keep"), 3, 1, 1000)
        e = h.e
        parts = []
        for kind in _PROVISIONING_KINDS:
            index = await self.blocking(self.store.scan, f"ml:{kind}:")
            tags = await self.blocking(self.store.scan, f"ml:tags:{kind}:")
            if not index and not tags:
                continue
            bases: dict[str, list[tuple[str, dict[str, Any]]]] = {}
            for key, value in index.items():
                base, digest8 = key[len(f"ml:{kind}:") :].rsplit(":", 1)
                bases.setdefault(base, []).append((digest8, value))
            rows = []
            for base in sorted(set(bases) | {k[len(f"ml:tags:{kind}:") :] for k in tags}):
                tagmap = (tags.get(f"ml:tags:{kind}:{base}") or {}).get("tags") or {}
                if not isinstance(tagmap, Mapping):
                    tagmap = {}
                for digest8, value in sorted(bases.get(base, [])):
                    handle = value.get("handle") or {}
                    names = [t for t, d in tagmap.items() if str(d)[:8] == digest8]
                    rows.append(
                        [
                            e(base),
                            e(handle.get("name")),
                            f"<code>{e(digest8)}</code>",
                            e(_handle_id(handle)),
                            e(", ".join(names)),
                            e(value.get("account") or ""),
                        ]
                    )
            untagged = sum(1 for r in rows if not r[4])
            parts.append(
                f"<h2>{e(kind.capitalize())}s</h2>"
                + h.table(
                    ["Base", "Name", "Digest", "Host id", "Tags", "Account"],
                    rows,
                    cls="provisioning",
                )
                + f'<p class="muted prune">prune --keep {keep}: archives the host\'s '
                f"untagged versions of a base beyond its newest {keep}; "
                f"{untagged} untagged version(s) of these bases are in this store. "
                "The host's own listing decides (run <code>managedloop ls SPEC --keep N"
                "</code> or <code>prune --dry-run</code>).</p>"
            )
        body = "".join(parts) or "<p>The provisioning index of this store is empty.</p>"
        return self.page(request, "Provisioning", body, "provisioning")

    async def webhooks(self, request: Request) -> Response:
        found = await self.blocking(self.store.scan, f"{WEBHOOK_PREFIX}delivery:")
        e = h.e
        rows = [
            [
                f"<code>{e(k.rsplit(':', 1)[1])}</code>",
                e(v.get("state")),
                e(v.get("session_id")),
                e(h.when(v.get("at"))),
            ]
            for k, v in sorted(found.items(), key=lambda kv: -float(kv[1].get("at") or 0))[:500]
        ]
        body = (
            h.table(["Webhook", "State", "Session", "At"], rows, cls="webhooks")
            if rows
            else "<p>No webhook deliveries in this store.</p>"
        )
        return self.page(request, "Webhook deliveries", body, "webhooks")

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        kinds = {"console.js": "text/javascript", "console.css": "text/css"}
        if name not in kinds:
            return Response("not found", 404)
        data = resources.files("managedloop.console").joinpath("static", name).read_bytes()
        return Response(data, media_type=kinds[name])


def _facts(summary: Mapping[str, Any]) -> str:
    """A session's summary as the ``<dl>`` at the top of its page."""
    e = h.e
    usage = summary.get("usage")
    facts = [
        ("Host", e(summary.get("host"))),
        ("Agent", e(summary.get("agent") or summary.get("agent_id") or "")),
        ("Model", e(summary.get("model") or "")),
        ("Status", h.status_badge(summary.get("status"))),
        (
            "Terminal",
            e(summary.get("terminal") or "")
            + (
                f' <span class="muted">{e(summary.get("reason"))}</span>'
                if summary.get("reason")
                else ""
            ),
        ),
        ("Stop reason", e(summary.get("stop_reason") or "")),
        ("Tokens", h.tokens(usage)),
        ("Cost", h.cost(usage)),
        ("Turns / requests", f"{e(summary.get('turns'))} / {e(summary.get('requests'))}"),
        ("Started", e(h.when(summary.get("started_at")))),
        ("Last activity", e(h.when(summary.get("updated_at")))),
    ]
    error = summary.get("error")
    if isinstance(error, Mapping):
        facts.append(("Error", f"<code>{e(error.get('code'))}</code> {e(error.get('message'))}"))
    return "<dl class=facts>" + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"


def _claim_key(wid: str, tid: str) -> str:
    return f"{PREFIX}temporal:{wid}:{tid}"


def _handle_id(handle: Mapping[str, Any]) -> str:
    for k in ("agent_id", "environment_id", "harness_arn"):
        if handle.get(k):
            return str(handle[k])
    return ""


def _decision(form: Any) -> Approve | Deny | None:
    kind = form.get("decision")
    if kind == "approve":
        return Approve()
    if kind == "deny":
        message = form.get("message")
        return Deny(message[:2000] if isinstance(message, str) else "")
    return None


def _haystack(s: Mapping[str, Any]) -> str:
    return " ".join(
        str(s.get(k) or "")
        for k in ("session_id", "agent", "agent_id", "model", "host", "reason", "terminal")
    ).lower()


def _path(value: str) -> str:
    return quote(value, safe="")


def _int(value: Any, default: int, low: int, high: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return default
    return min(max(number, low), high)


def app(
    store: Any,
    *,
    token: str | None = None,
    read_only: bool = False,
    resume_with: ResumeWith | None = None,
    temporal: Any = None,
    poll_interval: float = 0.5,
    user_header: str | None = None,
    run_options: Mapping[str, Any] | None = None,
    list_ttl: float = 2.0,
) -> Starlette:
    """The console as an ASGI application.

    ``store``: the record's :class:`~managedloop.stores.Store` (or an
    ``ml.SessionRecord``); its provisioning index and webhook deliveries are shown too.
    ``token``: the access token (at least 16 characters; default: a random one, in
    ``app.state.token``). ``read_only``: no decision buttons, and decisions are refused.
    ``resume_with(parked) -> (provider, agent)`` (sync or async): what resumes a parked
    session once decided (without it the record's approvals are shown, not decided).
    ``temporal``: a Temporal client, for durable sessions (or a zero-argument function,
    sync or async, returning one: called on first use, on the server's event loop).
    ``poll_interval``: seconds between two reads of the record by a live page.
    ``user_header``: a request header naming who decides (set by your reverse proxy),
    else decisions are by ``"console"``.
    ``run_options``: more ``ml.run`` options for a resume (``timeout``, ``max_turns``...).
    ``list_ttl``: seconds the session list's read of the store is reused for paging,
    filtering and searching (``0``: read on every page).
    """
    record = as_record(store)
    if record is None:
        raise InvalidOptionsError(
            "console.app needs a store (the session record's)", option="store"
        )
    if token is None:
        token = secrets.token_urlsafe(24)
    if not isinstance(token, str) or len(token) < 16:
        raise InvalidOptionsError(
            "the console's token must be a str of 16 characters or more", option="token"
        )
    if resume_with is not None and not callable(resume_with):
        raise InvalidOptionsError("resume_with must be callable", option="resume_with")
    csrf = hmac.new(token.encode(), b"managedloop-console-csrf", hashlib.sha256).hexdigest()
    console = Console(
        record,
        csrf=csrf,
        read_only=read_only,
        resume_with=resume_with,
        temporal=temporal,
        poll_interval=poll_interval,
        user_header=user_header,
        run_options=run_options or {},
        list_ttl=list_ttl,
    )
    routes = [
        Route("/", console.sessions),
        Route("/sessions/{sid}", console.session),
        Route("/sessions/{sid}/stream", console.stream),
        Route("/approvals", console.approvals),
        Route("/approvals/{sid}/{tid}", console.decide, methods=["POST"]),
        Route("/temporal/{wid}/{tid}", console.decide_temporal, methods=["POST"]),
        Route("/provisioning", console.provisioning),
        Route("/webhooks", console.webhooks),
        Route("/static/{name}", console.static),
    ]
    application = Starlette(routes=routes, middleware=[Middleware(_Guard, token=token, csrf=csrf)])
    application.state.token = token
    application.state.console = console
    return application
