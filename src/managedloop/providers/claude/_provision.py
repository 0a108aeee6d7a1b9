"""Provisioning on Claude Managed Agents: the handle, and creating and archiving agents
and environments.

:func:`provision` is a few named steps, all checks before any request:

1. :func:`_base_name` and :func:`_environment_target` check the spec and ``environment=``
   (an environment id, or a spec to create one from);
2. :func:`_agent_body` builds the create-agent request (named
   ``<spec.name>_<digest[:8]>``, the spec's digest in ``metadata``);
3. :func:`_create_agent`; with an environment id given, that is all (the handle does not
   own the environment);
4. :func:`_create_environment` from :func:`_environment_body`, archiving the agent again
   if the environment cannot be made (the rollback's outcome is in the error).

:func:`teardown` archives a handle's agent and, if provisioning made it, its environment.
Every function takes an :class:`~managedloop.providers.claude._api.Api` (a client and its
settings) and nothing of the provider: the provider holds the client lease around each
call (see ``_leased`` in :mod:`~managedloop.providers.claude._provider`).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from managedloop import _validate
from managedloop.errors import (
    APIStatusError,
    AuthenticationError,
    InvalidOptionsError,
    ManagedLoopError,
    ProvisioningError,
)
from managedloop.providers.claude._api import Api
from managedloop.providers.claude._ids import check_id
from managedloop.provisioning.handles import AgentHandle, EnvironmentHandle
from managedloop.provisioning.lifecycle import Listed
from managedloop.provisioning.names import CLAUDE
from managedloop.provisioning.runtimes import required_hosts
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec, refuse_fields

logger = logging.getLogger("managedloop.providers.claude")

__all__ = [
    "DEFAULT_ENVIRONMENT_CONFIG",
    "DEFAULT_MODEL",
    "ClaudeHandle",
    "ClaudeLifecycle",
    "account_of",
    "archive",
    "check_budget",
    "coerce_environment",
    "create_or_adopt",
    "id_of",
    "list_records",
    "normalize_model_id",
    "provision",
    "teardown",
    "wire_config",
]

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_ENVIRONMENT_CONFIG: dict[str, Any] = {
    "type": "cloud",
    "networking": {"type": "unrestricted"},
}


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaudeHandle:
    """A provisioned agent and environment. JSON round-trips with ``to_dict``/``from_dict``."""

    agent_id: str
    environment_id: str
    name: str | None = None
    """The provider-side agent name (``<spec.name>_<digest8>``)."""
    digest: str | None = None
    """The spec's content digest."""
    agent_version: int | None = None
    owns_environment: bool = True
    """Whether provisioning created the environment (teardown archives only what it made)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "environment_id": self.environment_id,
            "name": self.name,
            "digest": self.digest,
            "agent_version": self.agent_version,
            "owns_environment": self.owns_environment,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def normalize_model_id(model: str) -> str:
    """``"anthropic:claude-sonnet-5-5"`` -> ``"claude-sonnet-5-5"``; bare ids unchanged."""
    return model.split(":", 1)[1] if ":" in model else model


def id_of(value: Any, key: str) -> str | None:
    """``key`` (``agent_id`` / ``environment_id``) of a :class:`ClaudeHandle` or its dict;
    a string is taken as that id itself. A present id is checked against the id alphabet
    (it reaches URL paths), so a bad one raises ``invalid_agent_id`` /
    ``invalid_environment_id`` here, before any request."""
    if isinstance(value, str):
        found: Any = value
    elif isinstance(value, ClaudeHandle):
        found = getattr(value, key)
    elif isinstance(value, Mapping):
        found = value.get(key)
        if found is None:
            return None
    elif isinstance(getattr(value, key, None), str):  # AgentHandle / EnvironmentHandle
        found = getattr(value, key)
    else:
        return None
    return check_id(key.removesuffix("_id"), found, option=key)


def coerce_environment(value: Any) -> EnvironmentSpec | None:
    """``environment=`` as a spec to create one from: an :class:`EnvironmentSpec`, or a
    mapping of its fields (unknown keys go into ``config``: ``EnvironmentSpec.coerce``);
    ``None`` stays ``None``. AgentCore-only fields (``variables``, ``filesystems``) are
    refused: a Claude environment has no such setting."""
    if value is None or isinstance(value, EnvironmentSpec):
        spec = value
    elif isinstance(value, Mapping) and "environment_id" not in value:
        spec = EnvironmentSpec.coerce(value)
    else:
        raise InvalidOptionsError(
            "environment must be an EnvironmentSpec, a mapping, a handle or an environment id",
            code="invalid_environment_spec",
            option="environment",
        )
    if spec is not None and (spec.variables or spec.filesystems):
        raise InvalidOptionsError(
            "variables and filesystems are AgentCore settings; a Claude environment has "
            "neither (config carries its type, networking and packages)",
            code="invalid_environment_spec",
            option="variables" if spec.variables else "filesystems",
        )
    return spec


def wire_config(spec: EnvironmentSpec | None) -> dict[str, Any]:
    """The environment ``config`` sent to the host: ``spec.config`` verbatim (default: cloud,
    unrestricted networking), except that with declared runtimes and ``networking.type ==
    "limited"`` the hosts the bootstrap script needs are appended to
    ``networking.allowed_hosts`` (existing ones first, no duplicates). ``runtimes`` never
    reach the wire."""
    config = (
        dict(spec.config) if spec is not None and spec.config else dict(DEFAULT_ENVIRONMENT_CONFIG)
    )
    networking = config.get("networking")
    if (
        spec is not None
        and spec.runtimes
        and isinstance(networking, Mapping)
        and networking.get("type") == "limited"
    ):
        existing = networking.get("allowed_hosts") or []
        hosts = list(dict.fromkeys([*existing, *required_hosts(spec.runtimes)]))
        config["networking"] = {**networking, "allowed_hosts": hosts}
    return config


# -- provision --------------------------------------------------------------------------
async def provision(
    api: Api,
    spec: AgentSpec,
    *,
    environment: Any = None,
    name: str | None = None,
    **options: Any,
) -> ClaudeHandle:
    """Create an agent (and an environment) for ``spec``; roll the agent back if the
    environment fails (see the module docstring for the steps)."""
    _validate.no_unknown_keywords("provision", options, ("environment", "name"))
    base = _base_name(spec)
    env_id, env_spec = _environment_target(environment)
    digest = spec.digest
    agent_name = name or f"{base}_{digest[:8]}"
    agent = await _create_agent(api, _agent_body(spec, agent_name, digest))
    if env_id is None:
        env_id = await _create_environment(
            api,
            _environment_body(env_spec, agent_name),
            agent_id=agent.id if not agent.adopted else None,
        )
        owns_environment = True
    else:
        owns_environment = False
    return ClaudeHandle(
        agent_id=agent.id,
        environment_id=env_id,
        name=agent_name,
        digest=digest,
        agent_version=agent.version,
        owns_environment=owns_environment,
    )


def _base_name(spec: Any) -> str:
    """The spec's own name (``invalid_agent_spec`` for a non-spec or a spec without one)."""
    if not isinstance(spec, AgentSpec):
        raise InvalidOptionsError("provision needs an AgentSpec", code="invalid_agent_spec")
    try:
        return spec.require_name()
    except InvalidOptionsError as exc:
        raise InvalidOptionsError(exc.message, code="invalid_agent_spec", option="name") from None


