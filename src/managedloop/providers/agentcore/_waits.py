"""The deadline of a provision call and the polls that spend it (reference §3.8-3.11).

:class:`WaitBudget` is the **one** monotonic deadline a provision call builds at entry. It
bounds every wait *and* every request: each control-plane attempt (:func:`call`) gets a
read timeout of ``min(configured, remaining) / attempts``, recomputed per call, so no wait
outlives its deadline by more than one request's share. (Connect time and TLS setup are
bounded separately by the client's connect timeout.)

Harness and endpoint statuses share one vocabulary (:func:`classify`): ``READY`` is done,
``CREATING``/``UPDATING`` may still get there, ``DELETING`` never will, ``*_FAILED`` is
final, and anything else is named and fatal (never polled). :func:`wait` polls one of them
until READY and raises the phase's named error otherwise.

Every poll and every wait's end is logged (``managedloop.agentcore.provision``) and emitted
as telemetry (``agent_core.provision.poll|stop|exception``), so a failed provision can be
diagnosed from the log alone.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from managedloop import _validate, telemetry
from managedloop._log import fields
from managedloop.config import MISSING
from managedloop.errors import InvalidOptionsError, ManagedLoopError, ProvisioningError
from managedloop.providers.agentcore._clients import CONTROL_READ_TIMEOUT
from managedloop.providers.agentcore._errors import retryable

__all__ = [
    "Clock",
    "ControlPlane",
    "Progress",
    "Sleep",
    "WaitBudget",
    "WaitContext",
    "call",
    "classify",
    "stop",
    "wait",
    "wait_error",
]

logger = logging.getLogger("managedloop.agentcore.provision")

DEFAULT_TIMEOUT = 365.0  # seconds: the reference default (5 s x 73 observations); a harness is
# typically READY in ~11 s but its DEFAULT endpoint took 2 m 31 s live
DEFAULT_POLL = 5.0  # seconds between polls when no timeout is given (legacy count semantics)
DEFAULT_MAX_POLLS = 72  # polls after the first look: 73 looks x 5 s = DEFAULT_TIMEOUT
MIN_POLL = 0.05  # seconds; a derived cadence never hammers the control plane faster
MAX_POLL = 5.0  # seconds; ... nor sleeps so long that a short budget only looks once
MIN_ATTEMPT = 0.05  # seconds; a spent budget still gets one short attempt, never a zero timeout
READ_ATTEMPTS = 3  # GET/LIST/DELETE are idempotent: up to 3 attempts within the budget
WRITE_ATTEMPTS = 1  # CreateHarness is not: one attempt (a retry could create twice)

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


def wait_error(code: str, message: str, ctx: WaitContext) -> ProvisioningError:
    return ProvisioningError(message, code=code, **ctx.as_context())


async def call(
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


async def wait(
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
                    raise wait_error(
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
                report(progress, ctx())
            kind = classify(status) if status is not None else "creating"
            what = f"endpoint {endpoint_name}" if phase == "endpoint" else f"harness {harness_id}"
            if kind == "ready":
                stop(harness_id, phase, "ok", None, ctx(), caller=caller)
                return
            if kind == "failed":
                raise wait_error(failed_tag, f"{what} is {status}", ctx())
            if kind == "terminating":
                raise wait_error(terminating_tag, f"{what} is DELETING", ctx())
            if kind == "unknown":
                raise wait_error(unknown_tag, f"{what} has unknown status {status!r}", ctx())
            if not budget.next():
                raise wait_error(
                    timeout_tag,
                    f"{what} not READY within the budget (last status {status or 'absent'})",
                    ctx(),
                )
            budget.spend()
            await budget.sleep(budget.poll)
    except ProvisioningError as exc:
        if exc.context.get("phase") == phase:
            stop(harness_id, phase, "error", exc.code, ctx(), caller=caller)
        raise
    except ManagedLoopError as exc:
        stop(harness_id, phase, "error", "provider_error", ctx(), caller=caller, detail=exc.code)
        raise
    except anyio.get_cancelled_exc_class():
        stop(harness_id, phase, "cancelled", None, ctx(), caller=caller)
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


def report(progress: Progress, ctx: WaitContext) -> None:
    """A progress callback never breaks a provision: its failure is logged."""
    try:
        progress(ctx)
    except Exception:
        logger.exception("agent_core provision progress callback failed")


def stop(
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
