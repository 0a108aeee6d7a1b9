"""The lifecycle verbs' view of AgentCore (``ml.ensure_agent``, ``ml.prune_agents`` ...)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from managedloop.errors import InvalidOptionsError, ProvisioningError
from managedloop.providers.agentcore._harness_body import coerce_environment, harness_digest
from managedloop.providers.agentcore._provision import ProvisionOptions, execute, prepare
from managedloop.providers.agentcore._teardown import teardown
from managedloop.providers.agentcore._versions import harness_versions
from managedloop.providers.agentcore._waits import ControlPlane, WaitBudget, call, classify
from managedloop.provisioning.handles import EnvironmentHandle, HarnessHandle
from managedloop.provisioning.lifecycle import Listed
from managedloop.provisioning.names import AGENTCORE_HARNESS
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec

__all__ = ["AgentCoreLifecycle"]


class AgentCoreLifecycle:
    """The lifecycle verbs' view of AgentCore (``ml.ensure_agent`` ...): an agent is a
    harness (model, tools and environment folded in), built exactly as :func:`provision`
    builds one (one deadline, the harness then its endpoint, rollback); prune deletes.
    With ``update=True`` the harness is named for its base and a changed spec is a new
    version (UpdateHarness); :meth:`version_listing` lists them for prune."""

    host = "agentcore"
    policy = AGENTCORE_HARNESS
    agent_kind = "harness"

    def __init__(self, provider: ControlPlane, account: str) -> None:
        self.provider = provider
        self.account = account

    def agent_digest(self, spec: AgentSpec, environment: EnvironmentSpec | None) -> str:
        return harness_digest(spec, coerce_environment(environment))

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
            harness_arn=made.harness_arn,
            harness_id=made.harness_id,
            name=name,
            digest=digest,
            harness_version=made.harness_version if given.update else None,
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
            page = await call(self.provider, "list_harnesses", budget, **params)
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

    async def version_listing(self, name: str) -> list[Listed]:
        """Every version (ListHarnessVersions, all pages) of the live harness called
        exactly ``name``; ``[]`` when there is none."""
        found = [i for i in await self.listing("harness") if i.name == name and i.live]
        out: list[Listed] = []
        for harness in found:
            for item in await harness_versions(self.provider, harness.id):
                version = item.get("harnessVersion")
                if not isinstance(version, str):
                    continue
                out.append(
                    Listed(
                        id=harness.id,
                        name=f"{name}@{version}",
                        created_at=_iso(item.get("createdAt")),
                        live=classify(item.get("status")) in ("ready", "creating"),
                        extra={"arn": harness.extra.get("arn"), "status": item.get("status")},
                        version=version,
                    )
                )
        return out

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
