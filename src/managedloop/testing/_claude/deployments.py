"""The emulator's deployments: sessions the host starts, manually or on a cron schedule.

Served routes (the SDK's ``client.beta.deployments`` / ``client.beta.deployment_runs``):
``POST/GET /v1/deployments``, ``GET/POST /v1/deployments/{id}`` (retrieve, update),
``POST /v1/deployments/{id}/{archive,pause,unpause,run}``, ``GET /v1/deployment_runs`` and
``GET /v1/deployment_runs/{id}``. Records follow ``BetaManagedAgentsDeployment`` and
``BetaManagedAgentsDeploymentRun`` (the strict-SDK test reads every one back).

* ``POST .../run`` (or :meth:`Deployments.trigger`) starts a session at once
  (``trigger_context: {"type": "manual"}``), also on a paused deployment, as the API allows.
* A scheduled deployment fires only when a test calls :meth:`Deployments.tick` with a
  time: every cron minute in ``(last tick, now]`` (the first tick counts from the
  deployment's creation by :attr:`Deployments.clock`) starts one run with
  ``trigger_context: {"type": "schedule", "scheduled_at"}``; at most one run per
  ``(deployment, scheduled_at)``, none while paused or archived. Never real time.
* A started session is created like ``POST /v1/sessions`` with the deployment's agent,
  environment and metadata, carries ``deployment_id``, and is sent the deployment's
  ``initial_events``: the scripted agent runs, and a custom tool call parks the session in
  ``requires_action`` until a client attaches by id and answers it. Its idles are
  announced by webhook (:mod:`~managedloop.testing._claude.webhooks`).

The cron dialect is the API's: five POSIX fields (``*``, ``a``, ``a-b``, lists, ``/n``
steps; day-of-week 0-7 with 0 and 7 Sunday; when both day fields are restricted, either
matching fires), evaluated in the deployment's IANA time zone (``zoneinfo``). Written by
hand because it is ~40 lines and the emulator must not depend on a cron package;
DST-gap minutes are taken as the zone converts them (not verified against the host).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aiohttp import web

from managedloop.testing._claude.resources import CRUD_ROUTES, agent_snapshot, api_error
from managedloop.testing._claude.session import EmuSession

__all__ = ["Cron", "DeploymentSession", "Deployments", "parse_cron"]

Handler = Callable[[web.Request], Awaitable[web.Response]]
RecordHandler = Callable[[dict[str, Any], web.Request], Awaitable[web.Response]]

MAX_FIRES_PER_TICK = 100
"""A tick that spans more cron minutes than this starts only the first 100 runs (a year of
a per-minute schedule must not create half a million sessions in a test)."""
UPCOMING = 5  # the API lists up to 5 upcoming fire times
_SEARCH_DAYS = 366 * 5  # how far ahead upcoming_runs_at looks (a yearly cron included)


def _iso(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


# -- cron -------------------------------------------------------------------------------
class CronError(ValueError):
    pass


def _field(text: str, lo: int, hi: int) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise CronError(f"bad step in {part!r}")
        if body == "*":
            start, end = lo, hi
        elif "-" in body:
            a, _, b = body.partition("-")
            start, end = int(a), int(b)
        else:
            start = int(body)
            end = hi if step_text else start
        if not lo <= start <= end <= hi:
            raise CronError(f"{part!r} is outside {lo}-{hi}")
        out.update(range(start, end + 1, step))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool

    def day_matches(self, day: dt.date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow  # POSIX: both restricted, either one fires

    def fires(self, tz: ZoneInfo, after: dt.datetime, until: dt.datetime) -> list[dt.datetime]:
        """UTC instants in ``(after, until]`` that match, at most MAX_FIRES_PER_TICK."""
        return self._scan(tz, after, until, MAX_FIRES_PER_TICK)

    def upcoming(self, tz: ZoneInfo, after: dt.datetime) -> list[dt.datetime]:
        return self._scan(tz, after, after + dt.timedelta(days=_SEARCH_DAYS), UPCOMING)

    def _scan(
        self, tz: ZoneInfo, after: dt.datetime, until: dt.datetime, limit: int
    ) -> list[dt.datetime]:
        out: list[dt.datetime] = []
        day = after.astimezone(tz).date()
        last = until.astimezone(tz).date()
        while day <= last and len(out) < limit:
            if self.day_matches(day):
                for hour in sorted(self.hours):
                    for minute in sorted(self.minutes):
                        local = dt.datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz)
                        when = local.astimezone(dt.UTC)
                        if after < when <= until and len(out) < limit:
                            out.append(when)
            day += dt.timedelta(days=1)
        return out


def parse_cron(expression: str) -> Cron:
    """A five-field cron expression; ``CronError`` (a ``ValueError``) when malformed."""
    fields = expression.split()
    if len(fields) != 5:
        raise CronError("a cron expression has five fields")
    try:
        weekdays = _field(fields[4], 0, 7)
        return Cron(
            minutes=_field(fields[0], 0, 59),
            hours=_field(fields[1], 0, 23),
            days=_field(fields[2], 1, 31),
            months=_field(fields[3], 1, 12),
            weekdays=frozenset(d % 7 for d in weekdays),
            any_day=fields[2] == "*",
            any_weekday=fields[4] == "*",
        )
    except ValueError as exc:
        raise CronError(str(exc)) from None


# -- sessions started by a deployment -----------------------------------------------------
class DeploymentSession(EmuSession):
    """A session a deployment started: tagged with ``deployment_id``, its idles announced
    by webhook."""

    def __init__(
        self, *, deployment_id: str, announce: Callable[[str, str], None], **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.deployment_id = deployment_id
        self._announce = announce

    def to_wire(self) -> dict[str, Any]:
        wire = super().to_wire()
        wire["deployment_id"] = self.deployment_id
        return wire

    def emit(self, event: dict[str, Any]) -> dict[str, Any]:
        out = super().emit(event)
        if event.get("type") == "session.status_idle":
            reason = (event.get("stop_reason") or {}).get("type")
            if reason == "requires_action":
                self._announce("session.requires_action", self.id)
            self._announce("session.status_idled", self.id)
        return out


# -- the resource -----------------------------------------------------------------------
class Deployments:
    """Deployments and their runs in one emulator (``emu.deployments``)."""

    def __init__(self, emu: Any) -> None:  # the ClaudeEmulator (server.py imports us)
        self.emu = emu
        self.records: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        self.clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
        """The emulator's notion of now for schedules (creation time, upcoming runs)."""
        self._checked: dict[str, dt.datetime] = {}
        self._fired: set[tuple[str, str]] = set()

    def add_routes(self, r: web.UrlDispatcher) -> None:
        """The CRUD routes of :data:`CRUD_ROUTES` (all but delete), the three actions on a
        deployment, and the runs. A handler of one deployment gets its record: an
        unknown id is answered 404 before it runs."""
        handlers: dict[str, Handler] = {
            "create": self._create,
            "list": self._list,
            "get": self._of(self._retrieve),
            "update": self._of(self._update),
            "archive": self._of(self._archive),
        }
        for operation, method, path in CRUD_ROUTES:
            if operation in handlers:  # no delete: a deployment is archived, never deleted
                r.add_route(method, f"/v1/deployments{path}", handlers[operation])
        for action, handler in (
            ("pause", self._pause),
            ("unpause", self._unpause),
            ("run", self._run),
        ):
            r.add_post(f"/v1/deployments/{{id}}/{action}", self._of(handler))
        r.add_get("/v1/deployment_runs", self._list_runs)
        r.add_get("/v1/deployment_runs/{id}", self._retrieve_run)

    def _of(self, handler: RecordHandler) -> Handler:
        """``handler`` served the record named by the path's ``{id}``, or a 404."""

        async def serve(request: web.Request) -> web.Response:
            record = self.records.get(request.match_info["id"])
            if record is None:
                return api_error(404, "deployment not found", "not_found_error")
            return await handler(record, request)

        return serve

    # -- for tests ---------------------------------------------------------------------
    def trigger(self, deployment_id: str) -> dict[str, Any]:
        """Run a deployment now (as ``POST /v1/deployments/{id}/run``); thread-safe."""
        result: dict[str, Any] = self.emu.call(self._fire, deployment_id, None)
        return result

    def tick(self, now: dt.datetime) -> list[dict[str, Any]]:
        """Fire every scheduled run due up to ``now`` (see the module docstring); returns
        the runs started. Thread-safe."""
        if now.tzinfo is None:
            raise ValueError("tick() needs an aware datetime")
        result: list[dict[str, Any]] = self.emu.call(self._tick, now)
        return result

    # -- state ---------------------------------------------------------------------------
    def _tick(self, now: dt.datetime) -> list[dict[str, Any]]:
        started = []
        for dep_id, record in self.records.items():
            schedule = record["schedule"]
            after = self._checked.get(dep_id)
            if schedule is None or after is None or now <= after:
                continue
            self._checked[dep_id] = now
            if record["archived_at"] or record["status"] == "paused":
                continue
            cron = parse_cron(schedule["expression"])
            for when in cron.fires(ZoneInfo(schedule["timezone"]), after, now):
                if (dep_id, _iso(when)) in self._fired:
                    continue
                self._fired.add((dep_id, _iso(when)))
                started.append(self._fire(dep_id, when))
                schedule["last_run_at"] = _iso(when)
            self._refresh(record, now)
        return started

    def _refresh(self, record: dict[str, Any], now: dt.datetime) -> None:
        schedule = record["schedule"]
        if schedule is None:
            return
        if record["archived_at"]:
            schedule["upcoming_runs_at"] = []
            return
        cron = parse_cron(schedule["expression"])
        upcoming = cron.upcoming(ZoneInfo(schedule["timezone"]), now)
        schedule["upcoming_runs_at"] = [_iso(w) for w in upcoming]

    def _fire(self, dep_id: str, scheduled_at: dt.datetime | None) -> dict[str, Any]:
        record = self.records[dep_id]
        state = self.emu.state
        agent = state.agents[record["agent"]["id"]]
        emu = self.emu
        session = DeploymentSession(
            deployment_id=dep_id,
            announce=emu.webhooks.notify,
            session_id=emu.mint("sesn_"),
            agent=agent_snapshot(agent),
            environment_id=record["environment_id"],
            metadata=dict(record["metadata"]),
            title=record["name"],
            script=emu.agent,
            faults=emu.faults,
            mint=emu.mint,
            confirm_tools=emu.confirm_tools,
        )
        state.sessions[session.id] = session
        trigger: dict[str, Any] = (
            {"type": "manual"}
            if scheduled_at is None
            else {"type": "schedule", "scheduled_at": _iso(scheduled_at)}
        )
        run_id = emu.mint("drun_")
        run: dict[str, Any] = {
            "id": run_id,
            "type": "deployment_run",
            "agent": dict(record["agent"]),
            "created_at": _iso(self.clock()),
            "deployment_id": dep_id,
            "error": None,
            "session_id": session.id,
            "trigger_context": trigger,
        }
        self.runs[run_id] = run
        session.accept([dict(e) for e in record["initial_events"]])
        return run

    # -- HTTP ----------------------------------------------------------------------------
    async def _json(self, request: web.Request) -> dict[str, Any] | web.Response:
        raw = await request.read()  # the server's middleware already read it: cached
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            return api_error(400, "invalid JSON body")
        return body if isinstance(body, dict) else api_error(400, "the body must be an object")

    def _check(self, body: dict[str, Any], *, create: bool) -> str | None:
        """The refusal message for a create or update body, or ``None``."""
        if create:
            for name in ("agent", "environment_id", "initial_events", "name"):
                if not body.get(name):
                    return f"{name}: field required"
        events = body.get("initial_events")
        if events is not None:
            ok_types = ("user.message", "user.define_outcome", "system.message")
            if not isinstance(events, list) or not 1 <= len(events) <= 50:
                return "initial_events: between 1 and 50 events"
            for ev in events:
                if not isinstance(ev, dict) or ev.get("type") not in ok_types:
                    return "initial_events: user.message, user.define_outcome or system.message"
        schedule = body.get("schedule")
        if schedule is not None:
            if not isinstance(schedule, dict) or not schedule.get("expression"):
                return "schedule: expression and timezone are required"
            try:
                parse_cron(str(schedule["expression"]))
                ZoneInfo(str(schedule.get("timezone") or ""))
            except (CronError, ZoneInfoNotFoundError, ValueError):
                return "schedule: invalid cron expression or time zone"
        return None

    async def _create(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        if isinstance(body, web.Response):
            return body
        problem = self._check(body, create=True)
        if problem is not None:
            return api_error(400, problem)
        ref = body["agent"]
        agent_id = ref.get("id") if isinstance(ref, dict) else ref
        if not isinstance(agent_id, str):
            return api_error(400, "agent: an agent id or {id, version}")
        agent = self.emu.state.agents.get(agent_id)
        if agent is None:
            return api_error(404, f"agent {agent_id!r} not found", "not_found_error")
        if agent["archived_at"]:
            return api_error(400, "agent is archived")
        if body["environment_id"] not in self.emu.state.environments:
            return api_error(404, "environment not found", "not_found_error")
        version = ref.get("version") if isinstance(ref, dict) else None
        now = self.clock()
        record: dict[str, Any] = {
            "id": self.emu.mint("depl_"),
            "type": "deployment",
            "agent": {"id": agent_id, "type": "agent", "version": version or agent["version"]},
            "archived_at": None,
            "created_at": _iso(now),
            "description": body.get("description"),
            "environment_id": body["environment_id"],
            "initial_events": [dict(e) for e in body["initial_events"]],
            "metadata": dict(body.get("metadata") or {}),
            "name": body["name"],
            "paused_reason": None,
            "resources": list(body.get("resources") or []),
            "schedule": self._schedule(body.get("schedule")),
            "status": "active",
            "updated_at": _iso(now),
            "vault_ids": list(body.get("vault_ids") or []),
        }
        self.records[record["id"]] = record
        self._checked[record["id"]] = now
        self._refresh(record, now)
        return web.json_response(record)

    @staticmethod
    def _schedule(given: Any) -> dict[str, Any] | None:
        if not given:
            return None
        return {
            "type": "cron",
            "expression": given["expression"],
            "timezone": given["timezone"],
            "last_run_at": None,
            "upcoming_runs_at": [],
        }

    async def _list(self, request: web.Request) -> web.Response:
        archived = request.query.get("include_archived") == "true"
        items = [r for r in self.records.values() if archived or not r["archived_at"]]
        page: web.Response = self.emu._page(request, items)
        return page

    async def _retrieve(self, record: dict[str, Any], request: web.Request) -> web.Response:
        return web.json_response(record)

    async def _update(self, record: dict[str, Any], request: web.Request) -> web.Response:
        body = await self._json(request)
        if isinstance(body, web.Response):
            return body
        problem = self._check(body, create=False)
        if problem is not None:
            return api_error(400, problem)
        for name in ("name", "description", "metadata", "initial_events", "vault_ids"):
            if name in body:
                record[name] = body[name]
        if "schedule" in body:
            record["schedule"] = self._schedule(body["schedule"])
            self._checked[record["id"]] = self.clock()
        record["updated_at"] = _iso(self.clock())
        self._refresh(record, self.clock())
        return web.json_response(record)

    async def _archive(self, record: dict[str, Any], request: web.Request) -> web.Response:
        record["archived_at"] = record["archived_at"] or _iso(self.clock())
        self._refresh(record, self.clock())
        return web.json_response(record)

    async def _pause(self, record: dict[str, Any], request: web.Request) -> web.Response:
        record["status"], record["paused_reason"] = "paused", {"type": "manual"}
        return web.json_response(record)

    async def _unpause(self, record: dict[str, Any], request: web.Request) -> web.Response:
        record["status"], record["paused_reason"] = "active", None
        return web.json_response(record)

    async def _run(self, record: dict[str, Any], request: web.Request) -> web.Response:
        if record["archived_at"]:
            return api_error(409, "deployment is archived")
        agent = self.emu.state.agents.get(record["agent"]["id"])
        if agent is None or agent["archived_at"]:
            return api_error(409, "the deployment's agent is archived")
        return web.json_response(self._fire(record["id"], None))

    async def _list_runs(self, request: web.Request) -> web.Response:
        items = list(self.runs.values())
        dep = request.query.get("deployment_id")
        if dep is not None:
            items = [r for r in items if r["deployment_id"] == dep]
        kind = request.query.get("trigger_type")
        if kind is not None:
            items = [r for r in items if r["trigger_context"]["type"] == kind]
        page: web.Response = self.emu._page(request, items)
        return page

    async def _retrieve_run(self, request: web.Request) -> web.Response:
        run = self.runs.get(request.match_info["id"])
        if run is None:
            return api_error(404, "deployment run not found", "not_found_error")
        return web.json_response(run)
