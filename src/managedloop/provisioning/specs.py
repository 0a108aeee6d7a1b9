"""Agent and environment specs: what to run, independent of where.

A spec is a frozen value. Its *identity* (:attr:`AgentSpec.digest`,
:attr:`EnvironmentSpec.digest`) is the lowercase hex SHA-256 of the **canonical
serialisation** of the content that defines behaviour. The ``name`` is the base name (the
Docker "repository"), never identity content; ``description`` and ``metadata`` are labels
and are not covered either.

The canonical serialisation (:func:`canonical_json`), version ``1``:

* JSON text, UTF-8, no whitespace (``separators=(",", ":")``), object keys sorted by their
  code points (``sort_keys=True``);
* strings are written as given, non-ASCII characters literally (``ensure_ascii=False``, so
  ``"é"`` is the two bytes ``c3 a9``) and **not** Unicode-normalised: ``"é"`` (U+00E9) and
  ``"e\\u0301"`` are different content;
* ``None`` is ``null``; ``True``/``False`` are ``true``/``false``; tuples are lists;
* integers are written exactly; a ``float`` is written as Python's shortest round-trip
  ``repr`` (``0.1`` -> ``0.1``, ``1.0`` -> ``1.0``), so ``1`` and ``1.0`` are different
  content; ``NaN`` and the infinities are refused (``not_canonical``);
* keys must be strings; anything that is not JSON data (a set, bytes, an object) is
  refused with ``InvalidOptionsError(code="not_canonical")`` rather than stringified, since
  ``str()`` of an object can differ between processes;
* each identity object carries ``"kind"`` (``agent`` / ``environment``) and ``"v": 1``; a
  field at its default (``None``, empty) is **omitted**, so adding an optional field in a
  later release leaves every existing digest unchanged;
* tools encode as their definitions ``{"name", "description", "input_schema"}`` (the
  implementation is not content: the host only ever sees the definition), sorted by name,
  so listing the same tools in another order is the same agent.

These rules give the same bytes in every process, Python version (3.11+) and machine;
``tests/provisioning/test_specs.py`` pins golden digests. Resources provisioned by the
Elixir reference (Erlang term hashing) are not recognised: the encodings differ.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any

from managedloop.errors import InvalidOptionsError
from managedloop.tools import Tool, ToolDefinition, Toolset, definitions_of, tools_of

__all__ = [
    "CANONICAL_VERSION",
    "AgentSpec",
    "EnvironmentSpec",
    "Runtime",
    "canonical_json",
    "digest_of",
    "refuse_fields",
]

CANONICAL_VERSION = 1
EFFORTS = ("low", "medium", "high", "xhigh", "max")  # the Claude SDK's Effort literal
_VERSION_RE = re.compile(r"[0-9A-Za-z.\-+]+")  # the shell-injection gate of the reference
_LANG_RE = re.compile(r"[a-z][a-z0-9_-]{0,63}")  # a mise tool name, safe unquoted in bash
_ENV_VAR_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,99}")  # AgentCore's environmentVariables key
_MOUNT_RE = re.compile(r"/mnt/[a-zA-Z0-9._-]+/?")  # AgentCore's mountPath
_FILESYSTEM_KINDS = (
    "sessionStorage",
    "s3FilesAccessPoint",
    "efsAccessPoint",
    "capacityProviderVolume",
    "s3BucketMount",
)
_ROLE_ARN_RE = re.compile(r"arn:aws(-[^:]+)?:iam::\d{12}:role/[\w+=,.@/-]+")


def _plain(value: Any, path: str) -> Any:
    """``value`` as plain JSON data (tuples -> lists), refusing what is not."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidOptionsError(
                f"{path}: {value!r} has no canonical encoding", code="not_canonical", option=path
            )
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidOptionsError(
                    f"{path}: key {key!r} is not a string", code="not_canonical", option=path
                )
            out[key] = _plain(item, f"{path}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [_plain(item, f"{path}[{i}]") for i, item in enumerate(value)]
    raise InvalidOptionsError(
        f"{path}: a {type(value).__name__} is not JSON data", code="not_canonical", option=path
    )


def canonical_json(value: Any) -> bytes:
    """The canonical encoding digests are computed over (see the module docstring)."""
    return json.dumps(
        _plain(value, "$"),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    ).encode("utf-8")


def digest_of(value: Any) -> str:
    """Lowercase hex SHA-256 of the canonical encoding (64 characters)."""
    import hashlib  # with the first digest: OpenSSL's hashes cost ~1.5 ms at import

    return hashlib.sha256(canonical_json(value)).hexdigest()


def _identity(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind, "v": CANONICAL_VERSION}
    out.update({k: v for k, v in fields.items() if v not in (None, "", [], {}, ())})
    return out


# ---------------------------------------------------------------------------- agents


@dataclass(frozen=True, kw_only=True)
class AgentSpec:
    """An agent: prompt, tools, model. Hosts that keep agents server-side need a ``name``.

    Host-specific fields (each digest-covered; a host that has no such setting refuses a
    spec that sets it, rather than dropping it): ``effort``, ``execution_identity``,
    ``mcp_servers``, ``skills``, ``speed`` and ``inference_geo`` (Claude),
    ``timeout_seconds`` (the AgentCore harness's per-invocation wall-clock cap) and
    ``harness_config`` (AgentCore). Which host takes which field is tabled in
    docs/agentcore.md and pinned by ``tests/agentcore/test_spec_fields.py``.
    """

    name: str | None = None
    system_prompt: str | None = None
    tools: Sequence[Any] = ()
    """``@tool`` functions (implementations run here), toolsets (``Toolset.from_mcp``) and/or
    bare ``ToolDefinition`` s."""
    model: str | None = None
    model_config: dict[str, Any] = field(default_factory=dict)
    """Host-specific model settings: Claude takes ``model``, ``effort``, ``speed`` and
    ``inference_geo`` (the members of an agent's ``model``; any other key is refused);
    AgentCore a model union (``bedrockModelConfig`` ...); Local passes its keys to the chat
    request."""
    terminal_tool: str | None = None
    """The tool that finishes the agent's work (see ``require_terminal_tool``)."""
    description: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    host_tools: Sequence[dict[str, Any]] = ()
    """Host-run toolsets with their permission policies, sent to the host verbatim (Claude:
    ``managedloop.providers.claude.agent_toolset(...)`` / ``mcp_toolset(...)``; AgentCore:
    the harness's server tool configs, ``managedloop.providers.agentcore.remote_mcp(...)``,
    ``gateway(...)``, ``browser()``, ``code_interpreter()``)."""
    effort: str | None = None
    """Claude: how hard the model works per call (``low`` ... ``max``)."""
    execution_identity: Mapping[str, Any] | None = None
    """Claude: the principal runs execute as (``{"type": "service_account"}`` or
    ``{"type": "aws_role", "role_arn": ...}``)."""
    timeout_seconds: int | None = None
    """AgentCore: the harness's wall-clock cap for one invocation (``timeoutSeconds``)."""
    mcp_servers: Mapping[str, str] = field(default_factory=dict)
    """Claude: remote MCP servers by name -> URL (each used by an ``mcp_toolset(name)`` in
    ``host_tools``; the host runs their tools)."""
    skills: Sequence[Mapping[str, Any]] = ()
    """Claude: skills the agent may use, ``{"type": "anthropic" | "custom", "skill_id": ...,
    "version": ...}`` (``version`` optional: the latest)."""
    speed: str | None = None
    """Claude: ``"standard"`` or ``"fast"`` (fast output at premium pricing, where the model
    offers it)."""
    inference_geo: str | None = None
    """Claude: the region model inference runs in (default: the workspace's)."""
    harness_config: Mapping[str, Any] = field(default_factory=dict)
    """AgentCore: harness settings in CreateHarness's own member names (``skills``,
    ``memory``, ``truncation``, ``hooks``, ``maxIterations``, ``maxTokens``,
    ``allowedTools``, ``environmentArtifact``, ``authorizerConfiguration``), checked
    against botocore's shapes before any request; other hosts refuse it."""

    def __post_init__(self) -> None:
        _claude_fields(self)
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise InvalidOptionsError("AgentSpec.name must be a non-empty string", option="name")
        object.__setattr__(self, "tools", tuple(self.tools))
        if not all(isinstance(t, dict) and isinstance(t.get("type"), str) for t in self.host_tools):
            raise InvalidOptionsError(
                "AgentSpec.host_tools takes toolset dicts with a 'type'", option="host_tools"
            )
        object.__setattr__(self, "host_tools", tuple(self.host_tools))
        if not isinstance(self.harness_config, Mapping):
            raise InvalidOptionsError(
                "AgentSpec.harness_config must be a mapping", option="harness_config"
            )
        object.__setattr__(
            self, "harness_config", _plain(dict(self.harness_config), "harness_config")
        )
        defs = definitions_of(self._tools)  # fails early on bad or duplicate tools
        if self.terminal_tool is not None and self.terminal_tool not in {d.name for d in defs}:
            raise InvalidOptionsError(
                f"terminal_tool {self.terminal_tool!r} is not one of the agent's tools",
                option="terminal_tool",
            )
        if self.effort is not None and self.effort not in EFFORTS:
            raise InvalidOptionsError(
                f"effort must be one of {', '.join(EFFORTS)}, got {self.effort!r}",
                option="effort",
            )
        if self.execution_identity is not None:
            object.__setattr__(
                self, "execution_identity", _execution_identity(self.execution_identity)
            )
        if self.timeout_seconds is not None and (
            isinstance(self.timeout_seconds, bool)
            or not isinstance(self.timeout_seconds, int)
            or self.timeout_seconds < 1
        ):
            raise InvalidOptionsError(
                f"timeout_seconds must be a positive int, got {self.timeout_seconds!r}",
                option="timeout_seconds",
            )

    @functools.cached_property
    def _tools(self) -> tuple[Tool[..., Any] | ToolDefinition, ...]:
        # Plain functions wrapped once: deriving a schema costs ~0.3 ms, and every run asks
        # for the definitions and the toolset. (cached_property writes the instance dict,
        # which a frozen dataclass allows; it is no field, so eq, hash and repr ignore it.)
        return tools_of(self.tools)  # a Toolset (MCP tools) gives its tools

    def tool_definitions(self) -> list[ToolDefinition]:
        return definitions_of(self._tools)

    def toolset(self) -> Toolset:
        """The implementations among ``tools`` (bare definitions have none)."""
        return Toolset([t for t in self._tools if not isinstance(t, ToolDefinition)])

    def identity(self) -> dict[str, Any]:
        """The content the digest covers (canonical form: see the module docstring)."""
        tools = sorted((d.to_dict() for d in self.tool_definitions()), key=lambda t: t["name"])
        return _identity(
            "agent",
            {
                "system_prompt": self.system_prompt,
                "tools": tools,
                "terminal_tool": self.terminal_tool,
                "model": self.model,
                "model_config": self.model_config,
                "effort": self.effort,
                "execution_identity": self.execution_identity,
                "timeout_seconds": self.timeout_seconds,
                "host_tools": [dict(t) for t in self.host_tools],
                "mcp_servers": dict(self.mcp_servers),
                "skills": [dict(k) for k in self.skills],
                "speed": self.speed,
                "inference_geo": self.inference_geo,
                "harness_config": dict(self.harness_config),
            },
        )

    @functools.cached_property
    def digest(self) -> str:
        """Lowercase hex SHA-256 of :meth:`identity` (64 characters)."""
        return digest_of(self.identity())

    @property
    def digest8(self) -> str:
        """The first 8 characters of :attr:`digest`: the suffix of host-side names."""
        return self.digest[:8]

    def require_name(self) -> str:
        if not self.name:
            raise InvalidOptionsError(
                "this host keeps agents server-side: AgentSpec needs a name", option="name"
            )
        return self.name

    @classmethod
    def coerce(cls, value: Any) -> AgentSpec:
        """An :class:`AgentSpec` (unchanged) or a mapping of its fields; anything else, or
        a mapping with unknown or invalid fields, is ``invalid_agent_spec``."""
        if isinstance(value, AgentSpec):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - set(cls.__dataclass_fields__))
            if unknown:
                raise InvalidOptionsError(
                    f"unknown AgentSpec field {unknown[0]!r}",
                    code="invalid_agent_spec",
                    option=str(unknown[0]),
                )
            try:
                return cls(**value)
            except (TypeError, InvalidOptionsError) as exc:
                raise InvalidOptionsError(
                    f"invalid agent spec: {exc}", code="invalid_agent_spec", option="spec"
                ) from None
        raise InvalidOptionsError(
            f"an agent spec must be an AgentSpec or a mapping, got {type(value).__name__}",
            code="invalid_agent_spec",
            option="spec",
        )


