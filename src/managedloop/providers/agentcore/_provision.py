"""Harness provisioning under one monotonic deadline (reference §3.8-3.11, v0.12 README).

``provision`` validates everything first (``endpoint_name``, ``execution_role_arn``,
``timeout``, the specs), then: CreateHarness → wait for the harness to be READY → wait for
the endpoint invokes will use to be READY, all under **one** :class:`WaitBudget` built at
entry. The budget bounds every wait *and* every request: each control-plane attempt gets a
read timeout of ``min(configured, remaining) / attempts``, recomputed per call, so no wait
outlives its deadline by more than one request's share. (Connect time and TLS setup are
bounded separately by the client's connect timeout.)

Invariants relied on:

* harness and endpoint statuses share one vocabulary (:func:`classify`): ``READY`` is done,
  ``CREATING``/``UPDATING`` may still get there, ``DELETING`` never will, ``*_FAILED`` is
  final, and anything else is named and fatal (never polled);
* an endpoint is only polled once its harness is READY, and a 404 from
  ``GetHarnessEndpoint`` means "not created yet";
* a harness *this call created* is deleted if anything after the create fails, the
  caller's cancellation included (shielded, with its own small budget, never masking the
  original error); an adopted one never is;
* a CreateHarness that times out, drops or answers 5xx may have created the harness
  anyway: it is looked up by its deterministic name and, if there, treated as this call's
  (waited on with budget left, deleted at once without), so it is not left orphaned;
* a ``409`` on create means the name is taken: a live namesake is adopted, a DELETING one
  is waited out (``harness_still_deleting``) and re-created, anything else is a
  ``harness_name_conflict``.

Every poll and every wait's end is logged (``managedloop.agentcore.provision``) and emitted
as telemetry (``agent_core.provision.poll|stop|exception``), so a failed provision can be
diagnosed from the log alone.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from managedloop import _validate, telemetry
from managedloop._log import fields
from managedloop.config import MISSING
from managedloop.errors import (
    APIStatusError,
    InvalidOptionsError,
    MalformedResponseError,
    ManagedLoopError,
    ProvisioningError,
    TransportError,
)
from managedloop.providers.agentcore import _converse
from managedloop.providers.agentcore._clients import CONTROL_READ_TIMEOUT
from managedloop.providers.agentcore._errors import retryable
from managedloop.providers.agentcore._ids import (
    AgentCoreHandle,
    harness_id_of,
    validate_endpoint_name,
)
from managedloop.provisioning.handles import EnvironmentHandle, HarnessHandle
from managedloop.provisioning.lifecycle import Listed
from managedloop.provisioning.names import AGENTCORE_HARNESS
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec, digest_of

__all__ = [
    "AgentCoreLifecycle",
    "ControlPlane",
    "ProvisionOptions",
    "WaitBudget",
    "WaitContext",
    "classify",
    "harness_digest",
    "harness_name",
    "provision",
    "teardown",
]

logger = logging.getLogger("managedloop.agentcore.provision")

DEFAULT_TIMEOUT = 365.0  # seconds: the reference default (5 s x 73 observations); a harness is
# typically READY in ~11 s but its DEFAULT endpoint took 2 m 31 s live
DEFAULT_POLL = 5.0  # seconds between polls when no timeout is given (legacy count semantics)
DEFAULT_MAX_POLLS = 72  # polls after the first look: 73 looks x 5 s = DEFAULT_TIMEOUT
MIN_POLL = 0.05  # seconds; a derived cadence never hammers the control plane faster
MAX_POLL = 5.0  # seconds; ... nor sleeps so long that a short budget only looks once
MIN_ATTEMPT = 0.05  # seconds; a spent budget still gets one short attempt, never a zero timeout
ROLLBACK_ATTEMPT = 10.0  # seconds per DeleteHarness attempt during rollback (3 attempts = 30 s):
# independent of the spent budget, since rollback runs exactly when that budget is gone
READ_ATTEMPTS = 3  # GET/LIST/DELETE are idempotent: up to 3 attempts within the budget
WRITE_ATTEMPTS = 1  # CreateHarness is not: one attempt (a retry could create twice)
HARNESS_NAME_MAX = 40  # the service's harnessName limit ([a-zA-Z][a-zA-Z0-9_]{0,39})
_ROLE_RE = re.compile(r"arn:aws(-[^:]+)?:iam::\d{12}:role/[\w+=,.@/-]+")  # fullmatch
_MODEL_UNIONS = (
    "bedrockModelConfig",
    "openAiModelConfig",
    "geminiModelConfig",
    "liteLlmModelConfig",
)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
Progress = Callable[["WaitContext"], None]


class ControlPlane(Protocol):
    """What provisioning needs from the provider: one control-plane call
    (:meth:`managedloop.providers.BedrockAgentCore.control_call`)."""

    async def control_call(
        self, operation: str, *, read_timeout: float | None = None, **params: Any
    ) -> dict[str, Any]: ...


def classify(status: Any) -> str:
    """``ready`` | ``creating`` | ``terminating`` | ``failed`` | ``unknown`` (total)."""
    if status == "READY":
        return "ready"
    if status in ("CREATING", "UPDATING"):
        return "creating"
    if status == "DELETING":
        return "terminating"
    if status in ("CREATE_FAILED", "UPDATE_FAILED", "DELETE_FAILED"):
        return "failed"
    return "unknown"


@dataclass(slots=True)
class WaitBudget:
    """One deadline shared by every wait and request of a provision call (seconds)."""

    deadline: float
    poll: float
    polls_left: float  # math.inf: no count limit
    clock: Clock = time.monotonic
    sleep: Sleep = anyio.sleep  # with ``clock``: injectable, so deadline tests run exactly

    @classmethod
    def new(
        cls,
        timeout: Any = MISSING,
        poll_interval: Any = None,
        max_polls: Any = None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = anyio.sleep,
    ) -> WaitBudget:
        """An explicit ``timeout`` is the whole budget (any poll count is dropped so it
        cannot cap the caller) and derives the cadence ``clamp(timeout / 12, 0.05, 5)``.
        Without one, ``poll_interval`` (5 s) / ``max_polls`` (72) keep count semantics and
        the deadline is ``max(poll * (max_polls + 1), 365 s)``."""
        _validate.duration("poll_interval", poll_interval, allow_zero=True)
        _validate.integer("max_polls", max_polls, allow_none=True)
        now = clock()
        if timeout is not MISSING:
            if (
                isinstance(timeout, bool)
                or not isinstance(timeout, int | float)
                or timeout < 0
                or not math.isfinite(timeout)
            ):
                raise InvalidOptionsError(
                    f"timeout must be finite seconds >= 0, got {timeout!r}", option="timeout"
                )
            poll = (
                float(poll_interval)
                if poll_interval is not None
                else min(max(timeout / 12, MIN_POLL), MAX_POLL)
            )
            return cls(
                deadline=now + timeout, poll=poll, polls_left=math.inf, clock=clock, sleep=sleep
            )
        poll = float(poll_interval) if poll_interval is not None else DEFAULT_POLL
        count = max_polls if max_polls is not None else DEFAULT_MAX_POLLS
        total = max(poll * (count + 1), DEFAULT_TIMEOUT)
        return cls(deadline=now + total, poll=poll, polls_left=count, clock=clock, sleep=sleep)

    def remaining(self) -> float:
        return self.deadline - self.clock()

    def next(self) -> bool:
        """Room for another poll: the count allows it and a whole sleep fits the deadline
        (so the wait stops while it can still return its named error)."""
        return self.polls_left > 0 and self.remaining() > self.poll

    def spend(self) -> None:
        self.polls_left -= 1

    def attempt_timeout(self, configured: float = math.inf, attempts: int = 1) -> float:
        return max(min(configured, self.remaining()) / attempts, MIN_ATTEMPT)


@dataclass(frozen=True, kw_only=True, slots=True)
class WaitContext:
    """Where a wait stood when it ended (attached to every wait error)."""

    harness_id: str
    phase: str
    """``ready``, ``endpoint`` or ``deleted``."""
    last_status: str | None = None
    elapsed: float = 0.0
    polls: int = 0
    endpoint_name: str | None = None

    def as_context(self) -> dict[str, Any]:
        return {
            "harness_id": self.harness_id,
            "phase": self.phase,
            "last_status": self.last_status,
            "elapsed": self.elapsed,
            "polls": self.polls,
            "endpoint_name": self.endpoint_name,
            "wait": self,
        }


def _wait_error(code: str, message: str, ctx: WaitContext) -> ProvisioningError:
    return ProvisioningError(message, code=code, **ctx.as_context())


# ---------------------------------------------------------------------------- names/specs


def harness_digest(spec: AgentSpec, environment: EnvironmentSpec | None) -> str:
    """The content digest of a harness: the agent's, folded with the environment's (its
    name excluded) when there is one, so a changed prompt, tool or environment is a new
    harness."""
    if environment is None:
        return spec.digest
    return digest_of(
        {"kind": "harness", "v": 1, "agent": spec.digest, "environment": environment.digest}
    )


def harness_name(spec: AgentSpec, name_prefix: str | None = None, environment: Any = None) -> str:
    """``<prefix>_<spec name>_<digest8>`` fitted to ``[a-zA-Z][a-zA-Z0-9_]{0,39}`` (the
    ``provision`` path: a long base is cut to fit; ``ensure_agent`` refuses one instead,
    see :mod:`managedloop.provisioning.names`)."""
    base = "_".join(p for p in (name_prefix, spec.name) if p) or "a"
    base = re.sub(r"[^A-Za-z0-9_]", "_", base)
    if not base[0].isalpha():
        base = "a" + base
    digest = harness_digest(spec, _coerce_environment(environment))
    base = base[: HARNESS_NAME_MAX - 9]
    return f"{base}_{digest[:8]}"


def _coerce_spec(spec: Any) -> AgentSpec:
    if isinstance(spec, AgentSpec):
        return spec
    if isinstance(spec, Mapping):
        try:
            return AgentSpec(**spec)
        except (TypeError, ValueError) as exc:
            raise InvalidOptionsError(
                f"invalid agent spec: {exc}", code="invalid_agent_spec", option="spec"
            ) from exc
    raise InvalidOptionsError(
        "spec must be an AgentSpec or a mapping", code="invalid_agent_spec", option="spec"
    )


def _coerce_environment(environment: Any) -> EnvironmentSpec | None:
    """``environment=`` as an :class:`EnvironmentSpec`: a mapping is its ``config`` (e.g.
    ``{"agentCoreRuntimeEnvironment": {...}}``, passed verbatim) plus the spec's own keys
    (``variables``, ``filesystems``...). Declared runtimes are refused: a harness has no
    environment handle to carry their bootstrap."""
    try:
        env = EnvironmentSpec.coerce(environment)
    except InvalidOptionsError as exc:
        raise InvalidOptionsError(
            f'{exc.message} (e.g. {{"agentCoreRuntimeEnvironment": {{...}}}})',
            code="invalid_environment_spec",
            option="environment",
        ) from None
    if env is not None and env.runtimes:
        raise InvalidOptionsError(
            "declared runtimes are a Claude environment feature; a harness cannot carry "
            "their bootstrap (install them in the container image instead)",
            code="invalid_environment_spec",
            option="runtimes",
        )
    if env is not None and not (env.config or env.variables or env.filesystems):
        return None
    return env


def environment_wire(env: EnvironmentSpec | None) -> dict[str, Any] | None:
    """The CreateHarness ``environment``: ``config`` verbatim, with ``filesystems``
    appended to ``agentCoreRuntimeEnvironment.filesystemConfigurations``."""
    if env is None or not (env.config or env.filesystems):
        return None
    wire = dict(env.config)
    if env.filesystems:
        runtime = dict(wire.get("agentCoreRuntimeEnvironment") or {})
        given = list(runtime.get("filesystemConfigurations") or [])
        runtime["filesystemConfigurations"] = given + [dict(f) for f in env.filesystems]
        wire["agentCoreRuntimeEnvironment"] = runtime
    return wire


def _model(spec: AgentSpec) -> dict[str, Any] | None:
    unions = {k: v for k, v in spec.model_config.items() if k in _MODEL_UNIONS}
    if unions:
        return unions
    if spec.model:
        return {"bedrockModelConfig": {"modelId": spec.model}}
    return None


def create_body(
    spec: AgentSpec,
    *,
    name: str,
    execution_role_arn: str,
    environment: EnvironmentSpec | Mapping[str, Any] | None,
    tags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The CreateHarness parameters (the environment's ``config`` goes to the wire
    verbatim; ``variables`` become ``environmentVariables``; the spec's
    ``timeout_seconds`` becomes ``timeoutSeconds``). Claude-only spec fields are refused."""
    for option in (
        "effort",
        "execution_identity",
        "mcp_servers",
        "skills",
        "speed",
        "inference_geo",
    ):
        if getattr(spec, option) not in (None, {}, ()):
            raise InvalidOptionsError(
                f"{option} is a Claude agent setting; a harness has none (AgentCore runs as "
                "execution_role_arn; its model settings go in model_config)",
                option=option,
            )
    body: dict[str, Any] = {"harnessName": name, "executionRoleArn": execution_role_arn}
    if spec.system_prompt:
        body["systemPrompt"] = [{"text": spec.system_prompt}]
    model = _model(spec)
    if model is not None:
        body["model"] = model
    tools = spec.tool_definitions()
    if tools:
        body["tools"] = [_converse.inline_function(t) for t in tools]
    if not isinstance(environment, EnvironmentSpec):
        environment = _coerce_environment(environment)
    wire = environment_wire(environment)
    if wire is not None:
        body["environment"] = wire
    if environment is not None and environment.variables:
        body["environmentVariables"] = dict(environment.variables)
    if spec.timeout_seconds is not None:
        body["timeoutSeconds"] = spec.timeout_seconds
    if tags:
        body["tags"] = dict(tags)
    return body


