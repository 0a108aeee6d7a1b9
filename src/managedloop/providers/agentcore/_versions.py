"""Harness versions and endpoints: UpdateHarness on a changed spec, endpoints on request.

With ``provision(..., update=True)`` a harness is named for its base alone
(``<prefix>_<spec name>``, no digest suffix), and the spec's digest is the harness tag
:data:`DIGEST_TAG`. Provisioning a spec on a base that already has a harness then:

* finds it by name; the same digest tag means the same spec: adopted, no new version;
* a different (or no) digest tag means a changed spec: ``UpdateHarness`` with the new
  body makes a new **version** (the response's ``harnessVersion``), the tag is moved to
  the new digest (``TagResource``), and the wait for READY is the usual one. A member the
  new spec leaves unset is reset where the service lets it be (``tools``, ``skills``,
  ``hooks`` to empty; ``memory``, ``environmentArtifact``, ``authorizerConfiguration``
  unset through their ``optionalValue`` wrappers), so the version is the spec, not a merge.

An endpoint other than ``DEFAULT`` is created by provisioning when asked
(``create_endpoint=True``) and pinned to the version just made (``targetVersion``); an
existing one is moved to it (``UpdateHarnessEndpoint``). ``DEFAULT`` follows the latest
version by itself. The provider's ``create_endpoint``/``update_endpoint``/
``list_endpoints``/``delete_endpoint``/``harness_versions`` are the same calls by hand.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from managedloop.errors import APIStatusError, InvalidOptionsError, ProvisioningError
from managedloop.providers.agentcore._ids import (
    AgentCoreHandle,
    harness_id_of,
    validate_endpoint_name,
)
from managedloop.providers.agentcore._waits import READ_ATTEMPTS, ControlPlane, WaitBudget, call

__all__ = [
    "DIGEST_TAG",
    "change_endpoint",
    "delete_endpoint",
    "ensure_endpoint",
    "harness_versions",
    "list_endpoints",
    "update_body",
    "update_if_changed",
]

logger = logging.getLogger("managedloop.agentcore.provision")

DIGEST_TAG = "managedloop:digest"  # the first 16 hex of the spec's harness digest
_WRAPPED = ("memory", "environmentArtifact", "authorizerConfiguration")
_RESET_LISTS = ("tools", "skills", "hooks")
_CALL_TIMEOUT = 30.0  # seconds for one hand-made endpoint/version call (3 attempts)


def update_body(create: Mapping[str, Any], harness_id: str) -> dict[str, Any]:
    """The UpdateHarness parameters equivalent to a CreateHarness body (see the module
    docstring: unset members are reset, the optional ones through ``optionalValue``)."""
    body: dict[str, Any] = {"harnessId": harness_id}
    for key, value in create.items():
        if key in ("harnessName", "tags"):
            continue
        body[key] = {"optionalValue": value} if key in _WRAPPED else value
    for key in _WRAPPED:
        body.setdefault(key, {})
    for key in _RESET_LISTS:
        body.setdefault(key, [])
    return body


async def update_if_changed(
    provider: ControlPlane,
    budget: WaitBudget,
    handle: AgentCoreHandle,
    create: Mapping[str, Any],
    digest: str,
) -> tuple[AgentCoreHandle, bool]:
    """``(handle with its version, updated)``: a new version when the harness's digest
    tag is not ``digest``'s, else the harness as it is."""
    tags = await call(provider, "list_tags_for_resource", budget, resourceArn=handle.harness_arn)
    found = tags.get("tags") or {}
    if found.get(DIGEST_TAG) == digest[:16]:
        current = await call(provider, "get_harness", budget, harnessId=handle.harness_id)
        version = (current.get("harness") or {}).get("harnessVersion")
        logger.info("agent_core provision: %s already runs this spec", handle.harness_name)
        return _versioned(handle, version), False
    result = await call(
        provider,
        "update_harness",
        budget,
        attempts=1,  # not idempotent without our client token: one attempt
        **update_body(create, handle.harness_id),
    )
    version = (result.get("harness") or {}).get("harnessVersion")
    if not isinstance(version, str):
        raise ProvisioningError(
            "UpdateHarness returned no harnessVersion", code="unexpected_update_response"
        )
    await call(
        provider,
        "tag_resource",
        budget,
        resourceArn=handle.harness_arn,
        tags={DIGEST_TAG: digest[:16]},
    )
    logger.info("agent_core provision updated harness %s to version %s", handle.harness_id, version)
    return _versioned(handle, version), True


