"""A loopback emulator of Bedrock AgentCore: the harness control plane and the data plane.

:class:`AgentCoreEmulator` is a real HTTP server on ``127.0.0.1`` (a free port, its own
thread and event loop) that speaks the AgentCore REST API as botocore sends it, so the
production client (botocore, SigV4, its event-stream decoder) is what gets exercised::

    with AgentCoreEmulator() as emu:
        provider = BedrockAgentCore(harness_arn=emu.harness_arn, **emu.client_kwargs)
        result = ml.run_sync(provider, agent=agent, prompt="Weather in Paris?")

Both planes share one ``endpoint_url`` and are routed by path, exactly as botocore builds
them (``bedrock-agentcore-control``: ``/harnesses...``; ``bedrock-agentcore``:
``POST /harnesses/invoke`` and ``POST /runtimes/{arn}/commands``). Every request must carry
a valid SigV4 signature for the emulator's own random keys (``emu.client_kwargs``),
checked with botocore's signer; a bad one gets a 403.

Wire invariants reproduced (``agentcore-wire.md``):

* ``InvokeHarness`` answers ``200`` + ``application/vnd.amazon.eventstream``, one frame per
  HTTP chunk: ``messageStart``, text deltas (no ``contentBlockStart`` for text), each tool
  as ``contentBlockStart.toolUse`` + two string input fragments + ``contentBlockStop``,
  ``messageStop{stopReason}``, then ``metadata{usage, metrics}``;
* a resume must hold the assistant ``toolUse`` message and the user ``toolResult`` message
  with exactly the pending ids (no duplicates), else ``400 ValidationException`` with the
  service's texts; a new user text while tools are pending drops them;
* the runtime session id header is checked (33-100 chars, ``[a-zA-Z0-9][a-zA-Z0-9-_]*``);
* a per-invoke ``tools`` list replaces the harness's tools; ``qualifier`` picks an endpoint
  that must exist and be READY;
* harness and endpoint statuses progress over (configurable, fast) time:
  ``CREATING`` → ``READY`` (or the configured outcome), ``DELETING`` → gone; a same-name
  create is a ``409 ConflictException``; ``ListHarnesses`` pages with ``nextToken``.

A retried invoke whose previous attempt on the same session was cut short (truncated,
dropped, corrupted, stalled past the client) with the *same* body is served the same turn
again (same tool ids) rather than the next script step: the emulator models a harness that
re-runs the interrupted turn, so a script stays aligned under retries.

Shell commands (``InvokeAgentRuntimeCommand``) run, by default, as real ``/bin/sh``
commands **on this machine, as this user**, in a scratch directory per runtime session,
with every ``/mnt/<name>`` path rewritten into that directory (the session-storage mount).
The server only listens on loopback and only accepts requests signed with its per-instance
random keys. Pass ``commands=`` a function to script them instead, or ``None`` to refuse.

The frames are produced by :mod:`managedloop.testing._agentcore.eventstream` (botocore has
no encoder); every kind of frame is tested to decode with botocore.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import json
import math
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from managedloop.results import ToolResult
from managedloop.testing._agentcore import eventstream as es
from managedloop.testing._agentcore.sigv4 import SignatureError, verify
from managedloop.testing.script import Fail, Grade, ModelRequest, Reply, ScriptedAgent, Step
from managedloop.tools import ToolDefinition

__all__ = ["ROUTES", "AgentCoreEmulator", "AgentCoreFaults", "ManualClock", "RecordedRequest"]

ACCOUNT = "123456789012"
SERVICE = "bedrock-agentcore"  # both planes sign with this name
# Applied with fullmatch, as the service does (``$`` would accept a trailing newline).
_SESSION_RE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9-_]*")
_HARNESS_NAME_RE = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,39}")
_ENDPOINT_NAME_RE = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,47}")
_ROLE_RE = re.compile(r"arn:aws(-[^:]+)?:iam::\d{12}:role/[\w+=,.@/-]+")
_MOUNT_RE = re.compile(r"/mnt/([A-Za-z0-9._-]+)")
_EXCEPTION_STATUS = {
    "validationException": 400,
    "internalServerException": 500,
    "runtimeClientError": 424,
}
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
    ("bedrock-agentcore", "InvokeHarness", "POST", "/harnesses/invoke"),
    ("bedrock-agentcore", "InvokeAgentRuntimeCommand", "POST", "/runtimes/{arn}/commands"),
)
_RECORD_INDEX = web.RequestKey("managedloop_record_index", int)
SHUTDOWN_GRACE = 0.5  # seconds; stalled handlers are cancelled on exit, not waited for
_STALL_TICK = 0.01  # seconds; how often a stall looks whether its client went away


class ManualClock:
    """A monotonic clock that moves only when told to, or when something sleeps on it.

    Share one between the emulator (``AgentCoreEmulator(clock=...)``: harness and endpoint
    status timings and ``control_latency`` run on it) and the code under test (e.g.
    ``provider.provision(..., clock=clock, sleep=clock.sleep)``), and every deadline,
    poll and latency is exact: no test depends on how fast the machine is. ``sleep``
    advances the clock at once and yields to the event loop (asyncio or anyio).
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()  # the emulator reads it from its own thread

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += max(0.0, seconds)

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"ManualClock(now={self():.3f})"