def _environment_target(environment: Any) -> tuple[str | None, EnvironmentSpec | None]:
    """An existing environment's id (a handle or a raw id), or the spec to create one
    from (``None``: the default cloud environment)."""
    if isinstance(environment, str | ClaudeHandle):
        env_id = id_of(environment, "environment_id")
        if env_id is not None:
            return env_id, None
    return None, coerce_environment(environment)


def _agent_body(spec: AgentSpec, agent_name: str, digest: str) -> dict[str, Any]:
    """The create-agent request: the spec's model, system prompt and custom tools."""
    settings = _model_settings(spec)
    model = spec.model or spec.model_config.get("model") or DEFAULT_MODEL
    if not isinstance(model, str):
        raise InvalidOptionsError("the Claude model must be a model id string", option="model")
    tools = [
        {
            "type": "custom",
            "name": d.name,
            "description": d.description,
            "input_schema": d.input_schema,
        }
        for d in spec.tool_definitions()
    ]
    tools += [dict(t) for t in spec.host_tools]  # toolsets and their permission policies
    if spec.timeout_seconds is not None:
        raise InvalidOptionsError(
            "timeout_seconds is an AgentCore harness setting; Claude agents have none "
            "(bound a Claude session with run(timeout=...) or a session budget)",
            option="timeout_seconds",
        )
    refuse_fields(spec, "claude", {"harness_config": "AgentCore harness settings"})
    model_id = normalize_model_id(model)
    options = {
        **settings,
        **{
            k: v
            for k, v in (
                ("effort", spec.effort),
                ("speed", spec.speed),
                ("inference_geo", spec.inference_geo),
            )
            if v is not None
        },
    }
    _check_mcp(spec)
    body: dict[str, Any] = {
        "name": agent_name,
        "model": {"id": model_id, **options} if options else model_id,
        "tools": tools,
        "metadata": {**spec.metadata, "managedloop_digest": digest[:16]},
    }
    if spec.mcp_servers:
        body["mcp_servers"] = [
            {"type": "url", "name": name, "url": url} for name, url in spec.mcp_servers.items()
        ]
    if spec.skills:
        body["skills"] = [dict(k) for k in spec.skills]
    if spec.execution_identity is not None:
        body["execution_identity"] = dict(spec.execution_identity)
    if spec.system_prompt is not None:
        body["system"] = spec.system_prompt
    if spec.description is not None:
        body["description"] = spec.description
    return body