# ---------------------------------------------------------------------------- requests


async def _call(
    provider: ControlPlane,
    operation: str,
    budget: WaitBudget | None,
    *,
    attempts: int = READ_ATTEMPTS,
    per_attempt: float | None = None,
    **params: Any,
) -> dict[str, Any]:
    """A control-plane call, retried (``attempts``) on transient errors, each attempt's read
    timeout bounded by the budget (or fixed at ``per_attempt``)."""
    for attempt in range(attempts):
        if per_attempt is not None:
            timeout = per_attempt
        else:
            assert budget is not None
            timeout = budget.attempt_timeout(CONTROL_READ_TIMEOUT, attempts - attempt)
        try:
            return await provider.control_call(operation, read_timeout=timeout, **params)
        except ManagedLoopError as exc:
            last_try = attempt + 1 >= attempts
            spent = per_attempt is None and budget is not None and budget.remaining() <= 0
            if last_try or not retryable(exc) or spent:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


# ---------------------------------------------------------------------------- waits

_TAGS = {
    "ready": (
        "harness_ready_timeout",
        "harness_failed",
        "harness_terminating",
        "harness_unknown_status",
    ),
    "endpoint": (
        "endpoint_ready_timeout",
        "endpoint_failed",
        "endpoint_terminating",
        "endpoint_unknown_status",
    ),
}