@dataclass(kw_only=True)
class AgentCoreFaults:
    """Faults and timings. Data-plane faults hit ``times`` invokes after ``skip`` clean ones.

    Frame indices count the frames of one invoke response from 0 (``messageStart``).
    """

    truncate_after: int | None = None
    """Send only the first N frames, then end the HTTP stream cleanly (no ``messageStop``)."""
    cut_mid_frame: bool = False
    """With ``truncate_after``: also send the first half of frame N before ending."""
    drop_after: int | None = None
    """Send N frames, then abort the TCP connection."""
    corrupt_frame: int | None = None
    """Send frame N with a wrong message CRC."""
    exception_at: int | None = None
    """Replace frame N (and the rest) by an exception frame."""
    exception_type: str = "internalServerException"
    exception_message: str = "emulated failure"
    stall_at: int | None = None
    """Sleep ``stall_seconds`` before frame N (``math.inf``: until :meth:`AgentCoreEmulator.
    release_stalls` or until the client goes away, which counts as a disconnect)."""
    stall_seconds: float = 0.0
    chunk_delay: float = 0.0
    """Sleep this long before every frame (a slow but live stream)."""
    status: int | None = None
    """Answer the invoke with this HTTP error before any frame (429: ThrottlingException)."""
    reuse_block_index: bool = False
    """Put every tool block of a turn at ``contentBlockIndex`` 0 (observed live)."""
    duplicate_frame: int | None = None
    """Send frame N twice in a row (a replaying proxy). The client got a corrupted turn,
    so a retry with the same body is served the same turn again."""
    duplicate_every_frame: bool = False
    """Send every frame twice in a row."""
    raw_tool_input: str | None = None
    """Stream this text as every tool block's input instead of the call's JSON (e.g.
    ``"null"`` or ``'{"city": '``): what a model emitting invalid arguments sends."""
    skip: int = 0
    times: int | None = 1
    """How many invokes (after ``skip``) the data-plane faults hit; ``None``: all."""
    # --- control plane -------------------------------------------------------------------
    harness_ready_after: float = 0.05
    harness_outcome: str = "READY"
    """Status a new harness reaches after ``harness_ready_after`` (e.g. ``CREATE_FAILED``)."""
    endpoint_absent_for: float = 0.0
    """Seconds after the harness is created during which its DEFAULT endpoint is a 404."""
    endpoint_ready_after: float = 0.05
    endpoint_outcome: str = "READY"
    delete_after: float = 0.05
    delete_outcome: str | None = None
    """``None``: a deleted harness disappears; else it sticks at this status."""
    control_latency: float = 0.0
    """Seconds each control-plane request waits before answering."""
    create_status: int | None = None
    """Answer CreateHarness with this HTTP error (e.g. 500, 402)."""
    create_commits: bool = False
    """With ``create_status``: create the harness anyway, then answer the error (a 5xx
    whose create went through)."""
    create_latency: float = 0.0
    """Seconds CreateHarness waits *after* creating the harness before answering (a client
    that times out first leaves a harness it never heard of)."""
    # --- commands ---------------------------------------------------------------------------
    command_exception: str | None = None
    """Answer every command with this exception frame after ``contentStart``."""
    command_stall: float = 0.0
    """Seconds to wait after ``contentStart`` before running a command (``math.inf``: until
    released or the client goes away)."""


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
    def session_id(self) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == "x-amzn-bedrock-agentcore-runtime-session-id":
                return value
        return None


