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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from managedloop.errors import (
    AuthenticationError,
    InvalidOptionsError,
    ManagedLoopError,
    ProvisioningError,
)
from managedloop.providers.claude._api import Api
from managedloop.providers.claude._ids import check_id
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec

__all__ = [
    "DEFAULT_ENVIRONMENT_CONFIG",
    "DEFAULT_MODEL",
    "ClaudeHandle",
    "archive",
    "coerce_environment",
    "id_of",
    "normalize_model_id",
    "provision",
    "teardown",
]

DEFAULT_MODEL = "claude-sonnet-4-6"
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
    """``"anthropic:claude-sonnet-4-6"`` -> ``"claude-sonnet-4-6"``; bare ids unchanged."""
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
    else:
        return None
    return check_id(key.removesuffix("_id"), found, option=key)


def coerce_environment(value: Any) -> EnvironmentSpec | None:
    """``environment=`` as a spec to create one from: an :class:`EnvironmentSpec`, or a
    mapping of its fields (unknown keys go into ``config``); ``None`` stays ``None``."""
    if value is None or isinstance(value, EnvironmentSpec):
        return value
    if isinstance(value, Mapping) and "environment_id" not in value:
        known = {"name", "config", "description", "metadata"}
        config = dict(value.get("config") or {})
        config.update({k: v for k, v in value.items() if k not in known})
        try:
            return EnvironmentSpec(
                name=value.get("name"),
                config=config,
                description=value.get("description"),
                metadata=dict(value.get("metadata") or {}),
            )
        except TypeError as exc:
            raise InvalidOptionsError(
                f"invalid environment spec: {exc}", code="invalid_environment_spec"
            ) from None
    raise InvalidOptionsError(
        "environment must be an EnvironmentSpec, a mapping, a handle or an environment id",
        code="invalid_environment_spec",
        option="environment",
    )


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
    if options:
        raise InvalidOptionsError(
            f"unknown provision option {sorted(options)[0]!r}", option=sorted(options)[0]
        )
    base = _base_name(spec)
    env_id, env_spec = _environment_target(environment)
    digest = spec.digest
    agent_name = name or f"{base}_{digest[:8]}"
    agent = await _create_agent(api, _agent_body(spec, agent_name, digest))
    if env_id is None:
        env_id = await _create_environment(
            api, _environment_body(env_spec, agent_name), agent_id=agent.id
        )
        owns_environment = True
    else:
        owns_environment = False
    return ClaudeHandle(
        agent_id=agent.id,
        environment_id=env_id,
        name=agent_name,
        digest=digest,
        agent_version=getattr(agent, "version", None),
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
    body: dict[str, Any] = {
        "name": agent_name,
        "model": normalize_model_id(model),
        "tools": tools,
        "metadata": {**spec.metadata, "managedloop_digest": digest[:16]},
    }
    if spec.system_prompt is not None:
        body["system"] = spec.system_prompt
    if spec.description is not None:
        body["description"] = spec.description
    return body


async def _create_agent(api: Api, body: dict[str, Any]) -> Any:
    """``POST /v1/agents``; a failure (but an auth failure) is ``create_agent_failed``."""
    try:
        return await api.call(
            "post",
            "/v1/agents",
            lambda: api.client.beta.agents.create(
                **body, extra_headers=api.headers, timeout=api.s.receive_timeout
            ),
        )
    except AuthenticationError:
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
        "config": (env_spec.config if env_spec and env_spec.config else DEFAULT_ENVIRONMENT_CONFIG),
    }
    if env_spec is not None and env_spec.description is not None:
        body["description"] = env_spec.description
    return body


async def _create_environment(api: Api, body: dict[str, Any], *, agent_id: str) -> str:
    """``POST /v1/environments`` and its id. If it fails, or answers without an id, the
    agent just created is archived and ``ProvisioningError`` carries the rollback's
    outcome (``rollback``: ``"ok"`` or the archive failure's code)."""
    failure: ManagedLoopError | None = None
    env: Any = None
    try:
        env = await api.call(
            "post",
            "/v1/environments",
            lambda: api.client.beta.environments.create(
                **body, extra_headers=api.headers, timeout=api.s.receive_timeout
            ),
        )
    except ManagedLoopError as exc:
        failure = exc
    env_id = getattr(env, "id", None)
    if failure is None and isinstance(env_id, str) and env_id:
        return env_id
    rollback = await archive(api, "agent", agent_id)
    if failure is None:
        raise ProvisioningError(
            "create environment returned no id; the agent was archived",
            code="unexpected_create_environment_response",
            response=str(env)[:500],
            rollback=rollback,
        )
    raise ProvisioningError(
        f"could not create the environment ({failure.message}); the agent was archived",
        code="create_environment_failed",
        reason=failure.code,
        status=failure.context.get("status"),
        rollback=rollback,
    ) from failure


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
    if options:
        raise InvalidOptionsError(f"unknown teardown option {sorted(options)[0]!r}")
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
