"""Spec files for the operations commands (``managedloop provision/tag/resolve/prune/ls``).

A spec file is TOML (read with the standard library's :mod:`tomllib`; YAML is not
supported). It names the host, the agent, the environment and, optionally, the store::

    store = "sqlite:state/agents.sqlite3"   # optional, see "Stores" below

    [host]
    kind = "claude"                          # or "agentcore"
    api_key_env = "ANTHROPIC_API_KEY"        # the NAME of the variable holding the key
    base_url_env = "ANTHROPIC_BASE_URL"      # read base_url from this variable when set

    [agent]                                  # an AgentSpec; name is required
    name = "support-bot"
    system_prompt = "You help customers with their orders."
    model = "claude-sonnet-4-5"
    tools = ["mytools:lookup_order"]         # module:attr import paths, and/or
    [[agent.tool_definitions]]               # definitions written out in the file
    name = "refund"
    description = "Refund an order."
    input_schema = { type = "object", properties = { order_id = { type = "string" } } }

    [environment]                            # an EnvironmentSpec (flat keys fold into config)
    name = "support-env"
    type = "cloud"
    runtimes = [{ lang = "python", version = "3.12" }]

Top-level keys are exactly ``store``, ``host``, ``agent`` and ``environment`` (the last
two tables; ``environment`` optional); any other key, in any table, is an error naming it.

**[host]** — ``kind`` is ``claude`` or ``agentcore``. Every other setting ``X`` may be
written as ``X = "value"`` or as ``X_env = "VARIABLE"``, read from the environment when the
command runs (set there, it wins over ``X``; unset, the setting is unset and its default
applies). Credentials take only the ``_env`` form: a spec file (and the store) never holds
a secret, and ``api_key = "..."``, ``aws_secret_access_key = "..."`` and the like are
refused. The settings:

* ``claude``: ``api_key_env`` (default ``ANTHROPIC_API_KEY``; the variable must be set
  unless ``bearer_token_file`` is given), ``bearer_token_file``, ``base_url``,
  ``max_retries``;
* ``agentcore``: ``region``, ``endpoint_url``, ``control_endpoint_url``, ``profile`` (an
  AWS profile), ``access_key_id_env`` / ``secret_access_key_env`` / ``session_token_env``
  (default: the AWS credential chain), and the harness options ``execution_role_arn``
  (required to provision), ``endpoint_name`` (default ``DEFAULT``), ``timeout`` (seconds
  for the whole harness + endpoint wait; default 365), ``poll_interval`` (seconds).

**[agent]** — the keyword arguments of :class:`~managedloop.AgentSpec` (``name``,
``system_prompt``, ``model``, ``model_config``, ``terminal_tool``, ``description``,
``metadata``, ``host_tools``, ``effort``, ``execution_identity``, ``timeout_seconds``).
A file cannot hold Python functions, so custom tools are given two ways, which may be
mixed: ``tools = ["package.module:attr", ...]`` imports a tool, a function, a list or a
``Toolset`` (importable from the spec file's directory or the current one), and
``[[agent.tool_definitions]]`` tables give ``name``, ``description`` and
``input_schema`` directly. Only the definitions reach the host and the digest, so both
spellings of the same tool give the same agent.

**[environment]** — :meth:`~managedloop.EnvironmentSpec.coerce`'s mapping: ``name`` (the
base, default ``env``), ``config``, ``runtimes``, ``variables`` and ``filesystems``
(AgentCore), ``description``, ``metadata``; any other key folds into ``config``. On
Claude it is a separate environment (``ensure_environment``); on AgentCore the harness
folds it in.

**Stores** — ``--store`` on the command line wins, then the file's ``store``, then the
default: an SQLite file at :func:`~managedloop.stores.default_store_path` (the user's cache
directory). ``sqlite:PATH``, ``file:PATH`` (a JSON :class:`~managedloop.stores.FileStore`),
``redis://...`` / ``rediss://...`` (:class:`~managedloop.stores.RedisStore`, the extra
``managedloop[redis]``), ``memory:``, or a bare path (``.json``: a file store, else
SQLite). A relative path in the spec file is relative to the spec file's directory.

Every problem with a spec file is a :class:`SpecError` naming the file and the key, raised
before any request (the commands exit 2).
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from managedloop.cli.toolrefs import ToolRefError, load_tools
from managedloop.config import MISSING
from managedloop.errors import ConfigError, InvalidOptionsError, ManagedLoopError
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec
from managedloop.stores import (
    FileStore,
    MemoryStore,
    SQLiteStore,
    Store,
    default_store_path,
    open_store,
)
from managedloop.tools import ToolDefinition

__all__ = [
    "HOST_KINDS",
    "SpecError",
    "SpecFile",
    "agent_digest",
    "execution_role_arn",
    "load",
    "make_provider",
    "open_spec_store",
    "store_label",
]

HOST_KINDS = ("claude", "agentcore")
_TOP = ("store", "host", "agent", "environment")
_SETTINGS: dict[str, tuple[str, ...]] = {
    "claude": ("base_url", "bearer_token_file", "max_retries"),
    "agentcore": (
        "region",
        "endpoint_url",
        "control_endpoint_url",
        "profile",
        "execution_role_arn",
        "endpoint_name",
        "timeout",
        "poll_interval",
    ),
}
# Credentials: only "<name>_env" (the variable's name) is accepted, never a value.
_CREDENTIALS: dict[str, tuple[str, ...]] = {
    "claude": ("api_key",),
    "agentcore": ("access_key_id", "secret_access_key", "session_token"),
}
_SECRET_WORDS = ("key", "secret", "token", "password")
_AGENT_FIELDS = (
    *(f.name for f in dataclasses.fields(AgentSpec) if f.name != "tools"),
    "tools",
    "tool_definitions",
)
_NUMBERS = ("max_retries", "timeout", "poll_interval")


class SpecError(Exception):
    """A spec file that cannot be used (the commands exit 2, before any request); ``code``
    is ``invalid_spec``, or ``invalid_store`` for a store URL or path that names no store."""

    def __init__(self, message: str, code: str = "invalid_spec") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, kw_only=True, slots=True)
class SpecFile:
    """A loaded spec file. ``host_settings`` holds plain settings only (credentials stay in
    the environment; :attr:`credential_env` holds the names of their variables)."""

    path: Path
    host: str
    host_settings: Mapping[str, Any]
    credential_env: Mapping[str, str]
    agent: AgentSpec
    environment: EnvironmentSpec | None
    store: str | None = None
    env_names: Mapping[str, str] = field(default_factory=dict)
    """Setting -> the variable it is read from (``X_env``), for messages."""

    @property
    def agent_base(self) -> str:
        return self.agent.require_name()

    @property
    def environment_base(self) -> str:
        """The base ``ensure_environment`` uses (the spec's name, else ``env``)."""
        return (self.environment.name if self.environment else None) or "env"


def _fail(path: Path, message: str) -> SpecError:
    return SpecError(f"{path}: {message}")


def load(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> SpecFile:
    """Read and check the spec file at ``path`` (see the module docstring)."""
    where = Path(path)
    env = os.environ if environ is None else environ
    try:
        data = tomllib.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{where}: no such spec file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{where}: cannot read the spec file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{where}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(_TOP))
    if unknown:
        raise _fail(where, f"unknown top-level key {unknown[0]!r}; known: {', '.join(_TOP)}")
    host_table = _table(where, data, "host", required=True)
    host, settings, credentials, env_names = _host(where, host_table, env)
    agent = _agent(where, _table(where, data, "agent", required=True))
    environment = _environment(where, data.get("environment"))
    store = data.get("store")
    if store is not None and (not isinstance(store, str) or not store):
        raise _fail(where, "store must be a non-empty string (a path or a URL)")
    return SpecFile(
        path=where,
        host=host,
        host_settings=settings,
        credential_env=credentials,
        agent=agent,
        environment=environment,
        store=store,
        env_names=env_names,
    )


def _table(path: Path, data: Mapping[str, Any], key: str, *, required: bool) -> dict[str, Any]:
    value = data.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise _fail(
            path, f"[{key}] is required (a table)" if value is None else f"{key} must be a table"
        )
    return value


def _host(
    path: Path, table: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[str, dict[str, Any], dict[str, str], dict[str, str]]:
    kind = table.get("kind")
    if kind not in HOST_KINDS:
        raise _fail(path, f"host.kind must be one of {', '.join(HOST_KINDS)}, got {kind!r}")
    allowed = _SETTINGS[kind]
    credentials = _CREDENTIALS[kind]
    settings: dict[str, Any] = {}
    names: dict[str, str] = {}
    cred_env: dict[str, str] = {}
    for key, value in table.items():
        if key == "kind":
            continue
        base = key.removesuffix("_env") if key.endswith("_env") else None
        if base is not None and (base in allowed or base in credentials):
            if not isinstance(value, str) or not value:
                raise _fail(path, f"host.{key} must name an environment variable")
            if base in credentials:
                cred_env[base] = value
            else:
                names[base] = value
            continue
        if key in credentials or (key not in allowed and any(w in key for w in _SECRET_WORDS)):
            raise _fail(
                path,
                f"host.{key}: a spec file never holds a secret; put it in an environment "
                f"variable and name that variable with host.{key.removeprefix('aws_')}_env",
            )
        if key not in allowed:
            known = [*allowed, *(f"{c}_env" for c in credentials), *(f"{a}_env" for a in allowed)]
            raise _fail(path, f"unknown key host.{key} for {kind}; known: {', '.join(known)}")
        settings[key] = value
    for key, variable in names.items():  # X_env, when set, wins over X
        if variable in environ and environ[variable] != "":
            settings[key] = environ[variable]
    for key in _NUMBERS:
        if key in settings:
            settings[key] = _number(path, key, settings[key], names.get(key))
    for key, value in settings.items():
        if key not in _NUMBERS and not isinstance(value, str):
            raise _fail(path, f"host.{key} must be a string, got {type(value).__name__}")
    if kind == "claude":
        cred_env.setdefault("api_key", "ANTHROPIC_API_KEY")
    return kind, settings, cred_env, names


def _number(path: Path, key: str, value: Any, variable: str | None) -> int | float:
    source = f"${variable}" if variable else f"host.{key}"
    try:
        number = float(value) if isinstance(value, str) else value
    except ValueError:
        raise _fail(path, f"{source} must be a number") from None
    if isinstance(number, bool) or not isinstance(number, int | float) or not number >= 0:
        raise _fail(path, f"{source} must be a number >= 0")
    if number == float("inf"):
        raise _fail(path, f"{source} must be finite")
    if key == "max_retries":
        if number != int(number):
            raise _fail(path, f"{source} must be a whole number")
        return int(number)
    return number


def _agent(path: Path, table: Mapping[str, Any]) -> AgentSpec:
    unknown = sorted(set(table) - set(_AGENT_FIELDS))
    if unknown:
        raise _fail(path, f"unknown key agent.{unknown[0]}; known: {', '.join(_AGENT_FIELDS)}")
    if not isinstance(table.get("name"), str) or not table["name"]:
        raise _fail(path, "agent.name is required (the base of the host-side name)")
    kwargs = {k: v for k, v in table.items() if k not in ("tools", "tool_definitions")}
    tools: list[Any] = []
    refs = table.get("tools", [])
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise _fail(path, 'agent.tools is a list of "module:attr" import paths')
    if refs:
        try:  # importable from the spec file's directory or the current one
            tools += load_tools(refs, folders=(str(path.resolve().parent), os.getcwd()))
        except ToolRefError as exc:
            raise _fail(path, f"agent.tools: {exc}") from None
    defs = table.get("tool_definitions", [])
    if not isinstance(defs, list) or not all(isinstance(d, dict) for d in defs):
        raise _fail(path, "agent.tool_definitions is a list of tables ([[agent.tool_definitions]])")
    for i, item in enumerate(defs):
        extra = sorted(set(item) - {"name", "description", "input_schema"})
        if extra:
            raise _fail(path, f"agent.tool_definitions[{i}]: unknown key {extra[0]!r}")
        try:
            tools.append(ToolDefinition(**item))
        except ManagedLoopError as exc:
            raise _fail(path, f"agent.tool_definitions[{i}]: {exc.message}") from None
    try:
        return AgentSpec(tools=tools, **kwargs)
    except ManagedLoopError as exc:
        option = exc.context.get("option")
        where = f"agent.{option}: " if isinstance(option, str) else "[agent]: "
        raise _fail(path, f"{where}{exc.code}: {exc.message}") from None
    except TypeError as exc:
        raise _fail(path, f"[agent]: {exc}") from None


def _environment(path: Path, value: Any) -> EnvironmentSpec | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail(path, "environment must be a table")
    try:
        return EnvironmentSpec.coerce(value)
    except ManagedLoopError as exc:
        option = exc.context.get("option")
        where = f"environment.{option}: " if isinstance(option, str) else "[environment]: "
        raise _fail(path, f"{where}{exc.code}: {exc.message}") from None


# ---------------------------------------------------------------------------- stores


STORE_SCHEMES = ("sqlite:", "file:", "memory:", "redis://", "rediss://", "unix://")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")  # two letters or more: C:\ is a path


def open_spec_store(
    spec: SpecFile | None, override: str | None, *, create: bool = True
) -> tuple[Store, str]:
    """The store the command uses and a label for it (a Redis password never shown):
    ``override`` (``--store``, relative to the current directory), else the spec file's
    ``store`` (relative to the spec file), else the default SQLite file.

    An unknown scheme (``bogus://x``) is a :class:`SpecError` naming the known ones, before
    anything is created. With ``create=False`` (a read-only command) a store file that does
    not exist is not created: it reads as empty (an in-memory store)."""
    if override:
        return _open(override, Path.cwd(), create), store_label(override)
    if spec is not None and spec.store:
        return _open(spec.store, spec.path.parent, create), store_label(spec.store)
    path = default_store_path()
    if not create and not path.exists():
        return MemoryStore(), f"sqlite:{path}"
    store = open_store()
    return store, f"sqlite:{getattr(store, 'path', '(default)')}"


def _open(where: str, relative_to: Path, create: bool) -> Store:
    def at(text: str) -> Path:
        p = Path(text).expanduser()
        return p if p.is_absolute() else relative_to / p

    scheme = _SCHEME.match(where)
    if scheme is not None and not where.startswith(STORE_SCHEMES):
        raise SpecError(
            f"store {store_label(where)}: unknown scheme {scheme.group(1)!r}; a store is "
            "PATH, sqlite:PATH, file:PATH, memory:, redis://..., rediss://... or unix://...",
            code="invalid_store",
        )
    path: Path | None = None
    if where.startswith("sqlite:"):
        path = at(where.removeprefix("sqlite:"))
    elif where.startswith("file:"):
        path = at(where.removeprefix("file:"))
    elif where != "memory:" and not where.startswith(("redis://", "rediss://", "unix://")):
        path = at(where)
    if path is not None and not create and not path.exists():
        return MemoryStore()  # nothing stored yet, and a read must not create the file
    try:
        if where.startswith("sqlite:"):
            return SQLiteStore(at(where.removeprefix("sqlite:")))
        if where.startswith("file:"):
            return FileStore(at(where.removeprefix("file:")))
        if path is None:
            return open_store(where)
        return open_store(path)
    except (InvalidOptionsError, ConfigError) as exc:  # a bad name; a StoreError is a failure
        message = f"store {store_label(where)}: {exc.code}: {exc.message}"
        raise SpecError(message, code="invalid_store") from None
    except ImportError as exc:
        raise SpecError(f"store {store_label(where)}: {exc}", code="invalid_store") from None


def store_label(where: str) -> str:
    """``where`` without a URL password (``redis://user:***@host``)."""
    if "://" not in where:
        return where
    parts = urllib.parse.urlsplit(where)
    if parts.password is None:
        return where
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    user = f"{parts.username}:" if parts.username else ":"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}***@{host}{port}"))


# ---------------------------------------------------------------------------- hosts


def make_provider(spec: SpecFile, environ: Mapping[str, str] | None = None) -> Any:
    """The host's provider from the spec's settings; credentials from the environment."""
    env = os.environ if environ is None else environ
    s = spec.host_settings
    if spec.host == "claude":
        from managedloop.providers.claude import ClaudeManagedAgents

        variable = spec.credential_env["api_key"]
        bearer = s.get("bearer_token_file")
        key = env.get(variable) or None
        if key is None and not bearer:
            raise SpecError(
                f"{spec.path}: the environment variable {variable} (host.api_key_env) is not "
                "set: it holds the API key"
            )
        kwargs: dict[str, Any] = {
            "api_key": None if bearer else key,
            "bearer_token_file": bearer or None,
            "base_url": s.get("base_url", MISSING),
        }
        if "max_retries" in s:
            kwargs["max_retries"] = s["max_retries"]
        return ClaudeManagedAgents(**kwargs)
    from managedloop.providers.agentcore import BedrockAgentCore

    creds: dict[str, Any] = {}
    for name, variable in spec.credential_env.items():
        if not env.get(variable):
            raise SpecError(
                f"{spec.path}: the environment variable {variable} (host.{name}_env) is not set"
            )
        creds[f"aws_{name}"] = env[variable]
    session = None
    if s.get("profile"):
        import botocore.session

        session = botocore.session.Session(profile=s["profile"])
    return BedrockAgentCore(
        region_name=s.get("region"),
        endpoint_url=s.get("endpoint_url"),
        control_endpoint_url=s.get("control_endpoint_url"),
        session=session,
        **creds,
    )


def execution_role_arn(spec: SpecFile) -> str:
    """The IAM role an AgentCore harness runs as, or a :class:`SpecError` naming where the
    spec file says to read it from (its variable, when it names one)."""
    role = spec.host_settings.get("execution_role_arn")
    if isinstance(role, str) and role.strip():
        return role
    variable = spec.env_names.get("execution_role_arn")
    if variable:
        raise SpecError(
            f"{spec.path}: the environment variable {variable} (host.execution_role_arn_env) "
            "is not set: it holds the IAM role the harness runs as "
            "(arn:aws:iam::<account>:role/<name>)"
        )
    raise SpecError(
        f"{spec.path}: host.execution_role_arn is required to provision a harness (the IAM "
        "role it runs as); or name a variable: execution_role_arn_env = "
        '"MANAGEDLOOP_EXECUTION_ROLE_ARN"'
    )


async def agent_digest(spec: SpecFile) -> str:
    """The digest of the spec's agent on its host, without credentials or a request (on
    AgentCore the harness digest folds the environment in: the host's own rule)."""
    if spec.host == "claude":
        return spec.agent.digest
    from managedloop.providers.agentcore import BedrockAgentCore

    with BedrockAgentCore(region_name="us-east-1") as offline:  # never sends: digest only
        async with offline.lifecycle() as host:
            return host.agent_digest(spec.agent, spec.environment)