@dataclass(slots=True)
class _Endpoint:
    name: str
    created: float
    absent_for: float
    ready_after: float
    outcome: str
    fixed: str | None = None
    created_at: float = field(default_factory=time.time)  # epoch seconds, for the wire

    def status(self, now: float) -> str | None:
        if self.fixed is not None:
            return self.fixed
        age = now - self.created
        if age < self.absent_for:
            return None
        return self.outcome if age >= self.absent_for + self.ready_after else "CREATING"


@dataclass(slots=True)
class _Harness:
    id: str
    name: str
    arn: str
    body: dict[str, Any]
    created: float
    ready_after: float
    outcome: str
    delete_after: float | None
    delete_outcome: str | None
    endpoints: dict[str, _Endpoint] = field(default_factory=dict)
    deleting_since: float | None = None
    fixed: str | None = None
    created_at: float = field(default_factory=time.time)  # epoch seconds, for the wire

    def status(self, now: float) -> str | None:
        """``None`` once it is gone."""
        if self.deleting_since is not None:
            if self.delete_after is not None and now - self.deleting_since >= self.delete_after:
                return self.delete_outcome
            return "DELETING"
        if self.fixed is not None:
            return self.fixed
        return self.outcome if now - self.created >= self.ready_after else "CREATING"

    def view(self, now: float) -> dict[str, Any]:
        b = self.body
        env = _environment_view(self, b.get("environment"))
        return {
            "harnessId": self.id,
            "harnessName": self.name,
            "arn": self.arn,
            "status": self.status(now),
            "executionRoleArn": b.get("executionRoleArn", ""),
            "createdAt": self.created_at,
            "updatedAt": self.created_at,
            "model": b.get("model")
            or {"bedrockModelConfig": {"modelId": "us.anthropic.claude-sonnet-4-6"}},
            "systemPrompt": b.get("systemPrompt") or [{"text": "You are a helpful agent."}],
            "tools": b.get("tools") or [],
            "skills": b.get("skills") or [],
            "allowedTools": b.get("allowedTools") or ["*"],
            "truncation": b.get("truncation") or {"strategy": "sliding_window"},
            "environment": env,
            "harnessVersion": "1",
        }


@dataclass(slots=True)
class _Session:
    pending: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    replay_key: str | None = None
    replay_frames: list[bytes] | None = None


CommandFn = Callable[[str, str], tuple[str, str, int]]
"""``commands(session_id, command) -> (stdout, stderr, exit_code)``."""