async def _wait(
    budget: WaitBudget,
    *,
    phase: str,
    harness_id: str,
    fetch: Callable[[], Awaitable[str | None]],
    endpoint_name: str | None = None,
    caller: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
) -> None:
    """Poll ``fetch`` until READY; raise the phase's named error otherwise."""
    timeout_tag, failed_tag, terminating_tag, unknown_tag = _TAGS[phase]
    started = budget.clock()
    polls = 0
    last: str | None = None

    def ctx() -> WaitContext:
        return WaitContext(
            harness_id=harness_id,
            phase=phase,
            last_status=last,
            elapsed=budget.clock() - started,
            polls=polls,
            endpoint_name=endpoint_name,
        )

    try:
        while True:
            try:
                status = await fetch()
            except ManagedLoopError as exc:
                if budget.remaining() <= 0:
                    logger.warning(
                        "agent_core provision poll failed on an expired budget harness_id=%s "
                        "phase=%s error=%s",
                        harness_id,
                        phase,
                        exc.code,
                    )
                    raise _wait_error(
                        timeout_tag, f"{phase} wait ran out of time ({exc.code})", ctx()
                    ) from exc
                raise
            polls += 1
            last = status
            elapsed = budget.clock() - started
            logger.debug(
                "agent_core provision poll harness_id=%s phase=%s status=%s poll_n=%d "
                "elapsed_ms=%d",
                harness_id,
                phase,
                status or "absent",
                polls,
                elapsed * 1000,
                extra=fields(
                    "provision_poll",
                    host="agentcore",
                    harness_id=harness_id,
                    phase=phase,
                    status=status,
                    poll_n=polls,
                    elapsed_ms=elapsed * 1000,
                ),
            )
            telemetry.emit(
                "agent_core.provision.poll",
                {"elapsed_ms": elapsed * 1000, "poll_n": polls},
                {"harness_id": harness_id, "status": status, "phase": phase},
                caller=caller,
            )
            if progress is not None:
                _report(progress, ctx())
            kind = classify(status) if status is not None else "creating"
            what = f"endpoint {endpoint_name}" if phase == "endpoint" else f"harness {harness_id}"
            if kind == "ready":
                _stop(harness_id, phase, "ok", None, ctx(), caller=caller)
                return
            if kind == "failed":
                raise _wait_error(failed_tag, f"{what} is {status}", ctx())
            if kind == "terminating":
                raise _wait_error(terminating_tag, f"{what} is DELETING", ctx())
            if kind == "unknown":
                raise _wait_error(unknown_tag, f"{what} has unknown status {status!r}", ctx())
            if not budget.next():
                raise _wait_error(
                    timeout_tag,
                    f"{what} not READY within the budget (last status {status or 'absent'})",
                    ctx(),
                )
            budget.spend()
            await budget.sleep(budget.poll)
    except ProvisioningError as exc:
        if exc.context.get("phase") == phase:
            _stop(harness_id, phase, "error", exc.code, ctx(), caller=caller)
        raise
    except ManagedLoopError as exc:
        _stop(harness_id, phase, "error", "provider_error", ctx(), caller=caller, detail=exc.code)
        raise
    except anyio.get_cancelled_exc_class():
        _stop(harness_id, phase, "cancelled", None, ctx(), caller=caller)
        raise
    except Exception as exc:
        duration = budget.clock() - started
        logger.warning(
            "agent_core provision %s wait failed hard harness_id=%s kind=%s error=%r "
            "duration_ms=%d",
            phase,
            harness_id,
            type(exc).__name__,
            exc,
            duration * 1000,
        )
        telemetry.emit(
            "agent_core.provision.exception",
            {"duration_ms": duration * 1000},
            {
                "harness_id": harness_id,
                "phase": phase,
                "kind": "error",
                "result": f"exception:{type(exc).__name__}",
            },
            caller=caller,
        )
        raise