_SPEEDS = ("standard", "fast")
_SKILL_TYPES = ("anthropic", "custom")


def _claude_fields(spec: AgentSpec) -> None:
    """Check (and freeze) the Claude agent fields ``mcp_servers``, ``skills``, ``speed``
    and ``inference_geo`` (see :class:`AgentSpec`)."""
    servers = spec.mcp_servers
    if not isinstance(servers, Mapping) or not all(
        isinstance(n, str)
        and 0 < len(n) <= 255
        and isinstance(u, str)
        and u.startswith(("https://", "http://"))
        for n, u in servers.items()
    ):
        raise InvalidOptionsError(
            "mcp_servers maps server names (1-255 characters) to http(s) URLs",
            option="mcp_servers",
        )
    object.__setattr__(spec, "mcp_servers", dict(servers))
    given: Any = spec.skills
    # One skill dict (or a string) where a list belongs is refused, not guessed at.
    skills: list[Any] = [None] if isinstance(given, Mapping | str) else list(given)
    for skill in skills:
        ok = (
            isinstance(skill, Mapping)
            and skill.get("type") in _SKILL_TYPES
            and isinstance(skill.get("skill_id"), str)
            and skill["skill_id"]
            and set(skill) <= {"type", "skill_id", "version"}
            and isinstance(skill.get("version", ""), str)
        )
        if not ok:
            raise InvalidOptionsError(
                'a skill is {"type": "anthropic" | "custom", "skill_id": "...", "version": '
                '"..."} (version optional)',
                option="skills",
            )
    object.__setattr__(spec, "skills", tuple(dict(k) for k in skills))
    if spec.speed is not None and spec.speed not in _SPEEDS:
        raise InvalidOptionsError(
            f"speed must be 'standard' or 'fast', got {spec.speed!r}", option="speed"
        )
    geo = spec.inference_geo
    if geo is not None and (not isinstance(geo, str) or not geo):
        raise InvalidOptionsError(
            "inference_geo must be a non-empty string", option="inference_geo"
        )