MODEL_CONFIG_KEYS = ("model", "effort", "speed", "inference_geo")
"""The ``AgentSpec.model_config`` keys a Claude agent takes: ``model`` (the id) and the
members of the create-agent ``model`` object (``BetaManagedAgentsModelConfigParams``)."""


def _model_settings(spec: AgentSpec) -> dict[str, Any]:
    """``model_config``'s ``effort``/``speed``/``inference_geo`` for the ``model`` object;
    any other key, or one that disagrees with the spec's own field, is refused (before any
    request, naming the host and the keys)."""
    config = spec.model_config
    unknown = sorted(k for k in config if k not in MODEL_CONFIG_KEYS)
    if unknown:
        raise InvalidOptionsError(
            f"AgentSpec.model_config key(s) {', '.join(map(repr, unknown))}: the claude host "
            f"cannot take them (a Claude agent's model takes {', '.join(MODEL_CONFIG_KEYS)})",
            code="unsupported_spec_field",
            option="model_config",
            host="claude",
            keys=unknown,
        )
    out: dict[str, Any] = {}
    for key in MODEL_CONFIG_KEYS:
        if key not in config:
            continue
        own = getattr(spec, key)
        if own is not None and own != config[key]:
            raise InvalidOptionsError(
                f"AgentSpec.{key}={own!r} and model_config[{key!r}]={config[key]!r} disagree: "
                "set one",
                code="invalid_agent_spec",
                option="model_config",
                host="claude",
            )
        if key != "model":
            out[key] = config[key]
    return out


def _check_mcp(spec: AgentSpec) -> None:
    """Every ``mcp_toolset`` names a server of ``spec.mcp_servers`` and every server is
    used by one (the API refuses both; here it fails before any request, naming it)."""
    used = {
        str(t.get("mcp_server_name")) for t in spec.host_tools if t.get("type") == "mcp_toolset"
    }
    declared = set(spec.mcp_servers)
    for name in sorted(n for n in used if n not in declared):
        raise InvalidOptionsError(
            f"mcp_toolset({name!r}) names no server of AgentSpec.mcp_servers (declare it: "
            f"mcp_servers={{{name!r}: 'https://...'}})",
            option="mcp_servers",
        )
    for name in sorted(declared - used):
        raise InvalidOptionsError(
            f"MCP server {name!r} is declared but no mcp_toolset({name!r}) in host_tools "
            "uses it (the host refuses unused servers)",
            option="mcp_servers",
        )