def _report(progress: Progress, ctx: WaitContext) -> None:
    """A progress callback never breaks a provision: its failure is logged."""
    try:
        progress(ctx)
    except Exception:
        logger.exception("agent_core provision progress callback failed")


def _stop(
    harness_id: str,
    phase: str,
    result: str,
    error: str | None,
    ctx: WaitContext,
    *,
    caller: Mapping[str, Any] | None,
    detail: str | None = None,
) -> None:
    level = logging.INFO if result == "ok" else logging.WARNING  # "error", "cancelled", ...
    endpoint = f"endpoint={ctx.endpoint_name} " if ctx.endpoint_name else ""
    logger.log(
        level,
        "agent_core provision stop harness_id=%s phase=%s result=%s last_status=%s %s"
        "polls=%d duration_ms=%d",
        harness_id,
        phase,
        result if error is None else f"{error}{f' ({detail})' if detail else ''}",
        ctx.last_status or "none",
        endpoint,
        ctx.polls,
        ctx.elapsed * 1000,
        extra=fields(
            "provision_stop",
            host="agentcore",
            harness_id=harness_id,
            endpoint_name=ctx.endpoint_name,
            phase=phase,
            result=result,
            error=error,
            detail=detail,
            last_status=ctx.last_status,
            polls=ctx.polls,
            duration_ms=ctx.elapsed * 1000,
        ),
    )
    meta: dict[str, Any] = {"harness_id": harness_id, "phase": phase, "result": result}
    if error is not None:
        meta["error"] = error
    telemetry.emit(
        "agent_core.provision.stop",
        {"duration_ms": ctx.elapsed * 1000, "polls": ctx.polls},
        meta,
        caller=caller,
    )