def refuse_fields(spec: AgentSpec | EnvironmentSpec, host: str, why: Mapping[str, str]) -> None:
    """Refuse, before any request, the first field of ``why`` (``{field: reason}``) that
    ``spec`` sets: ``InvalidOptionsError(code="unsupported_spec_field")`` naming the
    field, the host and the reason (refuse or honour, never drop)."""
    for name, reason in why.items():
        value = getattr(spec, name)
        if value is not None and not (isinstance(value, Sized) and len(value) == 0):
            raise InvalidOptionsError(
                f"{type(spec).__name__}.{name} is set, and the {host} host cannot take it "
                f"({reason})",
                code="unsupported_spec_field",
                option=name,
                host=host,
            )


def _execution_identity(value: Any) -> dict[str, Any]:
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind == "service_account" and set(value) == {"type"}:
        return {"type": "service_account"}
    if (
        kind == "aws_role"
        and set(value) == {"type", "role_arn"}
        and isinstance(value.get("role_arn"), str)
        and len(value["role_arn"]) <= 2048
        and _ROLE_ARN_RE.fullmatch(value["role_arn"])
    ):
        return {"type": "aws_role", "role_arn": value["role_arn"]}
    raise InvalidOptionsError(
        'execution_identity must be {"type": "service_account"} or '
        '{"type": "aws_role", "role_arn": "arn:aws:iam::<12 digits>:role/<name>"}',
        option="execution_identity",
    )