async def _create_agent(api: Api, body: dict[str, Any]) -> Created:
    """``POST /v1/agents`` (a 409 adopts the live namesake: :func:`create_or_adopt`); a
    failure (but an auth failure or a named adoption error) is ``create_agent_failed``."""
    try:
        return await create_or_adopt(api, "agent", body)
    except (AuthenticationError, ProvisioningError):
        raise
    except ManagedLoopError as exc:
        raise ProvisioningError(
            f"could not create agent {body['name']!r}: {exc.message}",
            code="create_agent_failed",
            reason=exc.code,
            status=exc.context.get("status"),
        ) from exc


def _environment_body(env_spec: EnvironmentSpec | None, agent_name: str) -> dict[str, Any]:
    """The create-environment request (default: ``<agent name>_env``, cloud, unrestricted
    networking)."""
    body: dict[str, Any] = {
        "name": (env_spec.name if env_spec and env_spec.name else f"{agent_name}_env"),
        "config": wire_config(env_spec),
    }
    return {**body, **_environment_labels(env_spec)}


def _environment_labels(env_spec: EnvironmentSpec | None) -> dict[str, Any]:
    """The create-environment ``description`` and ``metadata`` of a spec that sets them."""
    out: dict[str, Any] = {}
    if env_spec is not None and env_spec.description is not None:
        out["description"] = env_spec.description
    if env_spec is not None and env_spec.metadata:
        out["metadata"] = dict(env_spec.metadata)
    return out


async def _create_environment(api: Api, body: dict[str, Any], *, agent_id: str | None) -> str:
    """``POST /v1/environments`` (a 409 adopts the live namesake) and its id. If it fails,
    the agent just created (``agent_id``; ``None`` when it was adopted, not created) is
    archived and ``ProvisioningError`` carries the rollback's outcome (``rollback``:
    ``"ok"``, ``"skipped"`` or the archive failure's code)."""
    try:
        return (await create_or_adopt(api, "environment", body)).id
    except AuthenticationError:
        raise
    except ManagedLoopError as failure:
        rollback = "skipped" if agent_id is None else await archive(api, "agent", agent_id)
        if failure.code == "unexpected_create_response":
            raise ProvisioningError(
                "create environment returned no id; the agent was archived",
                code="unexpected_create_environment_response",
                response=failure.context.get("response"),
                rollback=rollback,
            ) from None
        if isinstance(failure, ProvisioningError):
            failure.context["rollback"] = rollback
            raise
        raise ProvisioningError(
            f"could not create the environment ({failure.message}); the agent was archived",
            code="create_environment_failed",
            reason=failure.code,
            status=failure.context.get("status"),
            rollback=rollback,
        ) from failure


# -- create or adopt, list, the lifecycle host -------------------------------------------
@dataclass(frozen=True, kw_only=True, slots=True)
class Created:
    """An agent or environment this call created or (after a 409) adopted."""

    id: str
    name: str
    version: int | None = None
    adopted: bool = False


def _resource(api: Api, kind: str) -> Any:
    return api.client.beta.agents if kind == "agent" else api.client.beta.environments


