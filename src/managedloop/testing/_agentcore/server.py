"""The AgentCore emulator's HTTP server: lifecycle, SigV4 check, routing, the data plane.

One aiohttp server on ``127.0.0.1`` in its own thread and event loop. Every request must
carry a valid SigV4 signature for the emulator's random keys (:mod:`.sigv4`); the control
plane is answered by :class:`~.control.ControlPlane`, an invoke's turn is made by
:mod:`.turns` and streamed here with the configured faults, and a command runs in
:mod:`.shell` (or the caller's ``commands=`` function).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from managedloop.testing._agentcore import eventstream as es
from managedloop.testing._agentcore import turns
from managedloop.testing._agentcore.clock import ManualClock
from managedloop.testing._agentcore.control import ControlPlane, body_model_problem
from managedloop.testing._agentcore.faults import AgentCoreFaults
from managedloop.testing._agentcore.responses import STATUS_CODES, error
from managedloop.testing._agentcore.shell import run_shell
from managedloop.testing._agentcore.sigv4 import SignatureError, verify
from managedloop.testing._agentcore.state import (
    ACCOUNT,
    Account,
    Endpoint,
    Harness,
    Session,
)
from managedloop.testing._loopback import MAX_BODY, LoopbackServer
from managedloop.testing.script import ScriptedAgent, Step

__all__ = ["ROUTES", "AgentCoreEmulator", "CommandFn", "RecordedRequest"]

SERVICE = "bedrock-agentcore"  # both planes sign with this name
_SESSION_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9-_]*")  # fullmatch, as the service does
# Every operation the emulator serves: (plane's botocore service, operation, method, path).
# ``tests/agentcore/test_shapes.py`` sends each one through botocore and checks every
# response against the operation's output shape strictly; a route added to the dispatch
# without a line here fails that test (it compares this table with what was recorded).
ROUTES: tuple[tuple[str, str, str, str], ...] = (
    ("bedrock-agentcore-control", "CreateHarness", "POST", "/harnesses"),
    ("bedrock-agentcore-control", "ListHarnesses", "GET", "/harnesses"),
    ("bedrock-agentcore-control", "GetHarness", "GET", "/harnesses/{harnessId}"),
    ("bedrock-agentcore-control", "DeleteHarness", "DELETE", "/harnesses/{harnessId}"),
    (
        "bedrock-agentcore-control",
        "ListHarnessEndpoints",
        "GET",
        "/harnesses/{harnessId}/endpoints",
    ),
    (
        "bedrock-agentcore-control",
        "CreateHarnessEndpoint",
        "POST",
        "/harnesses/{harnessId}/endpoints",
    ),
    (
        "bedrock-agentcore-control",
        "GetHarnessEndpoint",
        "GET",
        "/harnesses/{harnessId}/endpoints/{endpointName}",
    ),
    (
        "bedrock-agentcore-control",
        "DeleteHarnessEndpoint",
        "DELETE",
        "/harnesses/{harnessId}/endpoints/{endpointName}",
    ),
    ("bedrock-agentcore-control", "UpdateHarness", "PATCH", "/harnesses/{harnessId}"),
    (
        "bedrock-agentcore-control",
        "ListHarnessVersions",
        "GET",
        "/harnesses/{harnessId}/versions",
    ),
    (
        "bedrock-agentcore-control",
        "UpdateHarnessEndpoint",
        "PATCH",
        "/harnesses/{harnessId}/endpoints/{endpointName}",
    ),
    ("bedrock-agentcore-control", "TagResource", "POST", "/tags/{resourceArn}"),
    ("bedrock-agentcore-control", "ListTagsForResource", "GET", "/tags/{resourceArn}"),
    ("bedrock-agentcore", "InvokeHarness", "POST", "/harnesses/invoke"),
    (
        "bedrock-agentcore",
        "StopRuntimeSession",
        "POST",
        "/runtimes/{agentRuntimeArn}/stopruntimesession",
    ),
    ("bedrock-agentcore", "InvokeAgentRuntimeCommand", "POST", "/runtimes/{arn}/commands"),
)
_RECORD_INDEX = web.RequestKey("managedloop_record_index", int)
_STALL_TICK = 0.01  # seconds; how often a stall looks whether its client went away


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordedRequest:
    """One request the emulator received (a session token header is kept, its value redacted)."""

    operation: str
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    status: int = 200

    @property
    def trace_context(self) -> dict[str, str]:
        """The trace headers it carried (``traceparent``, ``tracestate``, ``baggage``,
        ``x-amzn-trace-id``), lower-cased; ``{}`` when none."""
        names = ("traceparent", "tracestate", "baggage", "x-amzn-trace-id")
        return {k.lower(): v for k, v in self.headers.items() if k.lower() in names}

    @property
    def session_id(self) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == "x-amzn-bedrock-agentcore-runtime-session-id":
                return value
        return None


CommandFn = Callable[[str, str], tuple[str, str, int]]
"""``commands(session_id, command) -> (stdout, stderr, exit_code)``."""


class AgentCoreEmulator(LoopbackServer):
    """The loopback AgentCore emulator (see :mod:`managedloop.testing.agentcore`).

    A start that fails raises :class:`~managedloop.testing.EmulatorStartError`.

    Attributes worth knowing: ``endpoint_url``, ``client_kwargs`` (splat into
    ``BedrockAgentCore`` or ``botocore``'s ``create_client``), ``harness_arn`` (a READY
    harness with a READY ``DEFAULT`` endpoint), ``execution_role_arn`` (accepted by
    CreateHarness), ``agent`` (the :class:`ScriptedAgent`), ``requests`` and ``faults``.
    """

    label = "AgentCore emulator"

    def __init__(
        self,
        script: Sequence[Step] | None = None,
        *,
        agent: ScriptedAgent | None = None,
        faults: AgentCoreFaults | None = None,
        region: str = "us-east-1",
        commands: CommandFn | str | None = "shell",
        verify_signatures: bool = True,
        port: int = 0,
        clock: ManualClock | None = None,
        hooks: Mapping[str, turns.HookFn] | None = None,
        cache_tokens: tuple[int, int] | None = None,
        tool_input_chunk: int | None = None,
    ) -> None:
        super().__init__(port=port)
        if tool_input_chunk is not None and tool_input_chunk < 1:
            raise ValueError("tool_input_chunk must be at least 1")
        self.tool_input_chunk = tool_input_chunk
        """Characters per streamed tool-input fragment (``None``: each input in halves)."""
        self.hooks: dict[str, turns.HookFn] = dict(hooks or {})
        """Hook name -> the function standing in for its target (see :mod:`.turns`)."""
        self.cache_tokens = cache_tokens
        """``(cacheReadInputTokens, cacheWriteInputTokens)`` reported with every usage."""
        self.agent = agent if agent is not None else ScriptedAgent(script)
        self.clock: Callable[[], float] = clock if clock is not None else time.monotonic
        """Status timings (and, with a :class:`ManualClock`, ``control_latency``) use it."""
        self._manual = clock
        self._release = threading.Event()
        self.commands = commands
        self.verify_signatures = verify_signatures
        self.access_key_id = "AKEMU" + secrets.token_hex(8).upper()
        self._secret = secrets.token_urlsafe(30)
        self.execution_role_arn = f"arn:aws:iam::{ACCOUNT}:role/managedloop-emulator"
        self.requests: list[RecordedRequest] = []
        self.disconnects = 0
        """Invoke/command streams whose client went away before the end."""
        self.stopped_sessions: list[str] = []
        """Runtime sessions ended by StopRuntimeSession, in order."""
        self._faults = faults or AgentCoreFaults()
        self._invokes = 0
        self._lock = threading.Lock()
        self._account = Account(region=region, lock=self._lock)  # holds self.region
        self._control = ControlPlane(self._account, lambda: self._faults)
        self._steps = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._scratch: str | None = None
        default = self.add_harness("emulated_harness")
        self.harness_arn = default.arn
        self.harness_id = default.id

    # ---------------------------------------------------------------- lifecycle

    @property
    def faults(self) -> AgentCoreFaults:
        return self._faults

    @faults.setter
    def faults(self, value: AgentCoreFaults) -> None:
        """Setting faults restarts their invoke count (``skip``/``times``)."""
        with self._lock:
            self._faults = value
            self._invokes = 0

    @property
    def region(self) -> str:
        return self._account.region

    @region.setter
    def region(self, value: str) -> None:
        self._account.region = value

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def client_kwargs(self) -> dict[str, Any]:
        """``endpoint_url``, ``region_name`` and the emulator's keys."""
        return {
            "endpoint_url": self.endpoint_url,
            "region_name": self.region,
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self._secret,
        }

    def __repr__(self) -> str:
        return f"AgentCoreEmulator(endpoint_url={self.endpoint_url!r})"

    # Start, stop, ``with`` and ``async with`` come from testing/_loopback.py.

    def _before_start(self) -> None:
        self._scratch = tempfile.mkdtemp(prefix="managedloop-agentcore-")

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    async def _before_cleanup(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def _after_stop(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    # ---------------------------------------------------------------- timing helpers

    async def _latency(self, seconds: float) -> None:
        """A request's latency: on the manual clock if there is one (instant, exact)."""
        if self._manual is not None:
            await self._manual.sleep(seconds)
        else:
            await asyncio.sleep(seconds)

    async def _stall(self, request: web.Request, seconds: float) -> bool:
        """Wait ``seconds`` of real time (or, for ``inf``, until :meth:`release_stalls`);
        ``False`` as soon as the client has gone away."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds if math.isfinite(seconds) else math.inf
        while loop.time() < deadline and not self._release.is_set():
            transport = request.transport
            if transport is None or transport.is_closing():
                return False
            await asyncio.sleep(min(_STALL_TICK, max(0.0, deadline - loop.time())))
        return True

    def release_stalls(self) -> None:
        """End every current and future stall (``stall_seconds``/``command_stall``) now."""
        self._release.set()

    # ---------------------------------------------------------------- state helpers

    def set_script(self, script: Sequence[Step] | None) -> None:
        """Replace the script and restart its step count (between sessions)."""
        with self._lock:
            self.agent = ScriptedAgent(script)
            self._steps = 0

    def add_harness(
        self,
        name: str,
        *,
        status: str | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
        hooks: Sequence[Mapping[str, Any]] = (),
        endpoint_status: str | None = "READY",
        delete_after: float | None = None,
        delete_outcome: str | None = None,
        deleting: bool = False,
    ) -> Any:
        """Seed a harness. ``status=None`` follows the fault timings; ``deleting=True`` puts it
        in DELETING, gone after ``delete_after`` seconds (``None``: never)."""
        now = self.clock()
        hid = self._account.new_harness_id(name)
        arn = self._account.harness_arn(hid)
        harness = Harness(
            id=hid,
            name=name,
            arn=arn,
            body={"harnessName": name, "tools": list(tools), "hooks": list(hooks)},
            created=now,
            ready_after=0.0,
            outcome="READY",
            delete_after=delete_after,
            delete_outcome=delete_outcome,
            fixed=status if status is not None or deleting else "READY",
            deleting_since=now if deleting else None,
        )
        if endpoint_status is not None:
            harness.endpoints["DEFAULT"] = Endpoint(
                name="DEFAULT",
                created=now,
                absent_for=0,
                ready_after=0,
                outcome="READY",
                fixed=endpoint_status,
            )
        with self._lock:
            self._account.harnesses[hid] = harness
        return harness

    def harness_status(self, harness_id: str) -> str | None:
        """The current status of a harness (``None`` when it does not exist)."""
        with self._lock:
            h = self._account.harnesses.get(harness_id)
            return h.status(self.clock()) if h else None

    def harness_names(self) -> list[str]:
        now = self.clock()
        with self._lock:
            return [h.name for h in self._account.harnesses.values() if h.status(now) is not None]

    def operations(self, name: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if name is None or r.operation == name]

    # ---------------------------------------------------------------- dispatch

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            response = await self._handle(request)
            index = request.get(_RECORD_INDEX)
            if isinstance(index, int):
                with self._lock:
                    entry = self.requests[index]
                    self.requests[index] = dataclasses.replace(entry, status=response.status)
            return response
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        headers = dict(request.headers)
        if self.verify_signatures:
            try:
                verify(
                    method=request.method,
                    url=f"http://{request.host}{request.raw_path}",
                    headers=headers,
                    body=raw,
                    keys={self.access_key_id: self._secret},
                    service=SERVICE,
                    region=self.region,
                )
            except SignatureError as exc:
                self._record("Unauthenticated", request, headers, raw, 403)
                return error(403, exc.code, str(exc))
        path = request.path
        parts = [unquote(p) for p in request.raw_path.split("?", 1)[0].split("/") if p]
        method = request.method
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return error(400, "ValidationException", "body is not JSON")
        if method == "POST" and path == "/harnesses/invoke":
            return await self._invoke(request, headers, body)
        if (
            method == "POST"
            and len(parts) == 3
            and parts[0] == "runtimes"
            and parts[2] == "commands"
        ):
            self._record("InvokeAgentRuntimeCommand", request, headers, body)
            return await self._command(request, headers, parts[1], body)
        if (
            method == "POST"
            and len(parts) == 3
            and parts[0] == "runtimes"
            and parts[2] == "stopruntimesession"
        ):
            self._record("StopRuntimeSession", request, headers, body)
            return self._stop_session(headers, parts[1])
        if parts and parts[0] == "tags" and len(parts) == 2:
            return self._control.tags(
                method, parts[1], body, lambda op: self._record(op, request, headers, body)
            )
        if parts and parts[0] == "harnesses":
            if self._faults.control_latency:
                await self._latency(self._faults.control_latency)
            response = self._control.handle(
                request,
                method,
                parts,
                body,
                now=self.clock(),
                record=lambda op: self._record(op, request, headers, body),
            )
            if method == "POST" and len(parts) == 1 and self._faults.create_latency:
                await self._latency(self._faults.create_latency)
            return response
        return error(404, "UnknownOperationException", f"no route for {method} {path}")

    def _record(
        self, op: str, request: web.Request, headers: dict[str, str], body: Any, status: int = 200
    ) -> None:
        if isinstance(body, bytes):
            body = body.decode(errors="replace")
        # A session token is a credential: keep the header's presence, never its value.
        headers = {
            k: "<redacted>" if k.lower() == "x-amz-security-token" else v
            for k, v in headers.items()
        }
        with self._lock:
            request[_RECORD_INDEX] = len(self.requests)
            self.requests.append(
                RecordedRequest(
                    operation=op,
                    method=request.method,
                    path=request.path,
                    query=dict(request.query),
                    headers=headers,
                    body=body,
                    status=status,
                )
            )

    # ---------------------------------------------------------------- control plane

    def _take_faults(self) -> AgentCoreFaults | None:
        with self._lock:
            f = self._faults
            n = self._invokes
            self._invokes += 1
        if n < f.skip or (f.times is not None and n >= f.skip + f.times):
            return None
        return f

    async def _invoke(
        self, request: web.Request, headers: dict[str, str], body: dict[str, Any]
    ) -> web.StreamResponse:
        self._record("InvokeHarness", request, headers, body)
        lower = {k.lower(): v for k, v in headers.items()}
        sid = lower.get("x-amzn-bedrock-agentcore-runtime-session-id", "")
        if not (33 <= len(sid) <= 100) or not _SESSION_RE.fullmatch(sid):
            return error(
                400,
                "ValidationException",
                "Value at 'runtimeSessionId' failed to satisfy constraint: Member must have "
                "length between 33 and 100 and match pattern [a-zA-Z0-9][a-zA-Z0-9-_]*",
            )
        now = self.clock()
        arn = request.query.get("harnessArn", "")
        qualifier = request.query.get("qualifier", "DEFAULT")
        with self._lock:
            harness = next((h for h in self._account.harnesses.values() if h.arn == arn), None)
        status = harness.status(now) if harness is not None else None
        if harness is None or status is None:
            return error(404, "ResourceNotFoundException", f"harness {arn} not found")
        if status != "READY":
            return error(409, "ConflictException", f"harness is {status}")
        ep = harness.endpoints.get(qualifier)
        status = ep.status(now) if ep is not None else None
        if status is None:
            return error(404, "ResourceNotFoundException", f"endpoint {qualifier} not found")
        if status != "READY":
            return error(409, "ConflictException", f"endpoint {qualifier} is {status}")
        problem = body_model_problem(body)
        if problem is not None:
            return error(400, "ValidationException", problem)
        faults = self._take_faults()
        if faults is not None and faults.status is not None:
            return error(
                faults.status,
                STATUS_CODES.get(faults.status, "InternalServerException"),
                "emulated HTTP failure",
            )

        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        with self._lock:
            session = self._account.sessions.setdefault(sid, Session())
            replay = session.replay_frames if session.replay_key == key else None
        if replay is None:
            try:
                frames = self._next_turn(session, harness, body, faults)
            except turns.RefusedError as exc:
                return error(400, "ValidationException", str(exc))
            with self._lock:
                session.replay_key, session.replay_frames = key, frames
        else:
            frames = replay
        resp, complete = await self._stream(request, frames, faults)
        if complete:
            with self._lock:
                if session.replay_key == key:
                    session.replay_key = session.replay_frames = None
        return resp

    def _next_turn(
        self,
        session: Session,
        harness: Harness,
        body: dict[str, Any],
        faults: AgentCoreFaults | None,
    ) -> list[bytes]:
        request = turns.model_request(session, harness, body, self._next_step)
        step = self.agent.next_step(request)
        rendering = turns.Rendering(
            hooks=list(harness.body.get("hooks") or []),
            decide=self.hooks,
            cache_tokens=self.cache_tokens,
            tool_input_chunk=self.tool_input_chunk,
        )
        return turns.render(session, step, faults, self.agent.mint_id, rendering)

    def _next_step(self) -> int:
        with self._lock:
            turn = self._steps
            self._steps += 1
        return turn

    async def _stream(
        self, request: web.Request, frames: list[bytes], faults: AgentCoreFaults | None
    ) -> tuple[web.StreamResponse, bool]:
        """Write the frames (with faults); ``True`` when the client got the whole turn."""
        resp = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "application/vnd.amazon.eventstream",
                "x-amzn-RequestId": secrets.token_hex(16),
            },
        )
        resp.enable_chunked_encoding()
        f = faults
        duplicated = False
        try:
            await resp.prepare(request)
            for i, data in enumerate(frames):
                if f is not None:
                    if f.chunk_delay:
                        await asyncio.sleep(f.chunk_delay)
                    stall = f.stall_seconds if f.stall_at == i else 0.0
                    if stall and not await self._stall(request, stall):
                        with self._lock:
                            self.disconnects += 1
                        return resp, False
                    if f.truncate_after == i:
                        if f.cut_mid_frame:
                            await resp.write(data[: len(data) // 2])
                        await resp.write_eof()
                        return resp, False
                    if f.drop_after == i:
                        transport = request.transport
                        if transport is not None:
                            transport.abort()
                        return resp, False
                    if f.exception_at == i:
                        await resp.write(es.exception_frame(f.exception_type, f.exception_message))
                        await resp.write_eof()
                        return resp, True
                    if f.corrupt_frame == i:
                        await resp.write(es.corrupt(data))
                        await resp.write_eof()
                        return resp, False
                    if f.duplicate_every_frame or f.duplicate_frame == i:
                        await resp.write(data)
                        duplicated = True
                await resp.write(data)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            with self._lock:
                self.disconnects += 1
            return resp, False
        return resp, not duplicated

    def _stop_session(self, headers: dict[str, str], arn: str) -> web.Response:
        """StopRuntimeSession: the session's microVM (here: its conversation) ends."""
        lower = {k.lower(): v for k, v in headers.items()}
        sid = lower.get("x-amzn-bedrock-agentcore-runtime-session-id", "")
        with self._lock:
            known = any(h.arn == arn for h in self._account.harnesses.values())
            if not known:
                return error(404, "ResourceNotFoundException", f"runtime {arn} not found")
            if self._account.sessions.pop(sid, None) is None:
                return error(404, "ResourceNotFoundException", f"session {sid} not found")
            self.stopped_sessions.append(sid)
        return web.json_response({}, headers={"X-Amzn-Bedrock-AgentCore-Runtime-Session-Id": sid})

    # ---------------------------------------------------------------- data plane: commands

    async def _command(
        self, request: web.Request, headers: dict[str, str], arn: str, body: dict[str, Any]
    ) -> web.StreamResponse:
        lower = {k.lower(): v for k, v in headers.items()}
        sid = lower.get("x-amzn-bedrock-agentcore-runtime-session-id", "")
        command = body.get("command")
        if not isinstance(command, str) or not 1 <= len(command) <= 65536:
            return error(400, "ValidationException", "command must be 1..65536 characters")
        timeout = body.get("timeout", 300)
        with self._lock:
            known = any(h.arn == arn for h in self._account.harnesses.values())
        if not known:
            return error(404, "ResourceNotFoundException", f"runtime {arn} not found")
        if self.commands is None:
            return error(403, "AccessDeniedException", "commands are disabled on this emulator")
        resp = web.StreamResponse(
            status=200, headers={"Content-Type": "application/vnd.amazon.eventstream"}
        )
        resp.enable_chunked_encoding()
        f = self._faults
        try:
            await resp.prepare(request)
            await resp.write(es.event_frame("chunk", {"contentStart": {}}))
            if f.command_stall and not await self._stall(request, f.command_stall):
                with self._lock:
                    self.disconnects += 1
                return resp
            if f.command_exception:
                await resp.write(es.exception_frame(f.command_exception, "emulated failure"))
                await resp.write_eof()
                return resp
            if callable(self.commands):
                out, err, code = self.commands(sid, command)
                for key, text in (("stdout", out), ("stderr", err)):
                    if text:
                        await resp.write(es.event_frame("chunk", {"contentDelta": {key: text}}))
                status = "COMPLETED"
            else:
                assert self._scratch is not None
                code, status = await run_shell(resp, self._scratch, sid, command, float(timeout))
            await resp.write(
                es.event_frame("chunk", {"contentStop": {"exitCode": code, "status": status}})
            )
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            with self._lock:
                self.disconnects += 1
        return resp