# ---------------------------------------------------------------------------- provision


@dataclass(slots=True)
class _Run:
    provider: ControlPlane
    budget: WaitBudget
    name: str
    body: dict[str, Any]
    endpoint_name: str
    caller: dict[str, Any] = field(default_factory=dict)
    progress: Progress | None = None
    digest: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ProvisionOptions:
    """The options of :func:`provision` (``BedrockAgentCore.provision``'s keywords, and
    ``ensure_agent``'s for a harness), as the caller gave them: :func:`prepare` checks them."""

    environment: Any = None
    """An :class:`EnvironmentSpec` or a mapping (see :func:`_coerce_environment`)."""
    execution_role_arn: Any = None
    """The IAM role the harness runs as (required)."""
    endpoint_name: Any = "DEFAULT"
    """The endpoint invokes will use, waited for after the harness."""
    timeout: Any = MISSING
    """Seconds for the whole call (default 365); see :meth:`WaitBudget.new`."""
    poll_interval: Any = None
    max_polls: Any = None
    name_prefix: str | None = None
    tags: Mapping[str, str] | None = None
    telemetry_metadata: Mapping[str, Any] | None = None
    clock: Clock = time.monotonic
    """Replaces the monotonic clock (tests share a
    :class:`managedloop.testing.agentcore.ManualClock` with the emulator, so deadlines are
    exact)."""
    sleep: Sleep = anyio.sleep
    """Replaces the poll sleep, with ``clock``."""
    progress: Progress | None = None
    """Called with a :class:`WaitContext` after every poll (a live display)."""

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> ProvisionOptions:
        """The options from keywords; an unknown one is refused, naming the accepted."""
        accepted = cls.__dataclass_fields__
        unknown = {k: v for k, v in options.items() if k not in accepted}
        _validate.no_unknown_keywords("provision", unknown, accepted)
        return cls(**options)


async def provision(provider: ControlPlane, spec: Any, **options: Any) -> AgentCoreHandle:
    """Create (or adopt) the harness for ``spec`` and wait until it and its endpoint are
    READY, within ``timeout`` seconds (default 365) for the whole call. The keywords are
    :class:`ProvisionOptions`."""
    return await execute(prepare(provider, spec, ProvisionOptions.of(options)))


def prepare(
    provider: ControlPlane, spec: Any, options: ProvisionOptions, *, name: str | None = None
) -> _Run:
    """Every check of :func:`provision`, before any request; ``name`` (from
    ``ensure_agent``) replaces the derived harness name."""
    agent = _coerce_spec(spec)
    endpoint_name = options.endpoint_name
    validate_endpoint_name(endpoint_name)
    execution_role_arn = options.execution_role_arn
    if not isinstance(execution_role_arn, str) or not execution_role_arn.strip():
        raise InvalidOptionsError(
            "execution_role_arn is required (the IAM role the harness runs as)",
            option="execution_role_arn",
        )
    role = execution_role_arn.strip()
    if _ROLE_RE.fullmatch(role) is None:
        raise InvalidOptionsError(
            f"execution_role_arn must look like arn:aws:iam::<12 digits>:role/<name>, got {role!r}",
            option="execution_role_arn",
        )
    env = _coerce_environment(options.environment)
    clock, sleep, progress = options.clock, options.sleep, options.progress
    if not callable(clock) or not callable(sleep):
        raise InvalidOptionsError("clock and sleep must be callables", option="clock")
    if progress is not None and not callable(progress):
        raise InvalidOptionsError("progress must be a callable", option="progress")
    budget = WaitBudget.new(
        options.timeout, options.poll_interval, options.max_polls, clock=clock, sleep=sleep
    )
    digest = harness_digest(agent, env)
    if name is None:
        name = harness_name(agent, options.name_prefix, env)
    body = create_body(
        agent, name=name, execution_role_arn=role, environment=env, tags=options.tags
    )
    return _Run(
        provider=provider,
        budget=budget,
        name=name,
        body=body,
        endpoint_name=endpoint_name,
        caller=dict(options.telemetry_metadata or {}),
        progress=progress,
        digest=digest,
    )