async def create_or_adopt(api: Api, kind: str, body: dict[str, Any]) -> Created:
    """Create an agent or environment named ``body["name"]``. A 409 means the name is
    taken: names are ``<base>_<digest8>``, so a live resource of exactly that name *is*
    this content and is adopted; an archived one is ``<kind>_archived``; none at all (it
    vanished after the 409) is ``<kind>_name_conflict``. The listing reads every page,
    archived resources included."""
    resource = _resource(api, kind)
    name = body["name"]
    try:
        made = await api.call(
            "post",
            f"/v1/{kind}s",
            lambda: resource.create(
                **body, extra_headers=api.headers, timeout=api.s.receive_timeout
            ),
        )
    except APIStatusError as exc:
        if exc.status != 409 or isinstance(exc, AuthenticationError):
            raise
        return await _adopt(api, kind, name)
    made_id = getattr(made, "id", None)
    if not isinstance(made_id, str) or not made_id:
        raise ProvisioningError(
            f"create {kind} returned no id",
            code="unexpected_create_response",
            response=str(made)[:500],
        )
    version = getattr(made, "version", None)
    return Created(id=made_id, name=name, version=version if isinstance(version, int) else None)


async def _adopt(api: Api, kind: str, name: str) -> Created:
    records = await list_records(api, kind)
    same = [r for r in records if r.get("name") == name]
    live = [r for r in same if not r.get("archived_at")]
    if live:
        rid = live[0].get("id")
        if not isinstance(rid, str) or not rid:
            raise ProvisioningError(
                f"the listed {kind} {name!r} has no id", code="unexpected_list_response"
            )
        version = live[0].get("version")
        logger.info("claude provision adopted %s %s (%s) after a 409", kind, rid, name)
        return Created(
            id=check_id(kind, rid, option=f"{kind}_id"),
            name=name,
            version=version if isinstance(version, int) else None,
            adopted=True,
        )
    if same:
        raise ProvisioningError(
            f"{kind} name {name!r} belongs to an archived {kind} (archived names stay taken)",
            code=f"{kind}_archived",
            name=name,
        )
    raise ProvisioningError(
        f"{kind} name {name!r} was refused as taken (409), but no {kind} of that name exists",
        code=f"{kind}_name_conflict",
        name=name,
    )


async def list_records(api: Api, kind: str) -> list[dict[str, Any]]:
    """Every agent or environment (all pages, archived included), as raw JSON."""
    resource = _resource(api, kind)

    async def page(cursor: str | None) -> Any:
        kwargs: dict[str, Any] = {"limit": 100, "include_archived": True}
        if cursor is not None:
            kwargs["page"] = cursor
        return await resource.with_raw_response.list(
            **kwargs, extra_headers=api.headers, timeout=api.s.receive_timeout
        )

    return await api.list_raw(f"/v1/{kind}s", page)


# -- teardown ---------------------------------------------------------------------------
async def archive(api: Api, kind: str, ident: str) -> str:
    """Archive one agent or environment; ``"ok"`` or the failure's code (never raises)."""
    resource = api.client.beta.agents if kind == "agent" else api.client.beta.environments
    path = f"/v1/{'agents' if kind == 'agent' else 'environments'}/{ident}/archive"
    try:
        await api.call(
            "post",
            path,
            lambda: resource.archive(
                ident, extra_headers=api.headers, timeout=api.s.receive_timeout
            ),
        )
    except ManagedLoopError as exc:
        status = exc.context.get("status")
        return f"{exc.code}:{status}" if status else exc.code
    return "ok"


async def teardown(api: Api, handle: Any, **options: Any) -> dict[str, str]:
    """Archive the handle's agent and (if provisioning made it) its environment.

    Both are attempted even if one fails. Returns ``{"agent": "ok", "environment":
    "ok"}`` (``"skipped"`` for an environment the handle does not own); if either failed
    raises ``ProvisioningError(code="teardown_failed")`` with each side's outcome in
    ``context``.
    """
    _validate.no_unknown_keywords("teardown", options, ())
    if isinstance(handle, Mapping):
        handle = ClaudeHandle.from_dict(handle)
    if not isinstance(handle, ClaudeHandle):
        raise InvalidOptionsError("teardown needs a ClaudeHandle (or its dict)", option="handle")
    check_id("agent", handle.agent_id, option="agent_id")
    check_id("environment", handle.environment_id, option="environment_id")
    report = {"agent": await archive(api, "agent", handle.agent_id)}
    report["environment"] = (
        await archive(api, "environment", handle.environment_id)
        if handle.owns_environment
        else "skipped"
    )
    if any(v not in ("ok", "skipped") for v in report.values()):
        raise ProvisioningError(
            f"teardown failed: agent {report['agent']}, environment {report['environment']}",
            code="teardown_failed",
            agent=report["agent"],
            environment=report["environment"],
        )
    return report


