"""The emulator's plain CRUD resources (agents, environments), as one table.

Each :class:`Resource` row says what differs between them: the URL collection, the id
prefix, the fields a create request sets (each with how a given or missing value is
stored), the fields it requires, the operations served and the ``anthropic`` SDK type
every record must parse as (``anthropic.types.beta.<sdk_type>``; the strict-SDK test
reads each one back through the SDK with strict validation). The server registers the
routes of every row from :data:`RESOURCES`; the records are built here, so a new resource
or field is one table edit.

Sessions and files are not rows: they carry behaviour (a scripted run, file bytes).
Deployments are not rows either (they resolve an agent, validate a schedule, start
sessions), but their routes follow :data:`CRUD_ROUTES` too, and their errors and agent
snapshots are built by :func:`api_error` and :func:`agent_snapshot`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from managedloop.testing._claude.permissions import resolve_tools

__all__ = [
    "AGENTS",
    "CRUD_ROUTES",
    "ENVIRONMENTS",
    "RESOURCES",
    "RefusedError",
    "Resource",
    "agent_snapshot",
    "api_error",
    "environment_config",
    "new_record",
    "update_record",
]

CRUD_ROUTES = (
    ("create", "POST", ""),
    ("list", "GET", ""),
    ("get", "GET", "/{id}"),
    ("update", "POST", "/{id}"),
    ("archive", "POST", "/{id}/archive"),
    ("delete", "DELETE", "/{id}"),
)
"""``(operation, method, path after /v1/<collection>)`` of every CRUD operation, in the
order the routes are registered."""

_SNAPSHOT_KEYS = (  # the agent fields a session's agent snapshot carries (SDK type)
    "id",
    "name",
    "description",
    "model",
    "system",
    "tools",
    "mcp_servers",
    "skills",
    "multiagent",
    "execution_identity",
    "version",
)


def agent_snapshot(agent: Mapping[str, Any]) -> dict[str, Any]:
    """The agent as a new session carries it (``POST /v1/sessions`` and a deployment's
    run alike)."""
    return {**{k: agent[k] for k in _SNAPSHOT_KEYS}, "type": "agent"}


def api_error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    """The API's error envelope; a 404 or 409 tells the SDK not to retry."""
    body = {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_emulator",
    }
    headers = {"x-should-retry": "false"} if status in (404, 409) else {}
    return web.json_response(body, status=status, headers=headers)


class RefusedError(Exception):
    """A request the emulated API refuses: ``status`` and the error message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, kw_only=True, slots=True)
class Resource:
    """One CRUD resource of the emulated API."""

    collection: str
    """The URL segment (``/v1/<collection>``) and the emulator state's attribute."""
    kind: str
    """The wire ``type`` of a record, and the noun of its errors."""
    prefix: str
    """The id prefix (``agent_``)."""
    sdk_type: str
    """The SDK model of a record: ``anthropic.types.beta.<sdk_type>``."""
    required: tuple[str, ...]
    """Create-request fields that must be present and non-empty."""
    fields: Mapping[str, Callable[[Any], Any]]
    """Every field a create request sets, in wire order: the given value (``None`` when
    absent) -> the stored one."""
    initial: Mapping[str, Any]
    """Fields every new record starts with, whatever the request (``version``)."""
    operations: frozenset[str]
    """Of ``create``, ``list``, ``get``, ``update``, ``archive``, ``delete``."""


def _given(value: Any) -> Any:
    return value


def _list(value: Any) -> Any:
    return value or []


def _dict(value: Any) -> Any:
    return value or {}


def _model(value: Any) -> Any:
    return value if isinstance(value, dict) else {"id": value}


def _skills(value: Any) -> Any:
    # The API resolves a skill without a version to the latest (the SDK type requires one).
    if not isinstance(value, list):
        return []
    return [
        {**k, "version": k.get("version") or "latest"} if isinstance(k, Mapping) else k
        for k in value
    ]