async def execute(run: _Run) -> AgentCoreHandle:
    """Create or adopt ``run``'s harness and wait for it and its endpoint (one deadline);
    a harness this call created is rolled back if anything after the create fails."""
    budget, provider, endpoint_name = run.budget, run.provider, run.endpoint_name
    created, handle = await _create_or_adopt(run)
    try:
        await _wait(
            budget,
            phase="ready",
            harness_id=handle.harness_id,
            fetch=lambda: _harness_status(run, handle.harness_id),
            caller=run.caller,
            progress=run.progress,
        )
        await _wait(
            budget,
            phase="endpoint",
            harness_id=handle.harness_id,
            fetch=lambda: _endpoint_status(run, handle.harness_id),
            endpoint_name=endpoint_name,
            caller=run.caller,
            progress=run.progress,
        )
    except BaseException as exc:
        # Cancellation (a timeout around this call) rolls back too: the harness is ours and
        # nobody else will ever learn its id. Shielded, so the delete is not cancelled in
        # turn; bounded by the rollback's own budget, not by the spent or cancelled one.
        if created and isinstance(exc, Exception | anyio.get_cancelled_exc_class()):
            with anyio.CancelScope(shield=True):
                await _rollback(provider, handle.harness_id)
        raise
    return handle


async def _create(run: _Run) -> AgentCoreHandle:
    result = await _call(
        run.provider, "create_harness", run.budget, attempts=WRITE_ATTEMPTS, **run.body
    )
    harness = result.get("harness")
    if (
        not isinstance(harness, Mapping)
        or not isinstance(harness.get("arn"), str)
        or not isinstance(harness.get("harnessId"), str)
    ):
        raise ProvisioningError(
            "CreateHarness returned no harness arn/harnessId",
            code="unexpected_create_response",
            body={k: v for k, v in result.items() if k != "ResponseMetadata"},
        )
    logger.info("agent_core provision created harness %s (%s)", harness["harnessId"], run.name)
    return AgentCoreHandle(
        harness_arn=harness["arn"], harness_id=harness["harnessId"], harness_name=run.name
    )


async def _create_or_adopt(run: _Run) -> tuple[bool, AgentCoreHandle]:
    """``(created_by_this_call, handle)``."""
    try:
        return True, await _create_checked(run)
    except APIStatusError as exc:
        if exc.status != 409:
            raise
    entry = await _find(run)
    status = entry.get("status") if entry is not None else None
    if entry is not None and status in ("READY", "CREATING", "UPDATING"):
        arn, hid = entry.get("arn"), entry.get("harnessId")
        if not isinstance(arn, str) or not isinstance(hid, str):
            raise ProvisioningError(
                f"ListHarnesses entry for {run.name} has no arn/harnessId",
                code="unexpected_list_response",
                entry=dict(entry),
            )
        logger.info("agent_core provision adopted harness %s (%s, %s)", hid, run.name, status)
        return False, AgentCoreHandle(harness_arn=arn, harness_id=hid, harness_name=run.name)
    if entry is not None and status == "DELETING":
        await _delete_wait(run)
        if not run.budget.next():
            logger.warning("agent_core provision no budget left to re-create harness %s", run.name)
            raise _wait_error(
                "harness_ready_timeout",
                f"no budget left to re-create {run.name} after its namesake was deleted",
                WaitContext(harness_id=run.name, phase="deleted", last_status=None),
            )
        return True, await _create_checked(run)  # a second 409 is returned as is
    if entry is None:
        # The namesake that made the 409 is gone by the lookup (it finished deleting in
        # between, as after a teardown): the name is free, so create once more.
        logger.info("agent_core provision: namesake of %s gone after a 409; creating", run.name)
        return True, await _create_checked(run)  # a second 409 is returned as is
    logger.warning(
        "agent_core provision cannot recover harness %s (status %s)", run.name, status or "none"
    )
    raise ProvisioningError(
        f"harness name {run.name} is taken by a harness that cannot be adopted "
        f"(status {status or 'unknown'})",
        code="harness_name_conflict",
        name=run.name,
        last_status=status,
    )


async def _create_checked(run: _Run) -> AgentCoreHandle:
    """CreateHarness; when it fails in a way that may have created the harness anyway (a
    timeout, a dropped connection, a 5xx), :func:`_claim_after_failed_create` decides."""
    try:
        return await _create(run)
    except APIStatusError as exc:
        if exc.status is None or exc.status < 500:
            raise  # a 4xx (409 included) was refused before anything was created
        return await _claim_after_failed_create(run, exc)
    except (TransportError, MalformedResponseError) as exc:
        return await _claim_after_failed_create(run, exc)


