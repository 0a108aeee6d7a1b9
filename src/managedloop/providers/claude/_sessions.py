"""Claude session options and operations: what a new session is created with, and the
session verbs (list, retrieve, update, archive, delete).

Create-time options (:class:`SessionOptions`, checked when the provider is built, before
any request; each goes to ``POST /v1/sessions`` as the API names it):

* ``agent_version``: which agent version a session runs. By default a session of a
  provisioned handle (``ClaudeHandle.agent_version``, known from the create) is pinned to
  it, ``{"type": "agent", "id": ..., "version": ...}``, so a run stays on the tested
  version; ``"latest"`` sends the bare id (the latest version); an int pins that one.
* ``session_overrides``: per-session replacements of the agent's ``model``, ``system``,
  ``tools``, ``mcp_servers`` or ``skills`` (``{"type": "agent_with_overrides", ...}``; the
  agent resource is unchanged).
* ``vault_ids``: vaults whose credentials the host injects (create-time only).
* ``session_resources``: mounted before the first turn: ``github_repository``, ``file``,
  ``memory_store`` (:func:`github_repository`, :func:`file_resource`,
  :func:`memory_store`).
* ``initial_events``: ``user.message`` / ``user.define_outcome`` events sent with the
  create itself (one round trip); a first prompt equal to an initial message is not sent
  again (the connection finds it in the history).

The verbs take raw JSON in and out (``model_dump(mode="json")`` of the SDK's models), as
the Files verbs do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from managedloop.errors import InvalidOptionsError
from managedloop.providers.claude._api import Api
from managedloop.providers.claude._ids import ID_PATTERN, check_id

__all__ = [
    "SessionOptions",
    "agent_reference",
    "archive",
    "delete",
    "file_resource",
    "github_repository",
    "list_sessions",
    "memory_store",
    "retrieve",
    "session_options",
    "update",
]

OVERRIDE_KEYS = ("model", "system", "tools", "mcp_servers", "skills")
RESOURCE_TYPES = ("github_repository", "file", "memory_store")
INITIAL_TYPES = ("user.message", "user.define_outcome")
MAX_INITIAL_EVENTS = 50  # the API's cap
STATUSES = ("idle", "running", "rescheduling", "terminated")


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionOptions:
    """The checked create-time options (see the module docstring)."""

    agent_version: int | str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    vault_ids: tuple[str, ...] = ()
    resources: tuple[dict[str, Any], ...] = ()
    initial_events: tuple[dict[str, Any], ...] = ()


def github_repository(
    url: str,
    *,
    authorization_token: str | None = None,
    mount_path: str | None = None,
    branch: str | None = None,
    commit: str | None = None,
) -> dict[str, Any]:
    """A GitHub repository to mount (``checkout``: a ``branch`` or a ``commit``)."""
    resource: dict[str, Any] = {"type": "github_repository", "url": url}
    if authorization_token is not None:
        resource["authorization_token"] = authorization_token
    if mount_path is not None:
        resource["mount_path"] = mount_path
    if branch is not None and commit is not None:
        raise InvalidOptionsError("checkout takes a branch or a commit, not both", option="commit")
    if branch is not None:
        resource["checkout"] = {"type": "branch", "name": branch}
    if commit is not None:
        resource["checkout"] = {"type": "commit", "sha": commit}
    return resource


def file_resource(file_id: str, *, mount_path: str | None = None) -> dict[str, Any]:
    """An uploaded file to mount (default ``/mnt/session/uploads/<id>``)."""
    resource: dict[str, Any] = {"type": "file", "file_id": check_id("file", file_id)}
    if mount_path is not None:
        resource["mount_path"] = mount_path
    return resource


def memory_store(
    memory_store_id: str, *, access: str | None = None, instructions: str | None = None
) -> dict[str, Any]:
    """A memory store the agent reads (and, with ``access="read_write"``, writes)."""
    resource: dict[str, Any] = {"type": "memory_store", "memory_store_id": memory_store_id}
    if access is not None:
        resource["access"] = access
    if instructions is not None:
        resource["instructions"] = instructions
    return resource


def _refuse(option: str, message: str) -> InvalidOptionsError:
    return InvalidOptionsError(message, option=option)


def session_options(
    *,
    agent_version: Any = None,
    session_overrides: Any = None,
    vault_ids: Any = None,
    session_resources: Any = None,
    initial_events: Any = None,
) -> SessionOptions:
    """Check the create-time options (``InvalidOptionsError`` naming the bad one)."""
    if agent_version is not None and agent_version != "latest":
        if isinstance(agent_version, bool) or not isinstance(agent_version, int):
            raise _refuse("agent_version", "agent_version is an int (>= 1) or 'latest'")
        if agent_version < 1:
            raise _refuse("agent_version", "agent_version is an int (>= 1) or 'latest'")
    overrides = dict(session_overrides or {})
    if not isinstance(session_overrides, Mapping | None):
        raise _refuse("session_overrides", "session_overrides is a mapping")
    unknown = sorted(set(overrides) - set(OVERRIDE_KEYS))
    if unknown:
        raise _refuse(
            "session_overrides",
            f"session_overrides takes {', '.join(OVERRIDE_KEYS)}; not {unknown[0]!r}",
        )
    vaults = () if vault_ids is None else vault_ids
    if isinstance(vaults, str) or not all(
        isinstance(v, str) and ID_PATTERN.fullmatch(v) for v in vaults
    ):
        raise _refuse("vault_ids", "vault_ids is a list of vault ids ('vlt_...')")
    resources = () if session_resources is None else session_resources
    if isinstance(resources, Mapping) or not all(
        isinstance(r, Mapping) and r.get("type") in RESOURCE_TYPES for r in resources
    ):
        raise _refuse(
            "session_resources",
            "session_resources is a list of github_repository / file / memory_store "
            "resources (see github_repository(), file_resource(), memory_store())",
        )
    events = () if initial_events is None else initial_events
    if isinstance(events, Mapping) or not all(
        isinstance(e, Mapping) and e.get("type") in INITIAL_TYPES for e in events
    ):
        raise _refuse(
            "initial_events", "initial_events is a list of user.message / user.define_outcome"
        )
    if len(events) > MAX_INITIAL_EVENTS:
        raise _refuse("initial_events", f"at most {MAX_INITIAL_EVENTS} initial events")
    return SessionOptions(
        agent_version=agent_version,
        overrides=overrides,
        vault_ids=tuple(vaults),
        resources=tuple(dict(r) for r in resources),
        initial_events=tuple(dict(e) for e in events),
    )


def agent_reference(agent_id: str, known_version: int | None, options: SessionOptions) -> Any:
    """The create body's ``agent``: a bare id (latest), a pinned ``{"type": "agent"}`` or
    ``{"type": "agent_with_overrides"}`` (see the module docstring)."""
    if options.agent_version == "latest":
        version: int | None = None
    elif isinstance(options.agent_version, int):
        version = options.agent_version
    else:
        version = known_version
    if options.overrides:
        ref: dict[str, Any] = {"type": "agent_with_overrides", "id": agent_id}
        if version is not None:
            ref["version"] = version
        return {**ref, **options.overrides}
    if version is None:
        return agent_id
    return {"type": "agent", "id": agent_id, "version": version}


def create_body(
    agent: Any, environment_id: str, options: SessionOptions, **rest: Any
) -> dict[str, Any]:
    """``POST /v1/sessions``: the agent reference, the environment, the options, and the
    provider's ``title`` / ``metadata`` / ``budget`` (``rest``, where set)."""
    body: dict[str, Any] = {"agent": agent, "environment_id": environment_id}
    body.update({k: v for k, v in rest.items() if v})
    if options.vault_ids:
        body["vault_ids"] = list(options.vault_ids)
    if options.resources:
        body["resources"] = [dict(r) for r in options.resources]
    if options.initial_events:
        body["initial_events"] = [dict(e) for e in options.initial_events]
    return body


