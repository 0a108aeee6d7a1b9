"""Harness provisioning under one monotonic deadline (reference §3.8-3.11, v0.12 README).

``provision`` validates everything first (``endpoint_name``, ``execution_role_arn``,
``timeout``, the specs: :func:`prepare`), then: CreateHarness → wait for the harness to be
READY → wait for the endpoint invokes will use to be READY, all under **one**
:class:`~._waits.WaitBudget` built at entry (:func:`execute`). The jobs live beside it:

* :mod:`._waits`: the deadline, the budgeted requests and the polls;
* :mod:`._harness_body`: the spec as the CreateHarness request (name, digest, body);
* :mod:`._create`: create or adopt, and the rollback of a harness this call created;
* :mod:`._teardown`: delete; :mod:`._lifecycle`: the lifecycle verbs' adapter.

An endpoint is only polled once its harness is READY. A harness *this call created* is
deleted if anything after the create fails, the caller's cancellation included (shielded,
with its own small budget, never masking the original error); an adopted one never is.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from managedloop import _validate
from managedloop.config import MISSING
from managedloop.errors import InvalidOptionsError
from managedloop.providers.agentcore._create import (
    Run,
    create_or_adopt,
    endpoint_status,
    find,
    harness_status,
    rollback,
)
from managedloop.providers.agentcore._harness_body import (
    base_name,
    coerce_environment,
    coerce_spec,
    create_body,
    harness_digest,
    harness_name,
)
from managedloop.providers.agentcore._ids import AgentCoreHandle, validate_endpoint_name
from managedloop.providers.agentcore._versions import (
    DIGEST_TAG,
    ensure_endpoint,
    update_if_changed,
)
from managedloop.providers.agentcore._waits import (
    Clock,
    ControlPlane,
    Progress,
    Sleep,
    WaitBudget,
    call,
    wait,
)

__all__ = ["ProvisionOptions", "execute", "prepare", "provision"]

_ROLE_RE = re.compile(r"arn:aws(-[^:]+)?:iam::\d{12}:role/[\w+=,.@/-]+")  # fullmatch


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
    update: bool = False
    """Name the harness for its base alone and make a changed spec a new version of it
    (UpdateHarness), not a new harness; see :mod:`._versions`."""
    create_endpoint: bool = False
    """Create ``endpoint_name`` (not ``DEFAULT``) if absent, pinned to the version made,
    or move an existing one to it."""

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
) -> Run:
    """Every check of :func:`provision`, before any request; ``name`` (from
    ``ensure_agent``) replaces the derived harness name."""
    agent = coerce_spec(spec)
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
    env = coerce_environment(options.environment)
    clock, sleep, progress = options.clock, options.sleep, options.progress
    if not callable(clock) or not callable(sleep):
        raise InvalidOptionsError("clock and sleep must be callables", option="clock")
    if progress is not None and not callable(progress):
        raise InvalidOptionsError("progress must be a callable", option="progress")
    budget = WaitBudget.new(
        options.timeout, options.poll_interval, options.max_polls, clock=clock, sleep=sleep
    )
    for flag in ("update", "create_endpoint"):
        if not isinstance(getattr(options, flag), bool):
            raise InvalidOptionsError(f"{flag} must be True or False", option=flag)
    if options.create_endpoint and endpoint_name == "DEFAULT":
        raise InvalidOptionsError(
            "create_endpoint needs an endpoint_name other than DEFAULT (the service makes "
            "DEFAULT with every harness)",
            option="create_endpoint",
        )
    digest = harness_digest(agent, env)
    tags = dict(options.tags or {})
    if options.update:
        tags[DIGEST_TAG] = digest[:16]
    if name is None:
        name = (
            base_name(agent, options.name_prefix)
            if options.update
            else harness_name(agent, options.name_prefix, env)
        )
    body = create_body(agent, name=name, execution_role_arn=role, environment=env, tags=tags)
    return Run(
        provider=provider,
        budget=budget,
        name=name,
        body=body,
        endpoint_name=endpoint_name,
        caller=dict(options.telemetry_metadata or {}),
        progress=progress,
        digest=digest,
        update=options.update,
        create_endpoint=options.create_endpoint,
    )


async def execute(run: Run) -> AgentCoreHandle:
    """Create or adopt ``run``'s harness and wait for it and its endpoint (one deadline);
    a harness this call created is rolled back if anything after the create fails."""
    budget, provider, endpoint_name = run.budget, run.provider, run.endpoint_name
    found = await _existing(run) if run.update else None
    if found is not None:
        created = False
        handle, _ = await update_if_changed(provider, budget, found, run.body, run.digest)
    else:
        created, handle = await create_or_adopt(run)
    try:
        await wait(
            budget,
            phase="ready",
            harness_id=handle.harness_id,
            fetch=lambda: harness_status(run, handle.harness_id),
            caller=run.caller,
            progress=run.progress,
        )
        if (run.update or run.create_endpoint) and handle.harness_version is None:
            handle = await _with_version(run, handle)
        if run.create_endpoint:
            await ensure_endpoint(provider, budget, handle, endpoint_name)
        await wait(
            budget,
            phase="endpoint",
            harness_id=handle.harness_id,
            fetch=lambda: endpoint_status(run, handle.harness_id),
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
                await rollback(provider, handle.harness_id)
        raise
    return handle


async def _existing(run: Run) -> AgentCoreHandle | None:
    """The live harness named ``run.name`` (``update=True``), or ``None``."""
    entry = await find(run)
    if entry is None or entry.get("status") not in ("READY", "UPDATING", "CREATING"):
        return None
    arn, hid = entry.get("arn"), entry.get("harnessId")
    if not isinstance(arn, str) or not isinstance(hid, str):
        return None
    return AgentCoreHandle(harness_arn=arn, harness_id=hid, harness_name=run.name)


async def _with_version(run: Run, handle: AgentCoreHandle) -> AgentCoreHandle:
    body = await call(run.provider, "get_harness", run.budget, harnessId=handle.harness_id)
    version = (body.get("harness") or {}).get("harnessVersion")
    return AgentCoreHandle(
        harness_arn=handle.harness_arn,
        harness_id=handle.harness_id,
        harness_name=handle.harness_name,
        harness_version=version if isinstance(version, str) else None,
    )