class AgentCoreEmulator:
    """The loopback AgentCore emulator (see the module docstring).

    Attributes worth knowing: ``endpoint_url``, ``client_kwargs`` (splat into
    ``BedrockAgentCore`` or ``botocore``'s ``create_client``), ``harness_arn`` (a READY
    harness with a READY ``DEFAULT`` endpoint), ``execution_role_arn`` (accepted by
    CreateHarness), ``agent`` (the :class:`ScriptedAgent`), ``requests`` and ``faults``.
    """

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
    ) -> None:
        self.agent = agent if agent is not None else ScriptedAgent(script)
        self.clock: Callable[[], float] = clock if clock is not None else time.monotonic
        """Status timings (and, with a :class:`ManualClock`, ``control_latency``) use it."""
        self._manual = clock
        self._release = threading.Event()
        self.region = region
        self.commands = commands
        self.verify_signatures = verify_signatures
        self.access_key_id = "AKEMU" + secrets.token_hex(8).upper()
        self._secret = secrets.token_urlsafe(30)
        self.execution_role_arn = f"arn:aws:iam::{ACCOUNT}:role/managedloop-emulator"
        self.requests: list[RecordedRequest] = []
        self.disconnects = 0
        """Invoke/command streams whose client went away before the end."""
        self._faults = faults or AgentCoreFaults()
        self._invokes = 0
        self._lock = threading.Lock()
        self._harnesses: dict[str, _Harness] = {}
        self._sessions: dict[str, _Session] = {}
        self._steps = 0
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._scratch: str | None = None
        self._requested_port = port
        self.port = 0
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
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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

    def start(self) -> AgentCoreEmulator:
        if self._thread is not None:
            return self
        self._scratch = tempfile.mkdtemp(prefix="managedloop-agentcore-")
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(ready))
            except BaseException as exc:  # surfaced to start() below
                failure.append(exc)
                ready.set()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=serve, name="agentcore-emulator", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    async def _serve(self, ready: threading.Event) -> None:
        # aiohttp's 1 MiB default would refuse a long resumed history or large tool results.
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        runner = web.AppRunner(app, shutdown_timeout=SHUTDOWN_GRACE, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self._requested_port)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]
        self._runner = runner
        self._stop = asyncio.Event()
        ready.set()
        await self._stop.wait()
        for task in list(self._tasks):
            task.cancel()
        await runner.cleanup()

    def stop(self) -> None:
        if self._thread is None:
            return
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)
        self._thread.join()
        self._thread = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def __enter__(self) -> AgentCoreEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> AgentCoreEmulator:
        import anyio

        return await anyio.to_thread.run_sync(self.start)

    async def __aexit__(self, *exc: object) -> None:
        import anyio

        await anyio.to_thread.run_sync(self.stop)

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
        endpoint_status: str | None = "READY",
        delete_after: float | None = None,
        delete_outcome: str | None = None,
        deleting: bool = False,
    ) -> Any:
        """Seed a harness. ``status=None`` follows the fault timings; ``deleting=True`` puts it
        in DELETING, gone after ``delete_after`` seconds (``None``: never)."""
        now = self.clock()
        hid = f"{name}-{secrets.token_hex(5)}"
        arn = f"arn:aws:bedrock-agentcore:{self.region}:{ACCOUNT}:harness/{hid}"
        harness = _Harness(
            id=hid,
            name=name,
            arn=arn,
            body={"harnessName": name, "tools": list(tools)},
            created=now,
            ready_after=0.0,
            outcome="READY",
            delete_after=delete_after,
            delete_outcome=delete_outcome,
            fixed=status if status is not None or deleting else "READY",
            deleting_since=now if deleting else None,
        )
        if endpoint_status is not None:
            harness.endpoints["DEFAULT"] = _Endpoint(
                name="DEFAULT",
                created=now,
                absent_for=0,
                ready_after=0,
                outcome="READY",
                fixed=endpoint_status,
            )
        with self._lock:
            self._harnesses[hid] = harness
        return harness

    def harness_status(self, harness_id: str) -> str | None:
        """The current status of a harness (``None`` when it does not exist)."""
        with self._lock:
            h = self._harnesses.get(harness_id)
            return h.status(self.clock()) if h else None

    def harness_names(self) -> list[str]:
        now = self.clock()
        with self._lock:
            return [h.name for h in self._harnesses.values() if h.status(now) is not None]

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
                return _error(403, exc.code, str(exc))
        path = request.path
        parts = [unquote(p) for p in request.raw_path.split("?", 1)[0].split("/") if p]
        method = request.method
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return _error(400, "ValidationException", "body is not JSON")
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
        if parts and parts[0] == "harnesses":
            if self._faults.control_latency:
                await self._latency(self._faults.control_latency)
            response = self._control(request, headers, method, parts, body)
            if method == "POST" and len(parts) == 1 and self._faults.create_latency:
                await self._latency(self._faults.create_latency)
            return response
        return _error(404, "UnknownOperationException", f"no route for {method} {path}")

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

    def _control(
        self,
        request: web.Request,
        headers: dict[str, str],
        method: str,
        parts: list[str],
        body: dict[str, Any],
    ) -> web.Response:
        now = self.clock()
        n = len(parts)
        if n == 1 and method == "POST":
            self._record("CreateHarness", request, headers, body)
            return self._create_harness(body, now)
        if n == 1 and method == "GET":
            self._record("ListHarnesses", request, headers, body)
            return self._list_harnesses(request.query, now)
        with self._lock:
            harness = self._harnesses.get(parts[1]) if n > 1 else None
            if harness is not None and harness.status(now) is None:
                harness = None
        if n == 2:
            op = {"GET": "GetHarness", "DELETE": "DeleteHarness"}.get(method, "Unknown")
            self._record(op, request, headers, body)
            if harness is None:
                return _error(404, "ResourceNotFoundException", f"harness {parts[1]} not found")
            if method == "GET":
                return web.json_response({"harness": harness.view(now)})
            if method == "DELETE":
                with self._lock:
                    if harness.deleting_since is None:
                        harness.deleting_since = now
                        harness.delete_after = self._faults.delete_after
                        harness.delete_outcome = self._faults.delete_outcome
                return web.json_response({"harness": harness.view(now)})
        if n >= 3 and parts[2] == "endpoints":
            op = {
                ("GET", 3): "ListHarnessEndpoints",
                ("POST", 3): "CreateHarnessEndpoint",
                ("GET", 4): "GetHarnessEndpoint",
                ("DELETE", 4): "DeleteHarnessEndpoint",
            }.get((method, n), "Unknown")
            self._record(op, request, headers, body)
            if harness is None:
                return _error(404, "ResourceNotFoundException", f"harness {parts[1]} not found")
            if op == "CreateHarnessEndpoint":
                name = body.get("endpointName", "")
                if not isinstance(name, str) or not _ENDPOINT_NAME_RE.fullmatch(name):
                    return _error(400, "ValidationException", "invalid endpointName")
                with self._lock:
                    if name in harness.endpoints:
                        return _error(409, "ConflictException", f"endpoint {name} exists")
                    ep = _Endpoint(
                        name=name,
                        created=now,
                        absent_for=0.0,
                        ready_after=self._faults.endpoint_ready_after,
                        outcome=self._faults.endpoint_outcome,
                    )
                    harness.endpoints[name] = ep
                return web.json_response({"endpoint": _endpoint_view(harness, ep, now)}, status=201)
            if op == "ListHarnessEndpoints":
                views = [
                    _endpoint_view(harness, ep, now)
                    for ep in harness.endpoints.values()
                    if ep.status(now) is not None
                ]
                return web.json_response({"endpoints": views})
            if n == 4:
                ep2 = harness.endpoints.get(parts[3])
                if ep2 is None or ep2.status(now) is None:
                    return _error(
                        404, "ResourceNotFoundException", f"endpoint {parts[3]} not found"
                    )
                if op == "DeleteHarnessEndpoint":
                    ep2.fixed = "DELETING"
                return web.json_response({"endpoint": _endpoint_view(harness, ep2, now)})
        return _error(404, "UnknownOperationException", f"no route for {method} {request.path}")

    def _create_harness(self, body: dict[str, Any], now: float) -> web.Response:
        f = self._faults
        if f.create_status is not None and not f.create_commits:
            return _create_failure(f.create_status)
        name = body.get("harnessName")
        if not isinstance(name, str) or not _HARNESS_NAME_RE.fullmatch(name):
            return _error(
                400,
                "ValidationException",
                f"1 validation error detected: Value '{name}' at 'harnessName' failed to "
                "satisfy constraint: Member must satisfy regular expression pattern: "
                "[a-zA-Z][a-zA-Z0-9_]{0,39}",
            )
        role = body.get("executionRoleArn")
        if not isinstance(role, str) or not _ROLE_RE.fullmatch(role):
            return _error(
                400, "ValidationException", f"Value {role!r} at 'executionRoleArn' is invalid"
            )
        with self._lock:
            for h in self._harnesses.values():
                if h.name == name and h.status(now) is not None:
                    return _error(409, "ConflictException", f"harness {name} already exists")
            hid = f"{name}-{secrets.token_hex(5)}"
            harness = _Harness(
                id=hid,
                name=name,
                arn=f"arn:aws:bedrock-agentcore:{self.region}:{ACCOUNT}:harness/{hid}",
                body=body,
                created=now,
                ready_after=f.harness_ready_after,
                outcome=f.harness_outcome,
                delete_after=f.delete_after,
                delete_outcome=f.delete_outcome,
            )
            harness.endpoints["DEFAULT"] = _Endpoint(
                name="DEFAULT",
                created=now,
                absent_for=f.endpoint_absent_for,
                ready_after=f.endpoint_ready_after,
                outcome=f.endpoint_outcome,
            )
            self._harnesses[hid] = harness
        if f.create_status is not None:
            return _create_failure(f.create_status)
        return web.json_response({"harness": harness.view(now)}, status=201)

    def _list_harnesses(self, query: Mapping[str, str], now: float) -> web.Response:
        with self._lock:
            alive = [h for h in self._harnesses.values() if h.status(now) is not None]
        start = int(query.get("nextToken", "0") or 0)
        size = int(query.get("maxResults", "100") or 100)
        page = alive[start : start + size]
        out: dict[str, Any] = {
            "harnesses": [
                {
                    "harnessId": h.id,
                    "harnessName": h.name,
                    "arn": h.arn,
                    "status": h.status(now),
                    "createdAt": h.created_at,
                    "updatedAt": h.created_at,
                }
                for h in page
            ]
        }
        if start + size < len(alive):
            out["nextToken"] = str(start + size)
        return web.json_response(out)

    # ---------------------------------------------------------------- data plane: invoke

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
            return _error(
                400,
                "ValidationException",
                "Value at 'runtimeSessionId' failed to satisfy constraint: Member must have "
                "length between 33 and 100 and match pattern [a-zA-Z0-9][a-zA-Z0-9-_]*",
            )
        now = self.clock()
        arn = request.query.get("harnessArn", "")
        qualifier = request.query.get("qualifier", "DEFAULT")
        with self._lock:
            harness = next((h for h in self._harnesses.values() if h.arn == arn), None)
        status = harness.status(now) if harness is not None else None
        if harness is None or status is None:
            return _error(404, "ResourceNotFoundException", f"harness {arn} not found")
        if status != "READY":
            return _error(409, "ConflictException", f"harness is {status}")
        ep = harness.endpoints.get(qualifier)
        status = ep.status(now) if ep is not None else None
        if status is None:
            return _error(404, "ResourceNotFoundException", f"endpoint {qualifier} not found")
        if status != "READY":
            return _error(409, "ConflictException", f"endpoint {qualifier} is {status}")
        faults = self._take_faults()
        if faults is not None and faults.status is not None:
            return _error(
                faults.status,
                _STATUS_CODES.get(faults.status, "InternalServerException"),
                "emulated HTTP failure",
            )

        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        with self._lock:
            session = self._sessions.setdefault(sid, _Session())
            replay = session.replay_frames if session.replay_key == key else None
        if replay is None:
            try:
                frames = self._next_turn(session, harness, body, faults)
            except _RefusedError as exc:
                return _error(400, "ValidationException", str(exc))
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
        session: _Session,
        harness: _Harness,
        body: dict[str, Any],
        faults: AgentCoreFaults | None,
    ) -> list[bytes]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _RefusedError("messages must be a non-empty list")
        user_text: str | None = None
        results: list[ToolResult] = []
        if session.pending:
            if _is_resume(messages):
                results = _check_resume(messages, session.pending)
            else:
                session.pending = []  # a new user turn abandons the pending tool uses
        if not results:
            last = messages[-1]
            if last.get("role") != "user":
                raise _RefusedError("the last message must have role user")
            if any("toolResult" in b for b in last.get("content", [])):
                raise _RefusedError(
                    "The number of toolResult blocks at messages.0.content exceeds the number "
                    "of toolUse blocks of previous turn."
                )
            user_text = "".join(b.get("text", "") for b in last.get("content", []))
        tools_wire = body["tools"] if "tools" in body else harness.body.get("tools") or []
        tools = [_definition(t) for t in tools_wire if t.get("type") == "inline_function"]
        with self._lock:
            turn = self._steps
            self._steps += 1
        session.messages.extend(messages)
        system = body.get("systemPrompt") or harness.body.get("systemPrompt") or []
        model: dict[str, Any] = body.get("model") or {}
        config: dict[str, Any] = next(iter(model.values()), {}) if model else {}
        model_id = config.get("modelId")
        step = self.agent.next_step(
            ModelRequest(
                turn=turn,
                tools=tools,
                user_text=user_text,
                tool_results=results,
                messages=list(session.messages),
                system="".join(p.get("text", "") for p in system) or None,
                model=model_id,
            )
        )
        return self._render(session, step, faults)

    def _render(
        self, session: _Session, step: Reply | Fail | Grade, faults: AgentCoreFaults | None
    ) -> list[bytes]:
        if isinstance(step, Fail):
            kind = step.kind if step.kind in _EXCEPTION_STATUS else "internalServerException"
            return [
                es.event_frame("messageStart", {"role": "assistant"}),
                es.exception_frame(kind, step.message),
            ]
        if isinstance(step, Grade):
            step = Reply(text=step.text or step.explanation)
        frames = [es.event_frame("messageStart", {"role": "assistant"})]
        index = 0
        content: list[dict[str, Any]] = []
        if step.text:
            for piece in _pieces(step.text):
                frames.append(
                    es.event_frame(
                        "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": piece}}
                    )
                )
            frames.append(es.event_frame("contentBlockStop", {"contentBlockIndex": 0}))
            content.append({"text": step.text})
            index = 1
        pending: list[dict[str, Any]] = []
        reuse = faults is not None and faults.reuse_block_index
        for call in step.tool_calls:
            uid = call.id or self.agent.mint_id("tooluse_")
            at = 0 if reuse else index
            kind = "server_tool_use" if call.server else "tool_use"
            frames.append(
                es.event_frame(
                    "contentBlockStart",
                    {
                        "contentBlockIndex": at,
                        "start": {"toolUse": {"toolUseId": uid, "name": call.name, "type": kind}},
                    },
                )
            )
            raw = json.dumps(dict(call.input))
            if faults is not None and faults.raw_tool_input is not None:
                raw = faults.raw_tool_input
            cut = max(1, len(raw) // 2)
            for fragment in (raw[:cut], raw[cut:]):
                if fragment:
                    frames.append(
                        es.event_frame(
                            "contentBlockDelta",
                            {"contentBlockIndex": at, "delta": {"toolUse": {"input": fragment}}},
                        )
                    )
            frames.append(es.event_frame("contentBlockStop", {"contentBlockIndex": at}))
            block = {"toolUseId": uid, "name": call.name, "input": dict(call.input)}
            content.append({"toolUse": block})
            if not call.server:
                pending.append(block)
            index += 1
        stop = step.stop_reason or ("tool_use" if pending else "end_turn")
        frames.append(es.event_frame("messageStop", {"stopReason": stop}))
        if step.usage is not None:
            i, o = step.usage
            frames.append(
                es.event_frame(
                    "metadata",
                    {
                        "usage": {"inputTokens": i, "outputTokens": o, "totalTokens": i + o},
                        "metrics": {"latencyMs": 1},
                    },
                )
            )
        session.pending = pending
        session.messages.append({"role": "assistant", "content": content})
        return frames

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

    # ---------------------------------------------------------------- data plane: commands

    async def _command(
        self, request: web.Request, headers: dict[str, str], arn: str, body: dict[str, Any]
    ) -> web.StreamResponse:
        lower = {k.lower(): v for k, v in headers.items()}
        sid = lower.get("x-amzn-bedrock-agentcore-runtime-session-id", "")
        command = body.get("command")
        if not isinstance(command, str) or not 1 <= len(command) <= 65536:
            return _error(400, "ValidationException", "command must be 1..65536 characters")
        timeout = body.get("timeout", 300)
        with self._lock:
            known = any(h.arn == arn for h in self._harnesses.values())
        if not known:
            return _error(404, "ResourceNotFoundException", f"runtime {arn} not found")
        if self.commands is None:
            return _error(403, "AccessDeniedException", "commands are disabled on this emulator")
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
                code, status = await self._shell(resp, sid, command, float(timeout))
            await resp.write(
                es.event_frame("chunk", {"contentStop": {"exitCode": code, "status": status}})
            )
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            with self._lock:
                self.disconnects += 1
        return resp

    async def _shell(
        self, resp: web.StreamResponse, sid: str, command: str, timeout: float
    ) -> tuple[int, str]:
        assert self._scratch is not None
        root = f"{self._scratch}/{hashlib.sha256(sid.encode()).hexdigest()[:16]}"
        await asyncio.to_thread(_makedirs, root)
        rewritten = _MOUNT_RE.sub(lambda m: f"{root}/mnt/{m.group(1)}", command)
        proc = await asyncio.create_subprocess_shell(
            rewritten,
            cwd=root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: a timeout kills the whole tree
        )

        async def pump(reader: asyncio.StreamReader | None, key: str) -> None:
            assert reader is not None
            while chunk := await reader.read(8192):
                text = chunk.decode(errors="replace")
                await resp.write(es.event_frame("chunk", {"contentDelta": {key: text}}))

        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(pump(proc.stdout, "stdout"), pump(proc.stderr, "stderr"))
                code = await proc.wait()
        except TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            return -1, "TIMED_OUT"
        finally:
            if proc.returncode is None:
                _kill_group(proc.pid)
                await proc.wait()
        return code, "COMPLETED"


class _RefusedError(Exception):
    pass


_STATUS_CODES = {
    400: "ValidationException",
    402: "ServiceQuotaExceededException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    409: "ConflictException",
    424: "RuntimeClientError",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


def _create_failure(status: int) -> web.Response:
    return _error(
        status, _STATUS_CODES.get(status, "InternalServerException"), "emulated create failure"
    )


def _error(status: int, code: str, message: str) -> web.Response:
    body: dict[str, Any] = {"message": message}
    if code == "ValidationException":
        body["reason"] = "FieldValidationFailed"
    return web.json_response(body, status=status, headers={"x-amzn-ErrorType": code})


def _environment_view(harness: _Harness, requested: Any) -> dict[str, Any]:
    """The harness's runtime environment as GetHarness shows it: the requested settings
    plus what the service fills in (the runtime it made; public network and lifecycle
    defaults), all required by botocore's ``HarnessAgentCoreRuntimeEnvironment``."""
    runtime = dict((requested or {}).get("agentCoreRuntimeEnvironment") or {})
    runtime_id = f"{harness.name}_runtime-{harness.id.rsplit('-', 1)[-1]}"
    region = harness.arn.split(":")[3]
    return {
        "agentCoreRuntimeEnvironment": {
            "agentRuntimeArn": f"arn:aws:bedrock-agentcore:{region}:{ACCOUNT}:runtime/{runtime_id}",
            "agentRuntimeName": f"{harness.name}_runtime",
            "agentRuntimeId": runtime_id,
            "lifecycleConfiguration": {"idleRuntimeSessionTimeout": 900, "maxLifetime": 28800},
            "networkConfiguration": {"networkMode": "PUBLIC"},
            **runtime,
        }
    }


def _endpoint_view(harness: _Harness, ep: _Endpoint, now: float) -> dict[str, Any]:
    return {
        "harnessId": harness.id,
        "harnessName": harness.name,
        "endpointName": ep.name,
        "arn": f"{harness.arn}/harness-endpoint/{ep.name}",
        "status": ep.status(now),
        "createdAt": ep.created_at,
        "updatedAt": ep.created_at,
        "liveVersion": "1",
        "targetVersion": "1",
    }


def _definition(tool: Mapping[str, Any]) -> ToolDefinition:
    fn = (tool.get("config") or {}).get("inlineFunction") or {}
    return ToolDefinition(
        name=str(tool.get("name", "")),
        description=str(fn.get("description", "")),
        input_schema=dict(fn.get("inputSchema") or {"type": "object", "properties": {}}),
    )


def _is_resume(messages: list[dict[str, Any]]) -> bool:
    return any(
        "toolResult" in block or "toolUse" in block
        for m in messages
        for block in m.get("content", [])
    )


def _check_resume(
    messages: list[dict[str, Any]], pending: list[dict[str, Any]]
) -> list[ToolResult]:
    """Enforce the service's resume rules; return the tool results."""
    if len(messages) != 2 or messages[0].get("role") != "assistant":
        raise _RefusedError(
            "The number of toolResult blocks at messages.0.content exceeds the number of "
            "toolUse blocks of previous turn."
        )
    uses = [b["toolUse"] for b in messages[0].get("content", []) if "toolUse" in b]
    ids = [u.get("toolUseId") for u in uses]
    if len(ids) != len(set(ids)):
        raise _RefusedError(
            "Expected toolResult blocks at messages.1.content: duplicate Ids at messages.0.content"
        )
    if set(ids) != {p["toolUseId"] for p in pending}:
        raise _RefusedError("toolUse ids in messages.0.content do not match the previous turn")
    results = [b["toolResult"] for b in messages[1].get("content", []) if "toolResult" in b]
    rids = [r.get("toolUseId") for r in results]
    if sorted(rids) != sorted(ids):
        raise _RefusedError(
            "The number of toolResult blocks at messages.1.content exceeds the number of "
            "toolUse blocks of previous turn."
        )
    return [
        ToolResult(
            tool_use_id=r["toolUseId"],
            text="".join(
                c.get("text", "") if "text" in c else json.dumps(c.get("json"))
                for c in r.get("content", [])
            ),
            is_error=r.get("status") == "error",
        )
        for r in results
    ]


def _pieces(text: str) -> list[str]:
    """Split text into up to three streamed deltas (word boundaries where possible)."""
    if len(text) < 12:
        return [text]
    third = len(text) // 3
    cuts = [text.find(" ", third) + 1 or third, text.find(" ", 2 * third) + 1 or 2 * third]
    a, b = sorted(set(cuts))[0], sorted(set(cuts))[-1]
    return [p for p in (text[:a], text[a:b], text[b:]) if p]


def _kill_group(pid: int) -> None:
    import os
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _makedirs(path: str) -> None:
    import os

    os.makedirs(path, exist_ok=True)
