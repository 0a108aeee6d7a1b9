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
from managedloop.providers.agentcore._harness_config import (
    check_shape,
    harness_settings,
    host_tools,
)
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec, digest_of, refuse_fields

__all__ = [
    "base_name",
    "coerce_environment",
    "coerce_spec",
    "create_body",
    "environment_wire",
    "harness_digest",
    "harness_name",
    "harness_tags",
    "model_of",
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
    if environment is None or not (
        environment.config or environment.variables or environment.filesystems
    ):
        return spec.digest  # labels only (name, metadata): no content to fold in
    return digest_of(
        {"kind": "harness", "v": 1, "agent": spec.digest, "environment": environment.digest}
    )


def base_name(spec: AgentSpec, name_prefix: str | None = None) -> str:
    """``<prefix>_<spec name>`` fitted to ``[a-zA-Z][a-zA-Z0-9_]{0,39}`` (the name of a
    versioned harness: ``provision(update=True)``)."""
    base = "_".join(p for p in (name_prefix, spec.name) if p) or "a"
    base = re.sub(r"[^A-Za-z0-9_]", "_", base)
    if not base[0].isalpha():
        base = "a" + base
    return base[:HARNESS_NAME_MAX]


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
    if (
        env is not None
        and not (env.config or env.variables or env.filesystems or env.name or env.metadata)
        and env.description is None
    ):
        return None  # nothing to send (an environment's name and metadata become tags)
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


def model_of(spec: AgentSpec) -> dict[str, Any] | None:
    unions = {k: v for k, v in spec.model_config.items() if k in _MODEL_UNIONS}
    if unions:
        return unions
    if spec.model:
        return {"bedrockModelConfig": {"modelId": spec.model}}
    return None


_TAG_RE = re.compile(r"[a-zA-Z0-9\s._:/=+@-]*")  # fullmatch: the service's TagKey/TagValue
ENVIRONMENT_TAG = "managedloop:environment"  # the EnvironmentSpec's name, as a harness tag
_LABELS = {
    "description": "a harness has no description (CreateHarness takes none); labels go in "
    "metadata, sent as the harness's tags",
}
CLAUDE_ONLY = {
    "effort": "a Claude agent setting; a harness's model settings go in model_config",
    "execution_identity": "a Claude agent setting; a harness runs as execution_role_arn",
}


def harness_tags(
    spec: AgentSpec, environment: EnvironmentSpec | None, tags: Mapping[str, str] | None
) -> dict[str, str]:
    """The harness's tags: the ``tags=`` option, the spec's ``metadata``, the
    environment's ``metadata`` and name (:data:`ENVIRONMENT_TAG`); a key given twice with
    two values, or a key or value the service's pattern refuses, fails here."""
    out: dict[str, str] = {}
    sources: list[tuple[str, Mapping[str, Any]]] = [("tags", tags or {})]
    sources.append(("metadata", spec.metadata))
    if environment is not None:
        sources.append(("metadata", environment.metadata))
        if environment.name:
            sources.append(("name", {ENVIRONMENT_TAG: environment.name}))
    for option, given in sources:
        for key, value in given.items():
            ok_key = isinstance(key, str) and 1 <= len(key) <= 128 and _TAG_RE.fullmatch(key)
            ok_value = isinstance(value, str) and len(value) <= 256 and _TAG_RE.fullmatch(value)
            if not ok_key or not ok_value:
                raise InvalidOptionsError(
                    f"{option} {key!r}: a harness tag is a key of 1-128 and a value of 0-256 "
                    "characters from [a-zA-Z0-9 ._:/=+@-]",
                    code="invalid_harness_config",
                    option=option,
                    host="agentcore",
                )
            if key in out and out[key] != value:
                raise InvalidOptionsError(
                    f"harness tag {key!r} is given twice with two values ({option})",
                    code="invalid_harness_config",
                    option=option,
                    host="agentcore",
                )
            out[key] = value
    if len(out) > 50:
        raise InvalidOptionsError(
            "a harness takes at most 50 tags", code="invalid_harness_config", option="metadata"
        )
    return out


def create_body(
    spec: AgentSpec,
    *,
    name: str,
    execution_role_arn: str,
    environment: EnvironmentSpec | Mapping[str, Any] | None,
    tags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The CreateHarness parameters, every spec field honoured or refused here (the field
    table is in docs/agentcore.md): the environment's ``config`` goes to the wire verbatim,
    ``variables`` become ``environmentVariables``, ``timeout_seconds`` ``timeoutSeconds``,
    ``host_tools`` server tool configs beside the inline functions, ``harness_config`` its
    members, ``metadata`` (and the environment's metadata and name) the harness's tags.
    Claude-only fields and ``description`` are refused; the body is checked against
    botocore's CreateHarness shape."""
    refuse_fields(spec, "agentcore", {**CLAUDE_ONLY, **_LABELS})
    if not isinstance(environment, EnvironmentSpec):
        environment = coerce_environment(environment)
    if environment is not None:
        refuse_fields(environment, "agentcore", _LABELS)
    body: dict[str, Any] = {"harnessName": name, "executionRoleArn": execution_role_arn}
    if spec.system_prompt:
        body["systemPrompt"] = [{"text": spec.system_prompt}]
    model = model_of(spec)
    if model is not None:
        body["model"] = model
    tools = [_converse.inline_function(t) for t in spec.tool_definitions()]
    tools += host_tools(spec)
    if tools:
        body["tools"] = tools
    wire = environment_wire(environment)
    if wire is not None:
        body["environment"] = wire
    if environment is not None and environment.variables:
        body["environmentVariables"] = dict(environment.variables)
    if spec.timeout_seconds is not None:
        body["timeoutSeconds"] = spec.timeout_seconds
    body.update(harness_settings(spec))
    all_tags = harness_tags(spec, environment, tags)
    if all_tags:
        body["tags"] = all_tags
    check_shape("bedrock-agentcore-control", "CreateHarness", body, option="spec")
    return body