# ---------------------------------------------------------------------------- runtimes


@dataclass(frozen=True, kw_only=True, slots=True)
class Runtime:
    """A language runtime the environment declares (installed on first need via mise).

    ``version`` must match ``[0-9A-Za-z.\\-+]+`` and ``lang`` ``[a-z][a-z0-9_-]*``: both are
    written unquoted into a bash script, so these checks are the injection gate.
    """

    lang: str
    version: str
    via: str = "mise"

    def __post_init__(self) -> None:
        if not isinstance(self.lang, str) or _LANG_RE.fullmatch(self.lang) is None:
            raise InvalidOptionsError(
                f"runtime lang must match [a-z][a-z0-9_-]*, got {self.lang!r}",
                code="invalid_runtime",
                option="runtimes",
            )
        if not isinstance(self.version, str) or _VERSION_RE.fullmatch(self.version) is None:
            raise InvalidOptionsError(
                f"runtime version must match [0-9A-Za-z.+-]+, got {self.version!r}",
                code="invalid_runtime",
                option="runtimes",
            )
        if self.via != "mise":
            raise InvalidOptionsError(
                f'only via="mise" is supported, got {self.via!r}',
                code="invalid_runtime",
                option="runtimes",
            )

    @classmethod
    def coerce(cls, value: Any) -> Runtime:
        """A :class:`Runtime` (re-validated) or a mapping ``{lang, version, via?}``."""
        if isinstance(value, Runtime):
            return cls(lang=value.lang, version=value.version, via=value.via)
        if isinstance(value, Mapping) and set(value) <= {"lang", "version", "via"}:
            if "lang" not in value or "version" not in value:
                raise InvalidOptionsError(
                    f"a runtime needs lang and version, got {dict(value)!r}",
                    code="invalid_runtime",
                    option="runtimes",
                )
            return cls(lang=value["lang"], version=value["version"], via=value.get("via", "mise"))
        raise InvalidOptionsError(
            f"a runtime is {{lang, version, via}}, got {value!r}",
            code="invalid_runtime",
            option="runtimes",
        )

    def to_dict(self) -> dict[str, str]:
        return {"lang": self.lang, "version": self.version, "via": self.via}