async def _claim_after_failed_create(run: _Run, error: ManagedLoopError) -> AgentCoreHandle:
    """A CreateHarness that timed out or failed with a 5xx may still have created the
    harness server-side. Look it up by its (content-derived, so deterministic) name: if it
    is there, this call made it. With budget left, carry on with it (it is ours, so it is
    rolled back if a wait fails); with none left, delete it now and raise ``error``. The
    lookup and that delete run on the rollback's own small budget when the create spent
    the deadline, since they are the rollback of this create."""
    per_attempt = None if run.budget.next() else ROLLBACK_ATTEMPT
    try:
        entry = await _find(run, per_attempt=per_attempt)
    except ManagedLoopError as exc:
        logger.warning(
            "agent_core provision CreateHarness failed (%s) and harness %s could not be "
            "looked up (%s); it may be orphaned",
            error.code,
            run.name,
            exc.code,
        )
        error.context["orphan_check"] = "failed"
        raise error from None
    if entry is None:
        error.context["orphan_check"] = "absent"
        raise error
    hid, arn, status = entry.get("harnessId"), entry.get("arn"), entry.get("status")
    if not isinstance(hid, str) or not isinstance(arn, str):
        error.context["orphan_check"] = "unreadable"
        raise error
    handle = AgentCoreHandle(harness_arn=arn, harness_id=hid, harness_name=run.name)
    if status in ("READY", "CREATING", "UPDATING") and run.budget.next():
        logger.warning(
            "agent_core provision CreateHarness failed (%s) but harness %s (%s) exists: the "
            "create went through; continuing with it",
            error.code,
            hid,
            status,
        )
        return handle
    logger.warning(
        "agent_core provision CreateHarness failed (%s) but created harness %s (%s); no budget "
        "left to wait for it, deleting it",
        error.code,
        hid,
        status,
    )
    deleted = status == "DELETING" or await _rollback(run.provider, hid)
    error.context["orphan_check"] = "rolled_back" if deleted else "rollback_failed"
    error.context["harness_id"] = hid
    raise error


async def _find(run: _Run, *, per_attempt: float | None = None) -> Mapping[str, Any] | None:
    """The listed harness named ``run.name`` (all pages), or ``None``."""
    token: str | None = None
    while True:
        params: dict[str, Any] = {"maxResults": 100}
        if token:
            params["nextToken"] = token
        page = await _call(
            run.provider, "list_harnesses", run.budget, per_attempt=per_attempt, **params
        )
        items = page.get("harnesses")
        if not isinstance(items, list):
            raise ProvisioningError(
                "ListHarnesses returned no harnesses list", code="unexpected_list_response"
            )
        for item in items:
            if isinstance(item, Mapping) and item.get("harnessName") == run.name:
                return item
        token = page.get("nextToken")
        if not token:
            return None


async def _delete_wait(run: _Run) -> None:
    """Wait for a DELETING namesake to disappear (phase ``deleted``)."""
    budget = run.budget
    started = budget.clock()
    polls = 0
    last: str | None = "DELETING"

    def ctx() -> WaitContext:
        return WaitContext(
            harness_id=run.name,
            phase="deleted",
            last_status=last,
            elapsed=budget.clock() - started,
            polls=polls,
        )

    while True:
        try:
            entry = await _find(run)
        except ManagedLoopError as exc:
            logger.warning(
                "agent_core provision could not list harnesses while waiting for %s to be "
                "deleted (%s); proceeding unconfirmed",
                run.name,
                exc.code,
            )
            _stop(run.name, "deleted", "unconfirmed", None, ctx(), caller=run.caller)
            return
        polls += 1
        last = entry.get("status") if entry is not None else None
        logger.debug(
            "agent_core provision poll harness_id=%s phase=deleted status=%s poll_n=%d "
            "elapsed_ms=%d",
            run.name,
            last or "absent",
            polls,
            ctx().elapsed * 1000,
        )
        telemetry.emit(
            "agent_core.provision.poll",
            {"elapsed_ms": ctx().elapsed * 1000, "poll_n": polls},
            {"harness_id": run.name, "status": last, "phase": "deleted"},
            caller=run.caller,
        )
        if entry is None:
            _stop(run.name, "deleted", "ok", None, ctx(), caller=run.caller)
            return
        if last != "DELETING" or not budget.next():
            error = _wait_error(
                "harness_still_deleting",
                f"harness {run.name} is still there (status {last})",
                ctx(),
            )
            _stop(run.name, "deleted", "error", error.code, ctx(), caller=run.caller)
            raise error
        budget.spend()
        await budget.sleep(budget.poll)


async def _harness_status(run: _Run, harness_id: str) -> str | None:
    body = await _call(run.provider, "get_harness", run.budget, harnessId=harness_id)
    status = (body.get("harness") or {}).get("status")
    if not isinstance(status, str):
        raise ProvisioningError(
            "GetHarness returned no status", code="unexpected_get_harness_response"
        )
    return status


async def _endpoint_status(run: _Run, harness_id: str) -> str | None:
    try:
        body = await _call(
            run.provider,
            "get_harness_endpoint",
            run.budget,
            harnessId=harness_id,
            endpointName=run.endpoint_name,
        )
    except APIStatusError as exc:
        if exc.status == 404:
            return None  # not created yet
        raise
    status = (body.get("endpoint") or {}).get("status")
    if not isinstance(status, str):
        raise ProvisioningError(
            "GetHarnessEndpoint returned no status", code="unexpected_get_endpoint_response"
        )
    return status