def _execution_identity(value: Any) -> Any:
    # The SDK's union: service_account (no customer-named principal) or aws_role.
    return value or {"type": "service_account"}


_PACKAGE_MANAGERS = ("apt", "cargo", "gem", "go", "npm", "pip")


def environment_config(config: Any) -> dict[str, Any]:
    """An environment ``config`` as the API returns it: a cloud config always carries
    ``networking`` and ``packages`` with every package manager's list (the SDK's
    ``BetaCloudConfig`` requires them), whatever subset the create request gave."""
    out = dict(config) if isinstance(config, Mapping) else {}
    out.setdefault("type", "cloud")
    if out["type"] != "cloud":
        return out
    out.setdefault("networking", {"type": "unrestricted"})
    given = out.get("packages")
    packages = dict(given) if isinstance(given, Mapping) else {}
    out["packages"] = {
        "type": "packages",
        **{name: list(packages.get(name) or []) for name in _PACKAGE_MANAGERS},
    }
    return out


AGENTS = Resource(
    collection="agents",
    kind="agent",
    prefix="agent_",
    sdk_type="BetaManagedAgentsAgent",
    required=("name", "model"),
    fields={
        "name": _given,
        "model": _model,
        "system": _given,
        "description": _given,
        "tools": resolve_tools,  # toolsets resolved as the API returns them
        "mcp_servers": _list,
        "skills": _skills,
        "multiagent": _given,
        "metadata": _dict,
        "execution_identity": _execution_identity,
    },
    initial={"version": 1},
    operations=frozenset({"create", "list", "get", "update", "archive"}),
)
ENVIRONMENTS = Resource(
    collection="environments",
    kind="environment",
    prefix="env_",
    sdk_type="BetaEnvironment",
    required=("name",),
    fields={
        "name": _given,
        "config": environment_config,
        "description": _given,
        "metadata": _dict,
        "scope": _given,
    },
    initial={},
    operations=frozenset({"create", "list", "get", "archive", "delete"}),
)
RESOURCES = (AGENTS, ENVIRONMENTS)


def new_record(
    resource: Resource,
    body: Mapping[str, Any],
    *,
    mint: Callable[[str], str],
    now: str,
    existing: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The record a create request makes, its id from ``mint(prefix)``. ``RefusedError``
    400 without a required field; 409 when a record of ``existing`` (the account's live
    records) has the same ``name``; in both cases no id is minted."""
    if not all(body.get(name) for name in resource.required):
        verb = "are" if len(resource.required) > 1 else "is"
        raise RefusedError(400, f"{' and '.join(resource.required)} {verb} required")
    name = body.get("name")
    if any(r.get("name") == name for r in existing):
        raise RefusedError(409, f"an {resource.kind} named {name!r} already exists")
    return {
        "id": mint(resource.prefix),
        "type": resource.kind,
        **resource.initial,
        **{name: store(body.get(name)) for name, store in resource.fields.items()},
        "created_at": now,
        "updated_at": now,
        "archived_at": None,
    }


def update_record(
    record: dict[str, Any],
    body: Mapping[str, Any],
    *,
    now: str,
    fields: Mapping[str, Callable[[Any], Any]] | None = None,
) -> None:
    """Apply an update request in place, each given field stored as a create stores it
    (``fields``: :attr:`Resource.fields`). A versioned record refuses a stale ``version``
    (409) and counts a version up when anything changed."""
    changes = dict(body)
    version = changes.pop("version", None)
    for name, store in (fields or {}).items():
        if name in changes:
            changes[name] = store(changes[name])
    if version is not None and version != record.get("version"):
        raise RefusedError(409, f"stale {record['type']} version")
    changed = {k: v for k, v in changes.items() if record.get(k) != v}
    if changed:
        record.update(changed)
        if "version" in record:
            record["version"] += 1
        record["updated_at"] = now
