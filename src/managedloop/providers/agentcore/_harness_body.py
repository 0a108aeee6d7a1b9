"""A spec as the CreateHarness request: the harness's name, digest and body.

The name is ``<prefix>_<spec name>_<digest8>``, the digest the agent's folded with the
environment's, so a changed prompt, tool or environment is a new harness name. The body is
built from the :class:`AgentSpec` and :class:`EnvironmentSpec` alone; the environment's
``config`` goes to the wire verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from managedloop.errors import InvalidOptionsError
from managedloop.providers.agentcore import _converse
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec, digest_of

__all__ = [
    "coerce_environment",
    "coerce_spec",
    "create_body",
    "environment_wire",
    "harness_digest",
    "harness_name",
]

HARNESS_NAME_MAX = 40  # the service's harnessName limit ([a-zA-Z][a-zA-Z0-9_]{0,39})
_MODEL_UNIONS = (
    "bedrockModelConfig",
    "openAiModelConfig",
    "geminiModelConfig",
    "liteLlmModelConfig",
)


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
    digest = harness_digest(spec, coerce_environment(environment))
    base = base[: HARNESS_NAME_MAX - 9]
    return f"{base}_{digest[:8]}"


def coerce_spec(spec: Any) -> AgentSpec:
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


def coerce_environment(environment: Any) -> EnvironmentSpec | None:
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
    for option in ("effort", "execution_identity"):
        if getattr(spec, option) is not None:
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
        environment = coerce_environment(environment)
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