# ---------------------------------------------------------------------------- environments


@dataclass(frozen=True, kw_only=True)
class EnvironmentSpec:
    """Where an agent runs (a sandbox image). ``config`` goes to the host verbatim.

    ``runtimes`` are library vocabulary (they never reach the wire; the environment
    handle's ``bootstrap`` installs them). ``variables`` and ``filesystems`` are AgentCore
    settings (``environmentVariables`` and the runtime environment's
    ``filesystemConfigurations``, e.g. ``{"s3BucketMount": {...}}``); Claude environments
    have neither and refuse them. All four are digest-covered; ``name`` is not.
    """

    name: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    runtimes: Sequence[Any] = ()
    """:class:`Runtime` s or ``{lang, version, via}`` mappings; validated here."""
    variables: Mapping[str, str] = field(default_factory=dict)
    """AgentCore environment variables (values are hidden from ``repr``)."""
    filesystems: Sequence[Mapping[str, Any]] = ()
    """AgentCore filesystem configurations (one union member each, up to 5)."""
    description: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise InvalidOptionsError(
                "EnvironmentSpec.name must be a non-empty string",
                code="invalid_environment_spec",
                option="name",
            )
        if not isinstance(self.config, Mapping):
            raise InvalidOptionsError(
                "EnvironmentSpec.config must be a mapping",
                code="invalid_environment_spec",
                option="config",
            )
        if isinstance(self.runtimes, str | bytes) or not isinstance(self.runtimes, Sequence):
            raise InvalidOptionsError(
                "runtimes must be a list", code="invalid_runtime", option="runtimes"
            )
        object.__setattr__(self, "config", _plain(dict(self.config), "config"))
        object.__setattr__(self, "runtimes", tuple(Runtime.coerce(r) for r in self.runtimes))
        object.__setattr__(self, "variables", _variables(self.variables))
        object.__setattr__(self, "filesystems", _filesystems(self.filesystems))

    def __repr__(self) -> str:
        hidden = dict.fromkeys(self.variables, "***")
        return (
            f"EnvironmentSpec(name={self.name!r}, config={self.config!r}, "
            f"runtimes={list(self.runtimes)!r}, variables={hidden!r}, "
            f"filesystems={list(self.filesystems)!r})"
        )

    def identity(self) -> dict[str, Any]:
        """The content the digest covers (canonical form: see the module docstring)."""
        return _identity(
            "environment",
            {
                "config": self.config,
                "runtimes": [r.to_dict() for r in self.runtimes],
                "variables": dict(self.variables),
                "filesystems": [dict(f) for f in self.filesystems],
            },
        )

    @functools.cached_property
    def digest(self) -> str:
        """Lowercase hex SHA-256 of :meth:`identity` (64 characters)."""
        return digest_of(self.identity())

    @property
    def digest8(self) -> str:
        return self.digest[:8]

    @classmethod
    def coerce(cls, value: Any) -> EnvironmentSpec | None:
        """``None`` (no environment), an :class:`EnvironmentSpec` (unchanged), or a mapping:
        its known keys (``name``, ``config``, ``runtimes``, ``variables``, ``filesystems``,
        ``description``, ``metadata``) set those fields and **every other top-level key is
        folded into** ``config`` (an explicit ``config`` wins on a clash), so the flat
        ``{"type": "cloud", "networking": {...}, "runtimes": [...]}`` works. Anything else,
        or an invalid field, is ``invalid_environment_spec`` (``invalid_runtime`` for a bad
        runtime)."""
        if value is None or isinstance(value, EnvironmentSpec):
            return value
        if not isinstance(value, Mapping):
            raise InvalidOptionsError(
                f"an environment spec must be an EnvironmentSpec or a mapping, got "
                f"{type(value).__name__}",
                code="invalid_environment_spec",
                option="environment",
            )
        known = {"name", "config", "runtimes", "variables", "filesystems", "description"}
        known.add("metadata")
        explicit = value.get("config")
        if explicit is not None and not isinstance(explicit, Mapping):
            raise InvalidOptionsError(
                "environment config must be a mapping",
                code="invalid_environment_spec",
                option="config",
            )
        config = {k: v for k, v in value.items() if k not in known}
        config.update(explicit or {})
        try:
            return cls(
                name=value.get("name"),
                config=config,
                runtimes=value.get("runtimes") or (),
                variables=value.get("variables") or {},
                filesystems=value.get("filesystems") or (),
                description=value.get("description"),
                metadata=dict(value.get("metadata") or {}),
            )
        except TypeError as exc:
            raise InvalidOptionsError(
                f"invalid environment spec: {exc}", code="invalid_environment_spec"
            ) from None


