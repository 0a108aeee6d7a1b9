"""Create or adopt a harness, and roll back one this call created.

Invariants relied on:

* a harness *this call created* is deleted if anything after the create fails, the
  caller's cancellation included (:func:`rollback`: shielded by the caller, with its own
  small budget, never masking the original error); an adopted one never is;
* a CreateHarness that times out, drops or answers 5xx may have created the harness
  anyway: it is looked up by its deterministic name and, if there, treated as this call's
  (waited on with budget left, deleted at once without), so it is not left orphaned;
* a ``409`` on create means the name is taken: a live namesake is adopted, a DELETING one
  is waited out (``harness_still_deleting``) and re-created, anything else is a
  ``harness_name_conflict``;
* a 404 from ``GetHarnessEndpoint`` means "not created yet".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from managedloop import telemetry
from managedloop.errors import (
    APIStatusError,
    MalformedResponseError,
    ManagedLoopError,
    ProvisioningError,
    TransportError,
)
from managedloop.providers.agentcore._ids import AgentCoreHandle
from managedloop.providers.agentcore._waits import (
    READ_ATTEMPTS,
    ControlPlane,
    Progress,
    WaitBudget,
    WaitContext,
    call,
    stop,
    wait_error,
)

__all__ = ["Run", "create_or_adopt", "endpoint_status", "find", "harness_status", "rollback"]

logger = logging.getLogger("managedloop.agentcore.provision")

ROLLBACK_ATTEMPT = 10.0  # seconds per DeleteHarness attempt during rollback (3 attempts = 30 s):
# independent of the spent budget, since rollback runs exactly when that budget is gone
WRITE_ATTEMPTS = 1  # CreateHarness is not: one attempt (a retry could create twice)


@dataclass(slots=True)
class Run:
    provider: ControlPlane
    budget: WaitBudget
    name: str
    body: dict[str, Any]
    endpoint_name: str
    caller: dict[str, Any] = field(default_factory=dict)
    progress: Progress | None = None
    digest: str = ""
    update: bool = False
    """A changed spec on this name is a new version (:mod:`._versions`)."""
    create_endpoint: bool = False


async def _create(run: Run) -> AgentCoreHandle:
    result = await call(
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


async def create_or_adopt(run: Run) -> tuple[bool, AgentCoreHandle]:
    """``(created_by_this_call, handle)``."""
    try:
        return True, await _create_checked(run)
    except APIStatusError as exc:
        if exc.status != 409:
            raise
    entry = await find(run)
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
            raise wait_error(
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


async def _create_checked(run: Run) -> AgentCoreHandle:
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


async def _claim_after_failed_create(run: Run, error: ManagedLoopError) -> AgentCoreHandle:
    """A CreateHarness that timed out or failed with a 5xx may still have created the
    harness server-side. Look it up by its (content-derived, so deterministic) name: if it
    is there, this call made it. With budget left, carry on with it (it is ours, so it is
    rolled back if a wait fails); with none left, delete it now and raise ``error``. The
    lookup and that delete run on the rollback's own small budget when the create spent
    the deadline, since they are the rollback of this create."""
    per_attempt = None if run.budget.next() else ROLLBACK_ATTEMPT
    try:
        entry = await find(run, per_attempt=per_attempt)
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
    deleted = status == "DELETING" or await rollback(run.provider, hid)
    error.context["orphan_check"] = "rolled_back" if deleted else "rollback_failed"
    error.context["harness_id"] = hid
    raise error


async def find(run: Run, *, per_attempt: float | None = None) -> Mapping[str, Any] | None:
    """The listed harness named ``run.name`` (all pages), or ``None``."""
    token: str | None = None
    while True:
        params: dict[str, Any] = {"maxResults": 100}
        if token:
            params["nextToken"] = token
        page = await call(
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


async def _delete_wait(run: Run) -> None:
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
            entry = await find(run)
        except ManagedLoopError as exc:
            logger.warning(
                "agent_core provision could not list harnesses while waiting for %s to be "
                "deleted (%s); proceeding unconfirmed",
                run.name,
                exc.code,
            )
            stop(run.name, "deleted", "unconfirmed", None, ctx(), caller=run.caller)
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
            stop(run.name, "deleted", "ok", None, ctx(), caller=run.caller)
            return
        if last != "DELETING" or not budget.next():
            error = wait_error(
                "harness_still_deleting",
                f"harness {run.name} is still there (status {last})",
                ctx(),
            )
            stop(run.name, "deleted", "error", error.code, ctx(), caller=run.caller)
            raise error
        budget.spend()
        await budget.sleep(budget.poll)


async def harness_status(run: Run, harness_id: str) -> str | None:
    body = await call(run.provider, "get_harness", run.budget, harnessId=harness_id)
    status = (body.get("harness") or {}).get("status")
    if not isinstance(status, str):
        raise ProvisioningError(
            "GetHarness returned no status", code="unexpected_get_harness_response"
        )
    return status


async def endpoint_status(run: Run, harness_id: str) -> str | None:
    try:
        body = await call(
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


async def rollback(provider: ControlPlane, harness_id: str) -> bool:
    """Best-effort delete of a harness this call created; never masks the original error.
    ``True`` when the delete was accepted."""
    try:
        await call(
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