class ClaudeLifecycle:
    """The lifecycle verbs' view of Claude Managed Agents (``ml.ensure_agent`` ...): agents
    and environments, created or adopted by name, listed, archived."""

    host = "claude"
    policy = CLAUDE
    agent_kind = "agent"

    def __init__(self, api: Api, account: str) -> None:
        self.api = api
        self.account = account

    def agent_digest(self, spec: AgentSpec, environment: EnvironmentSpec | None) -> str:
        return spec.digest

    async def build_agent(
        self,
        spec: AgentSpec,
        *,
        name: str,
        digest: str,
        environment: EnvironmentSpec | None,
        options: Mapping[str, Any],
    ) -> AgentHandle:
        if options:
            first = sorted(options)[0]
            raise InvalidOptionsError(f"unknown ensure_agent option {first!r}", option=first)
        made = await _create_agent(self.api, _agent_body(spec, name, digest))
        return AgentHandle(agent_id=made.id, name=name, digest=digest)

    async def build_environment(
        self, spec: EnvironmentSpec, *, name: str, digest: str
    ) -> EnvironmentHandle:
        coerce_environment(spec)  # refuses AgentCore-only fields
        body = {"name": name, "config": wire_config(spec), **_environment_labels(spec)}
        made = await create_or_adopt(self.api, "environment", body)
        return EnvironmentHandle(environment_id=made.id, name=name, digest=digest)

    async def listing(self, kind: str) -> list[Listed]:
        out = []
        for record in await list_records(self.api, kind):
            rid, name = record.get("id"), record.get("name")
            if isinstance(rid, str) and isinstance(name, str):
                created = record.get("created_at")
                out.append(
                    Listed(
                        id=rid,
                        name=name,
                        created_at=created if isinstance(created, str) else "",
                        live=not record.get("archived_at"),
                    )
                )
        return out

    async def retire(self, kind: str, item: Listed) -> None:
        check_id(kind, item.id, option=f"{kind}_id")
        outcome = await archive(self.api, kind, item.id)
        if outcome != "ok":
            raise ProvisioningError(
                f"could not archive {kind} {item.name} ({outcome})",
                code="archive_failed",
                reason=outcome,
                name=item.name,
            )


def account_of(identity: Any) -> str:
    """A short one-way fingerprint of a provider's ``cache_identity()`` (store scoping)."""
    return hashlib.sha256(repr(identity).encode()).hexdigest()[:16]


_AMOUNT = re.compile(r"0|[1-9][0-9]{0,17}")  # minor units, no leading zeros (the API's rule)


def check_budget(value: Any) -> dict[str, Any] | None:
    """A session budget as the API takes it (``{"type": "limit", "max_list_cost":
    {"amount": "<minor units>", "currency": "USD"}}``), or ``invalid_opts``."""
    if value is None:
        return None
    cost = value.get("max_list_cost") if isinstance(value, Mapping) else None
    if (
        isinstance(value, Mapping)
        and set(value) == {"type", "max_list_cost"}
        and value.get("type") == "limit"
        and isinstance(cost, Mapping)
        and set(cost) == {"amount", "currency"}
        and isinstance(cost.get("amount"), str)
        and _AMOUNT.fullmatch(cost["amount"]) is not None
        and cost.get("currency") == "USD"
    ):
        return {"type": "limit", "max_list_cost": dict(cost)}
    raise InvalidOptionsError(
        'session_budget must be {"type": "limit", "max_list_cost": {"amount": "2500", '
        '"currency": "USD"}} (amount: minor units as a decimal string)',
        option="session_budget",
    )