def _versioned(handle: AgentCoreHandle, version: Any) -> AgentCoreHandle:
    return AgentCoreHandle(
        harness_arn=handle.harness_arn,
        harness_id=handle.harness_id,
        harness_name=handle.harness_name,
        harness_version=version if isinstance(version, str) else None,
    )


async def ensure_endpoint(
    provider: ControlPlane, budget: WaitBudget, handle: AgentCoreHandle, name: str
) -> str:
    """Create endpoint ``name`` pinned to ``handle``'s version, or move it there;
    ``"created"`` or ``"updated"``."""
    target: dict[str, Any] = (
        {"targetVersion": handle.harness_version} if handle.harness_version else {}
    )
    try:
        await call(
            provider,
            "get_harness_endpoint",
            budget,
            harnessId=handle.harness_id,
            endpointName=name,
        )
    except APIStatusError as exc:
        if exc.status != 404:
            raise
        await call(
            provider,
            "create_harness_endpoint",
            budget,
            attempts=1,
            harnessId=handle.harness_id,
            endpointName=name,
            **target,
        )
        return "created"
    if target:
        await call(
            provider,
            "update_harness_endpoint",
            budget,
            harnessId=handle.harness_id,
            endpointName=name,
            **target,
        )
    return "updated"


def _hid(harness: Any) -> str:
    if isinstance(harness, AgentCoreHandle):
        return harness.harness_id
    if isinstance(harness, str):
        return harness_id_of(harness) if harness.startswith("arn:") else harness
    hid = getattr(harness, "harness_id", None)
    if isinstance(hid, str):
        return hid
    raise InvalidOptionsError("a harness is a handle, a harness id or an ARN", option="harness")


async def change_endpoint(
    provider: ControlPlane,
    harness: Any,
    name: str,
    *,
    create: bool,
    target_version: str | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    """CreateHarnessEndpoint (``create``) or UpdateHarnessEndpoint with the members given;
    the endpoint the service returns."""
    validate_endpoint_name(name)
    params: dict[str, Any] = {"harnessId": _hid(harness), "endpointName": name}
    if target_version is not None:
        params["targetVersion"] = target_version
    if description is not None:
        params["description"] = description
    operation = "create_harness_endpoint" if create else "update_harness_endpoint"
    attempts = 1 if create else READ_ATTEMPTS  # a create is not idempotent without a token
    budget = WaitBudget.new(_CALL_TIMEOUT)
    result = await call(provider, operation, budget, attempts=attempts, **params)
    return dict(result.get("endpoint") or {})


async def list_endpoints(provider: ControlPlane, harness: Any) -> list[dict[str, Any]]:
    return await _pages(provider, "list_harness_endpoints", "endpoints", _hid(harness))


async def harness_versions(provider: ControlPlane, harness: Any) -> list[dict[str, Any]]:
    """Every version of a harness (ListHarnessVersions, all pages), as the service lists
    them (``harnessVersion``, ``status``, ``createdAt``...)."""
    return await _pages(provider, "list_harness_versions", "harnessVersions", _hid(harness))


async def delete_endpoint(provider: ControlPlane, harness: Any, name: str) -> dict[str, Any]:
    validate_endpoint_name(name)
    result = await call(
        provider,
        "delete_harness_endpoint",
        WaitBudget.new(_CALL_TIMEOUT),
        harnessId=_hid(harness),
        endpointName=name,
    )
    return dict(result.get("endpoint") or {})


async def _pages(
    provider: ControlPlane, operation: str, key: str, hid: str
) -> list[dict[str, Any]]:
    budget = WaitBudget.new(_CALL_TIMEOUT)
    out: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {"harnessId": hid}
        if token:
            params["nextToken"] = token
        page = await call(provider, operation, budget, **params)
        out += [dict(item) for item in page.get(key) or [] if isinstance(item, Mapping)]
        next_token = page.get("nextToken")
        if not next_token or next_token == token:
            return out
        token = str(next_token)