async def _rollback(provider: ControlPlane, harness_id: str) -> bool:
    """Best-effort delete of a harness this call created; never masks the original error.
    ``True`` when the delete was accepted."""
    try:
        await _call(
            provider,
            "delete_harness",
            None,
            attempts=READ_ATTEMPTS,
            per_attempt=ROLLBACK_ATTEMPT,
            harnessId=harness_id,
        )
    except Exception as exc:
        logger.warning(
            "agent_core provision could not roll back harness %s (%r); it may be orphaned",
            harness_id,
            exc,
        )
        return False
    logger.info("agent_core provision rolled back harness %s", harness_id)
    return True


async def teardown(provider: ControlPlane, handle: Any, *, timeout: float = 30.0) -> dict[str, Any]:
    """Delete the harness (asynchronous on AWS: DELETING for a while). A harness already
    gone counts as torn down. Returns ``{"harness_id", "status"}``."""
    if isinstance(handle, AgentCoreHandle):
        hid = handle.harness_id
    elif isinstance(handle, Mapping) and isinstance(handle.get("harness_id"), str):
        hid = str(handle["harness_id"])
    elif isinstance(handle, Mapping) and isinstance(handle.get("harness_arn"), str):
        hid = harness_id_of(str(handle["harness_arn"]))
    elif isinstance(handle, str):
        hid = harness_id_of(handle) if handle.startswith("arn:") else handle
    elif isinstance(getattr(handle, "harness_id", None), str):  # a HarnessHandle
        hid = str(handle.harness_id)
    else:
        raise InvalidOptionsError(
            "teardown needs an AgentCoreHandle, a harness id or ARN", option="handle"
        )
    budget = WaitBudget.new(timeout)
    try:
        result = await _call(provider, "delete_harness", budget, harnessId=hid)
    except APIStatusError as exc:
        if exc.status == 404:
            return {"harness_id": hid, "status": "absent"}
        raise
    return {"harness_id": hid, "status": (result.get("harness") or {}).get("status")}


class AgentCoreLifecycle:
    """The lifecycle verbs' view of AgentCore (``ml.ensure_agent`` ...): an agent is a
    harness (model, tools and environment folded in), built exactly as :func:`provision`
    builds one (one deadline, the harness then its endpoint, rollback); prune deletes."""

    host = "agentcore"
    policy = AGENTCORE_HARNESS
    agent_kind = "harness"

    def __init__(self, provider: ControlPlane, account: str) -> None:
        self.provider = provider
        self.account = account

    def agent_digest(self, spec: AgentSpec, environment: EnvironmentSpec | None) -> str:
        return harness_digest(spec, _coerce_environment(environment))

    async def build_agent(
        self,
        spec: AgentSpec,
        *,
        name: str,
        digest: str,
        environment: EnvironmentSpec | None,
        options: Mapping[str, Any],
    ) -> HarnessHandle:
        if "name" in options or "name_prefix" in options:
            raise InvalidOptionsError(
                "ensure_agent names the harness <base>_<digest8>; pass name= as the base",
                option="name_prefix",
            )
        given = ProvisionOptions.of({"environment": environment, **options})
        run = prepare(self.provider, spec, given, name=name)
        made = await execute(run)
        return HarnessHandle(
            harness_arn=made.harness_arn, harness_id=made.harness_id, name=name, digest=digest
        )

    async def build_environment(
        self, spec: EnvironmentSpec, *, name: str, digest: str
    ) -> EnvironmentHandle:  # pragma: no cover - refused by the verbs before this
        raise InvalidOptionsError("AgentCore has no separate environments", code="not_supported")

    async def listing(self, kind: str) -> list[Listed]:
        """Every harness (all pages); DELETING ones are listed as not live."""
        out: list[Listed] = []
        token: str | None = None
        budget = WaitBudget.new(LIST_TIMEOUT)
        while True:
            params: dict[str, Any] = {"maxResults": 100}
            if token:
                params["nextToken"] = token
            page = await _call(self.provider, "list_harnesses", budget, **params)
            items = page.get("harnesses")
            if not isinstance(items, list):
                raise ProvisioningError(
                    "ListHarnesses returned no harnesses list", code="unexpected_list_response"
                )
            for item in items:
                if not isinstance(item, Mapping):
                    continue
                hid, name, arn = item.get("harnessId"), item.get("harnessName"), item.get("arn")
                if isinstance(hid, str) and isinstance(name, str) and isinstance(arn, str):
                    out.append(
                        Listed(
                            id=hid,
                            name=name,
                            created_at=_iso(item.get("createdAt")),
                            live=classify(item.get("status")) in ("ready", "creating"),
                            extra={"arn": arn, "status": item.get("status")},
                        )
                    )
            next_token = page.get("nextToken")
            if not next_token or next_token == token:
                return out
            token = str(next_token)

    async def retire(self, kind: str, item: Listed) -> None:
        await teardown(self.provider, item.id)


LIST_TIMEOUT = 60.0  # seconds for a whole listing: pages of 100, each bounded by the budget


def _iso(value: Any) -> str:
    """botocore parses timestamps to ``datetime``; the verbs sort ISO-8601 strings."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value, dt.UTC).isoformat()
    return value if isinstance(value, str) else ""