# -- the verbs ---------------------------------------------------------------------------
def _json(model: Any) -> dict[str, Any]:
    out: dict[str, Any] = model.model_dump(mode="json")
    return out


async def list_sessions(
    api: Api,
    *,
    agent_id: str | None = None,
    statuses: Sequence[str] = (),
    include_archived: bool = False,
) -> list[dict[str, Any]]:
    """Every session (all pages), newest first, optionally of one agent or statuses."""
    if agent_id is not None:
        check_id("agent", agent_id)
    bad = [s for s in statuses if s not in STATUSES]
    if bad or isinstance(statuses, str):
        raise _refuse("statuses", f"statuses are of {', '.join(STATUSES)}")
    sessions = api.client.beta.sessions

    async def page(cursor: str | None) -> Any:
        kwargs: dict[str, Any] = {"limit": 100, "include_archived": include_archived}
        if agent_id is not None:
            kwargs["agent_id"] = agent_id
        if statuses:
            kwargs["statuses"] = list(statuses)
        if cursor is not None:
            kwargs["page"] = cursor
        return await sessions.with_raw_response.list(**kwargs, **api.opts)

    return await api.list_raw("/v1/sessions", page)


async def retrieve(api: Api, session_id: str) -> dict[str, Any]:
    sid = check_id("session", session_id)
    sessions = api.client.beta.sessions
    return _json(
        await api.call("get", f"/v1/sessions/{sid}", lambda: sessions.retrieve(sid, **api.opts))
    )


async def update(
    api: Api,
    session_id: str,
    *,
    title: str | None = None,
    metadata: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """Retitle a session or patch its metadata (a ``None`` value deletes that key)."""
    sid = check_id("session", session_id)
    if title is None and metadata is None:
        raise _refuse("title", "update needs a title or metadata")
    kwargs: dict[str, Any] = {}
    if title is not None:
        kwargs["title"] = title
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str | None) for k, v in metadata.items()):
            raise _refuse("metadata", "metadata maps strings to strings (None deletes)")
        kwargs["metadata"] = dict(metadata)
    sessions = api.client.beta.sessions
    path = f"/v1/sessions/{sid}"
    return _json(await api.call("post", path, lambda: sessions.update(sid, **kwargs, **api.opts)))


async def archive(api: Api, session_id: str) -> dict[str, Any]:
    """Archive a session (its history stays readable; no more sends)."""
    sid = check_id("session", session_id)
    sessions = api.client.beta.sessions
    path = f"/v1/sessions/{sid}/archive"
    return _json(await api.call("post", path, lambda: sessions.archive(sid, **api.opts)))


async def delete(api: Api, session_id: str) -> dict[str, Any]:
    """Delete a session with its events and the files it produced."""
    sid = check_id("session", session_id)
    sessions = api.client.beta.sessions
    path = f"/v1/sessions/{sid}"
    return _json(await api.call("delete", path, lambda: sessions.delete(sid, **api.opts)))