def _variables(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or len(value) > 50:
        raise InvalidOptionsError(
            "variables must map at most 50 names to strings",
            code="invalid_environment_spec",
            option="variables",
        )
    for key, item in value.items():
        if not isinstance(key, str) or _ENV_VAR_RE.fullmatch(key) is None:
            raise InvalidOptionsError(
                f"environment variable name {key!r} must match [a-zA-Z_][a-zA-Z0-9_]{{0,99}}",
                code="invalid_environment_spec",
                option="variables",
            )
        if not isinstance(item, str) or len(item) > 5000:
            raise InvalidOptionsError(
                f"environment variable {key} must be a string of at most 5000 characters",
                code="invalid_environment_spec",
                option="variables",
            )
    return dict(value)


def _filesystems(value: Any) -> tuple[dict[str, Any], ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) > 5:
        raise InvalidOptionsError(
            "filesystems must be a list of at most 5 configurations",
            code="invalid_environment_spec",
            option="filesystems",
        )
    out = []
    for item in value:
        if not isinstance(item, Mapping) or len(item) != 1:
            raise InvalidOptionsError(
                f"a filesystem configuration has exactly one of {', '.join(_FILESYSTEM_KINDS)}",
                code="invalid_environment_spec",
                option="filesystems",
            )
        ((kind, body),) = item.items()
        mount = body.get("mountPath") if isinstance(body, Mapping) else None
        if kind not in _FILESYSTEM_KINDS or not isinstance(mount, str):
            raise InvalidOptionsError(
                f"unknown filesystem configuration {kind!r} (or no mountPath)",
                code="invalid_environment_spec",
                option="filesystems",
            )
        if _MOUNT_RE.fullmatch(mount) is None:
            raise InvalidOptionsError(
                f"mountPath must be one directory under /mnt, got {mount!r}",
                code="invalid_environment_spec",
                option="filesystems",
            )
        if kind == "s3BucketMount" and not isinstance(body.get("bucket"), str):
            raise InvalidOptionsError(
                "s3BucketMount needs a bucket",
                code="invalid_environment_spec",
                option="filesystems",
            )
        out.append(_plain({kind: dict(body)}, "filesystems"))
    return tuple(out)
