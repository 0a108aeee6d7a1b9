"""The provisioning lifecycle: ensure, tag, resolve, prune (reference §5.5-5.6).

The Docker model, and it reads true here:

========================  ================================================================
Docker                    managedloop
========================  ================================================================
Dockerfile                ``AgentSpec`` / ``EnvironmentSpec``
image digest              ``spec.digest`` (SHA-256 of the canonical serialisation)
repository                the base name (``spec.name``)
``repo@digest``           the host-side name ``<base>_<digest8>``
``docker build`` (cached) ``ensure_agent`` / ``ensure_environment``: build if absent
``repo:tag``              ``tag(base, tag, handle)``: a movable pointer in the store
``docker run``            ``ml.run``: a session, ephemeral, referencing the image
``docker image prune``    ``prune_agents`` / ``prune_environments``: explicit, never automatic
========================  ================================================================

What each verb guarantees:

* **ensure** — a store hit returns the handle and makes **no request** (except with
  ``update=True`` on AgentCore, which always asks: see :func:`ensure_agent`). A miss creates
  ``<base>_<digest8>``; a ``409`` on create recovers by the exact live name (a live
  resource with that name *is* this spec): the host lists every page, archived included,
  and adopts the live exact match; an archived namesake is ``<kind>_archived``, no match
  at all (it vanished after the 409) is ``<kind>_name_conflict``. On AgentCore the agent is
  a harness, created, adopted and waited for (harness, then endpoint) exactly as
  ``provision`` does, under one deadline, with the same rollback; a DELETING namesake is
  waited out and re-created (AgentCore has no archive). A store entry of the wrong shape
  or for another account is a miss and is overwritten.
* **tag** — ``base:tag -> digest8`` for one kind; **untag** removes it. Both change one
  store key through ``Store.update``, so concurrent tags and untags of one base, from any
  number of processes sharing the store, all land (none overwrites another's).
* **resolve** — ``"base:tag"`` to the handle; never a fallback: a reference without
  ``:`` (or with an empty side) is ``invalid_reference`` at once, an unknown tag is
  ``unknown_tag``, a tag whose digest has no stored handle is ``untracked_digest``.
* **prune** — archives (AgentCore: deletes) the live versions of exactly that base
  (strictly ``<base>_<8 hex>``), beyond the newest ``keep`` (required, ``>= 1``; no
  default), never a tagged digest, **oldest first**; after each archive the version's
  store entry is removed. On AgentCore the versions of the harness named for the base
  alone (``ensure_agent(update=True)``) count too, in the same newest-first order; the
  service keeps every version and has no call that deletes one, so prune only *forgets*
  those beyond ``keep`` (drops their store entries, ``PruneReport.forgotten``). The
  first failure stops the prune and raises ``ProvisioningError(code="prune_partial")``
  whose ``context["report"]`` says what was archived so far and what failed.
  ``dry_run=True`` returns the same report without archiving anything.

Store layout (JSON objects; one store may serve several hosts):

* ``ml:<kind>:<base>:<digest8>`` -> ``{"handle": {...}, "account": <scope>}``, kind
  ``agent`` (Claude), ``environment`` (Claude) or ``harness`` (AgentCore);
* ``ml:tags:<kind>:<base>`` -> ``{"tags": {<tag>: <digest8>}}``.

``account`` is a one-way fingerprint of the host endpoint and credential (never the
secret): ``ensure`` serves an entry only to the account that stored it. ``resolve`` has no
provider to check against, so keep one store per account when tags matter.

Every verb is async with a ``*_sync`` twin (``managedloop.ensure_agent_sync`` ...). Store
calls run in a worker thread (a file lock may block). What the command line shows reads
the store through the public helpers here too (:func:`index_key`, :func:`tags_key`,
:func:`tags`, :func:`is_tracked`, :func:`as_store`), never through private names.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import anyio

from managedloop.config import MISSING
from managedloop.errors import InvalidOptionsError, ProvisioningError, StoreError
from managedloop.provisioning.handles import (
    AgentHandle,
    EnvironmentHandle,
    Handle,
    HarnessHandle,
    handle_from_dict,
)
from managedloop.provisioning.names import NamePolicy, compose, compose_base, version_of
from managedloop.provisioning.runtimes import bootstrap_for
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec
from managedloop.stores import MemoryStore, Store

__all__ = [
    "LifecycleHost",
    "Listed",
    "PruneReport",
    "VersionedHost",
    "as_store",
    "default_store",
    "ensure_agent",
    "ensure_environment",
    "index_key",
    "is_tracked",
    "prune_agents",
    "prune_environments",
    "resolve",
    "tag",
    "tags",
    "tags_key",
    "untag",
]

logger = logging.getLogger("managedloop.provisioning")
T = TypeVar("T")
_KINDS = ("agent", "environment", "harness")

_default_store: Store = MemoryStore()


def default_store() -> Store:
    """The in-process store the verbs use when ``store=`` is not given."""
    return _default_store


def reset_default_store() -> None:
    """Empty the default store (tests; ``managedloop.provisioning.clear_cache`` calls it)."""
    global _default_store
    _default_store = MemoryStore()


# ---------------------------------------------------------------------------- host contract


@dataclass(frozen=True, kw_only=True, slots=True)
class Listed:
    """One resource as the host lists it."""

    id: str
    """``agent_id`` / ``environment_id`` / ``harness_id``."""
    name: str
    created_at: str
    """ISO-8601, so that sorting the strings sorts by time."""
    live: bool
    """Not archived (Claude) / not DELETING (AgentCore)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Host fields a handle needs (AgentCore: ``arn``)."""
    version: str | None = None
    """Set for one version of a resource that keeps its versions itself (an AgentCore
    harness named for its base): ``id`` is the resource's, ``version`` this version's."""


class LifecycleHost(Protocol):
    """What a host gives the verbs (``provider.lifecycle()`` yields one)."""

    host: str
    policy: NamePolicy
    agent_kind: str
    """``agent`` (Claude) or ``harness`` (AgentCore)."""
    account: str
    """A one-way fingerprint of endpoint + credential (store scoping)."""

    def agent_digest(self, spec: AgentSpec, environment: EnvironmentSpec | None) -> str: ...

    async def build_agent(
        self,
        spec: AgentSpec,
        *,
        name: str,
        digest: str,
        environment: EnvironmentSpec | None,
        options: Mapping[str, Any],
    ) -> AgentHandle | HarnessHandle: ...

    async def build_environment(
        self, spec: EnvironmentSpec, *, name: str, digest: str
    ) -> EnvironmentHandle: ...

    async def listing(self, kind: str) -> list[Listed]:
        """Every resource of ``kind``, every page, archived ones included."""
        ...

    async def retire(self, kind: str, item: Listed) -> None:
        """Archive (Claude) or delete (AgentCore) one listed resource."""
        ...


class VersionedHost(LifecycleHost, Protocol):
    """A host whose agents can also be versions of one resource named for its base
    (AgentCore: UpdateHarness + ListHarnessVersions); ``ensure_agent(update=True)``."""

    async def version_listing(self, name: str) -> list[Listed]:
        """Every version of the live resource called exactly ``name`` (none: ``[]``),
        each a :class:`Listed` with ``version`` set."""
        ...


def _versioned(host: LifecycleHost) -> VersionedHost | None:
    return host if callable(getattr(host, "version_listing", None)) else None  # type: ignore[return-value]


def _host(provider: Any) -> AbstractAsyncContextManager[LifecycleHost]:
    make = getattr(provider, "lifecycle", None)
    if make is None:
        raise InvalidOptionsError(
            f"the {getattr(provider, 'name', type(provider).__name__)!r} host keeps no agents "
            "server-side (ensure/prune need ClaudeManagedAgents or BedrockAgentCore)",
            code="not_supported",
            option="provider",
        )
    cm: AbstractAsyncContextManager[LifecycleHost] = make()
    return cm


# ---------------------------------------------------------------------------- store helpers


async def _s(fn: Callable[..., T], *args: Any) -> T:
    return await anyio.to_thread.run_sync(lambda: fn(*args))


def index_key(kind: str, base: str, digest8: str) -> str:
    """The store key of one version's handle (see "Store layout" above)."""
    return f"ml:{kind}:{base}:{digest8}"


def tags_key(kind: str, base: str) -> str:
    """The store key of a base's tags (see "Store layout" above)."""
    return f"ml:tags:{kind}:{base}"


def as_store(store: Any) -> Store:
    """``store`` checked to be a :class:`~managedloop.stores.Store`; ``None``: the default
    in-process store. What every verb taking ``store=`` does first."""
    if store is None:
        return _default_store
    if not isinstance(store, Store):
        raise InvalidOptionsError(
            "store= must implement managedloop.stores.Store (get/put/update/delete/scan/close)",
            option="store",
        )
    return store


_store = as_store  # the verbs' short name for it


async def _cached(store: Store, key: str, kind: str, account: str) -> Handle | None:
    """The stored handle under ``key`` if it is a well-formed handle of this account."""
    try:
        entry = await _s(store.get, key)
    except StoreError as exc:
        logger.warning("provisioning store unreadable at %s (%s): treated as a miss", key, exc.code)
        return None
    if entry is None:
        return None
    try:
        handle = handle_from_dict(kind, entry.get("handle") or {})
    except (InvalidOptionsError, TypeError):
        logger.warning("provisioning store entry %s has an unexpected shape: rebuilding", key)
        return None
    if entry.get("account") != account:
        logger.info("provisioning store entry %s belongs to another account: rebuilding", key)
        return None
    return handle


async def _remember(store: Store, key: str, handle: Handle, account: str) -> None:
    try:
        await _s(store.put, key, {"handle": handle.to_dict(), "account": account})
    except StoreError as exc:
        # A broken store never blocks provisioning: the handle is still returned.
        logger.warning("provisioning store could not write %s (%s)", key, exc.code)


# ---------------------------------------------------------------------------- ensure


async def ensure_agent(
    provider: Any,
    spec: Any,
    *,
    store: Store | None = None,
    name: str | None = None,
    environment: Any = None,
    **options: Any,
) -> AgentHandle | HarnessHandle:
    """Build ``spec`` on ``provider`` if absent; return its handle (see the module docstring).

    ``name`` overrides the base (default ``spec.name``). On Claude the result is an
    :class:`AgentHandle` (environments are separate: :func:`ensure_environment`); on
    AgentCore a :class:`HarnessHandle` for a harness folding ``environment`` in, and
    ``options`` are ``provision``'s (``execution_role_arn`` required, ``timeout``,
    ``endpoint_name``, ``create_endpoint``, ``progress``, ``clock``/``sleep``...).

    ``update=True`` (AgentCore): one harness named for the base alone, a changed spec a new
    **version** of it (UpdateHarness), the handle's ``harness_version`` the version that
    is this spec. It always asks the host (the harness's latest version may have moved
    since the store saw it) and stores the handle under the spec's digest as usual, so
    ``tag``/``resolve`` give that version and ``prune_agents`` sees every version.
    """
    agent = AgentSpec.coerce(spec)
    base = name if name is not None else agent.require_name()
    env = EnvironmentSpec.coerce(environment)
    st = _store(store)
    update = options.get("update", False)
    async with _host(provider) as host:
        if env is not None and host.agent_kind == "agent":
            raise InvalidOptionsError(
                "on Claude an agent has no environment: ensure_environment(provider, env) and "
                "pass its handle as ClaudeManagedAgents(environment=...)",
                option="environment",
            )
        digest = host.agent_digest(agent, env)
        key = index_key(host.agent_kind, base, digest[:8])
        if update is True:
            if _versioned(host) is None:
                raise InvalidOptionsError(
                    f"update=True (versions of one agent under its base name) is not "
                    f"supported on {host.host}: each spec is its own agent <base>_<digest8>",
                    code="not_supported",
                    option="update",
                    host=host.host,
                )
            handle = await host.build_agent(
                agent,
                name=compose_base(base, host.policy, kind="agent"),
                digest=digest,
                environment=env,
                options=options,
            )
            await _remember(st, key, handle, host.account)
            return handle
        host_name = compose(base, digest, host.policy, kind="agent")
        hit = await _cached(st, key, host.agent_kind, host.account)
        if isinstance(hit, AgentHandle | HarnessHandle):
            return hit
        handle = await host.build_agent(
            agent, name=host_name, digest=digest, environment=env, options=options
        )
        await _remember(st, key, handle, host.account)
        return handle


async def ensure_environment(
    provider: Any, spec: Any, *, store: Store | None = None, name: str | None = None
) -> EnvironmentHandle:
    """Build the environment ``spec`` (an :class:`EnvironmentSpec` or a flat mapping) if
    absent; return its :class:`EnvironmentHandle`, ``bootstrap`` set when runtimes are
    declared (recomputed on every path, never stored). ``name`` overrides the base
    (default ``spec.name``, else ``"env"``). Claude only."""
    if spec is None:
        raise InvalidOptionsError(
            "ensure_environment needs an environment spec, got None",
            code="invalid_environment_spec",
            option="spec",
        )
    env = EnvironmentSpec.coerce(spec)
    assert env is not None
    base = name or env.name or "env"
    st = _store(store)
    async with _host(provider) as host:
        if host.agent_kind != "agent":
            raise InvalidOptionsError(
                "AgentCore has no separate environments: pass environment= to ensure_agent "
                "(the harness folds it in)",
                code="not_supported",
                option="provider",
            )
        digest = env.digest
        host_name = compose(base, digest, host.policy, kind="environment")
        key = index_key("environment", base, digest[:8])
        hit = await _cached(st, key, "environment", host.account)
        if not isinstance(hit, EnvironmentHandle):
            hit = await host.build_environment(env, name=host_name, digest=digest)
            await _remember(st, key, hit, host.account)
    return EnvironmentHandle(
        environment_id=hit.environment_id,
        name=hit.name,
        digest=hit.digest,
        bootstrap=bootstrap_for(env.runtimes),
    )


# ---------------------------------------------------------------------------- tags


def _kind_of(handle: Any, kind: str | None) -> tuple[str, str]:
    """``(kind, digest8)`` of a handle or a raw 8/64-hex digest (which needs ``kind``)."""
    if isinstance(handle, AgentHandle | EnvironmentHandle | HarnessHandle):
        if kind is not None and kind != handle.kind:
            raise InvalidOptionsError(
                f"kind={kind!r} but the handle is a {handle.kind}", option="kind"
            )
        return handle.kind, handle.digest8
    if isinstance(handle, str):
        text = handle.strip()
        if len(text) in (8, 64) and all(c in "0123456789abcdef" for c in text):
            if kind not in _KINDS:
                raise InvalidOptionsError(
                    f"tagging a raw digest needs kind= (one of {', '.join(_KINDS)})",
                    option="kind",
                )
            assert kind is not None
            return kind, text[:8]
    raise InvalidOptionsError(
        "tag takes a handle (AgentHandle, EnvironmentHandle, HarnessHandle) or a lowercase "
        "hex digest (8 or 64 characters)",
        option="handle",
    )


def _check_part(what: str, value: Any, *, allow_colon: bool = False) -> str:
    if (
        not isinstance(value, str)
        or not value
        or (not allow_colon and ":" in value)
        or any(ord(c) < 0x20 or c == "\x7f" for c in value)
    ):
        raise InvalidOptionsError(
            f"{what} must be a non-empty string without control characters"
            f"{'' if allow_colon else ' or colons'}, got {value!r}",
            code="invalid_reference",
            option=what,
        )
    return value


def _tags_of(entry: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``{tag: digest8}`` of a tags entry (a damaged one reads as no tags)."""
    found = (entry or {}).get("tags")
    if not isinstance(found, Mapping):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


async def tag(
    base: str, tag: str, handle: Any, *, store: Store | None = None, kind: str | None = None
) -> str | None:
    """Point ``base:tag`` at ``handle``'s digest (movable: retagging moves it); returns the
    digest8 it pointed at before (``None``: a new tag). Atomic (``Store.update``): a
    concurrent tag or untag of another tag of this base is never lost."""
    _check_part("base", base)
    _check_part("tag", tag, allow_colon=True)
    which, digest8 = _kind_of(handle, kind)
    st = _store(store)
    before: list[str | None] = []

    def point(entry: dict[str, Any] | None) -> dict[str, Any]:
        current = _tags_of(entry)
        before[:] = [current.get(tag)]  # the last run is the one that landed (Redis retries)
        return {"tags": {**current, tag: digest8}}

    await _s(st.update, tags_key(which, base), point)
    return before[0] if before else None


async def untag(
    base: str, tag: str, *, store: Store | None = None, kind: str | None = None
) -> str | None:
    """Remove ``base:tag``; returns the digest8 it pointed at (``None``: there was no such
    tag, which is not an error). ``kind`` picks among kinds when one base has the tag
    under several (else ``ambiguous_tag``, as :func:`resolve`). Atomic, as :func:`tag`."""
    _check_part("base", base)
    _check_part("tag", tag, allow_colon=True)
    if kind is not None and kind not in _KINDS:
        raise InvalidOptionsError(f"kind must be one of {', '.join(_KINDS)}", option="kind")
    st = _store(store)
    if kind is None:
        having = [k for k in _KINDS if tag in await tags(base, kind=k, store=st)]
        if len(having) > 1:
            raise InvalidOptionsError(
                f"{base}:{tag} is tagged for {', '.join(having)}: pass kind=",
                code="ambiguous_tag",
                option="kind",
            )
        if not having:
            return None
        kind = having[0]
    removed: list[str | None] = []

    def drop(entry: dict[str, Any] | None) -> dict[str, Any] | None:
        current = _tags_of(entry)
        removed[:] = [current.pop(tag, None)]
        if entry is not None and removed[0] is None:
            return entry  # nothing to remove: leave the entry as it is
        return {"tags": current} if current else None  # the last tag gone: the key too

    await _s(st.update, tags_key(kind, base), drop)
    return removed[0] if removed else None


async def tags(base: str, *, kind: str, store: Store | None = None) -> dict[str, str]:
    """Every tag of ``base`` for ``kind`` (``agent``/``environment``/``harness``), as
    ``{tag: digest8}`` in tag order."""
    _check_part("base", base)
    if kind not in _KINDS:
        raise InvalidOptionsError(f"kind must be one of {', '.join(_KINDS)}", option="kind")
    entry = await _s(_store(store).get, tags_key(kind, base))
    return dict(sorted(_tags_of(entry).items()))


async def is_tracked(base: str, digest8: str, *, kind: str, store: Store | None = None) -> bool:
    """Whether the store holds the handle of version ``digest8`` of ``base`` (what
    ``ensure`` stored, and what a tag must point at to resolve)."""
    _check_part("base", base)
    if kind not in _KINDS:
        raise InvalidOptionsError(f"kind must be one of {', '.join(_KINDS)}", option="kind")
    return await _s(_store(store).get, index_key(kind, base, digest8)) is not None


def parse_reference(ref: Any) -> tuple[str, str]:
    """``"base:tag"`` -> ``(base, tag)``, split on the first colon (tags may contain
    colons); ``invalid_reference`` otherwise."""
    if not isinstance(ref, str) or ":" not in ref:
        raise InvalidOptionsError(
            f'a reference is "base:tag", got {ref!r}', code="invalid_reference", option="ref"
        )
    base, _, name = ref.partition(":")
    return _check_part("base", base), _check_part("tag", name, allow_colon=True)


async def resolve(ref: str, *, store: Store | None = None, kind: str | None = None) -> Handle:
    """The handle ``"base:tag"`` points at. ``kind`` (``agent``/``environment``/``harness``)
    picks among kinds when one base has the tag under several."""
    base, name = parse_reference(ref)
    if kind is not None and kind not in _KINDS:
        raise InvalidOptionsError(f"kind must be one of {', '.join(_KINDS)}", option="kind")
    st = _store(store)
    found: list[tuple[str, str]] = []
    for which in (kind,) if kind else _KINDS:
        pointed = _tags_of(await _s(st.get, tags_key(which, base))).get(name)
        if pointed is not None:
            found.append((which, pointed))
    if not found:
        raise ProvisioningError(f"no tag {ref!r}", code="unknown_tag", ref=ref)
    if len(found) > 1:
        raise InvalidOptionsError(
            f"{ref!r} is tagged for {', '.join(k for k, _ in found)}: pass kind=",
            code="ambiguous_tag",
            option="kind",
        )
    ((which, digest8),) = found
    entry = await _s(st.get, index_key(which, base, digest8))
    try:
        return handle_from_dict(which, (entry or {}).get("handle") or {})
    except (InvalidOptionsError, TypeError):
        raise ProvisioningError(
            f"{ref!r} points at digest {digest8}, which this store does not track",
            code="untracked_digest",
            ref=ref,
            digest=digest8,
        ) from None


# ---------------------------------------------------------------------------- prune


@dataclass(frozen=True, kw_only=True, slots=True)
class PruneReport:
    """What a prune archived (in order), forgot, kept, and (on a partial failure) failed on."""

    base: str
    kind: str
    archived: list[str] = field(default_factory=list)
    """Names archived (or, with ``dry_run``, that would be), oldest first."""
    kept: list[str] = field(default_factory=list)
    """The newest ``keep`` names (newest first), then any kept only because tagged."""
    failed: str | None = None
    reason: str | None = None
    dry_run: bool = False
    forgotten: list[str] = field(default_factory=list)
    """Versions of one resource (``<name>@<version>``, oldest first) beyond ``keep``: the
    host keeps every version and has no call to delete one (AgentCore: no
    DeleteHarnessVersion), so prune only drops their store entries (``resolve`` stops
    giving them). Nothing on the host changes."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "kind": self.kind,
            "archived": list(self.archived),
            "forgotten": list(self.forgotten),
            "kept": list(self.kept),
            "failed": self.failed,
            "reason": self.reason,
            "dry_run": self.dry_run,
        }


def _check_keep(keep: Any) -> int:
    if keep is MISSING or isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise InvalidOptionsError(
            "keep= is required: how many of the newest versions to keep (an int >= 1), got "
            f"{'nothing' if keep is MISSING else repr(keep)}",
            code="keep_required",
            option="keep",
        )
    return keep


def _when(created_at: str) -> float:
    """A listed ``created_at`` as a timestamp (``0.0`` when unreadable: oldest)."""
    try:
        return dt.datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _age(item: Listed) -> tuple[float, int, str]:
    """Sort key, oldest smallest: the listed time, then the version number (versions made
    within one clock tick), then the name."""
    number = int(item.version) if item.version and item.version.isdigit() else 0
    return (_when(item.created_at), number, item.name)


def versions(items: Sequence[Listed], base: str, policy: NamePolicy) -> list[Listed]:
    """The live versions of ``base`` among ``items``, newest first."""
    out = [i for i in items if i.live and version_of(i.name, base, policy) is not None]
    return sorted(out, key=_age, reverse=True)


async def _stored_versions(st: Store, kind: str, base: str) -> dict[tuple[str, str], str]:
    """``{(resource id, version): digest8}`` of the versioned handles stored for ``base``."""
    try:
        entries = await _s(st.scan, f"ml:{kind}:{base}:")
    except StoreError as exc:
        logger.warning("prune could not scan the store for %s (%s)", base, exc.code)
        return {}
    out: dict[tuple[str, str], str] = {}
    for entry in entries.values():
        try:
            handle = handle_from_dict(kind, entry.get("handle") or {})
        except (InvalidOptionsError, TypeError):
            continue
        version = getattr(handle, "harness_version", None)
        hid = getattr(handle, "harness_id", None)
        if isinstance(version, str) and isinstance(hid, str):
            out[(hid, version)] = handle.digest8
    return out


async def _forget(st: Store, key: str, item: Listed) -> None:
    """Drop the store entry under ``key`` if it is still ``item``'s version (a concurrent
    ``ensure`` may have moved the digest to a newer version: that entry stays)."""

    def drop(entry: dict[str, Any] | None) -> dict[str, Any] | None:
        handle = (entry or {}).get("handle") or {}
        if handle.get("harness_id") == item.id and handle.get("harness_version") == item.version:
            return None
        return entry

    try:
        await _s(st.update, key, drop)
    except StoreError as exc:
        logger.warning("prune could not drop the store entry of %s (%s)", item.name, exc)


async def _prune(
    provider: Any, base: str, *, kind: str | None, keep: Any, store: Any, dry_run: bool
) -> PruneReport:
    count = _check_keep(keep)
    _check_part("base", base)
    st = _store(store)
    async with _host(provider) as host:
        which = kind or host.agent_kind
        if which == "environment" and host.agent_kind != "agent":
            raise InvalidOptionsError(
                "AgentCore has no separate environments to prune",
                code="not_supported",
                option="provider",
            )
        tagged = set(_tags_of(await _s(st.get, tags_key(which, base))).values())
        live = versions(await host.listing(which), base, host.policy)
        digest8 = {i.name: version_of(i.name, base, host.policy) for i in live}
        versioned = _versioned(host)
        if versioned is not None and which == host.agent_kind:
            steps = [
                i for i in await versioned.version_listing(host.policy.host_base(base)) if i.live
            ]
            stored = await _stored_versions(st, which, base)
            digest8 |= {i.name: stored.get((i.id, str(i.version))) for i in steps}
            live = sorted([*live, *steps], key=_age, reverse=True)
        kept = [i.name for i in live[:count]]
        kept += [i.name for i in live[count:] if digest8[i.name] in tagged]
        doomed = [i for i in reversed(live[count:]) if digest8[i.name] not in tagged]
        if dry_run:
            return PruneReport(
                base=base,
                kind=which,
                archived=[i.name for i in doomed if i.version is None],
                forgotten=[i.name for i in doomed if i.version is not None],
                kept=kept,
                dry_run=True,
            )
        archived: list[str] = []
        forgotten: list[str] = []
        for item in doomed:
            if digest8[item.name] in _tags_of(await _s(st.get, tags_key(which, base))).values():
                kept.append(item.name)  # tagged since the listing (another process): spared
                continue
            if item.version is not None:  # the host keeps it: only the store forgets it
                known = digest8[item.name]
                if known is not None:
                    await _forget(st, index_key(which, base, known), item)
                forgotten.append(item.name)
                continue
            try:
                await host.retire(which, item)
            except Exception as exc:
                code = str(getattr(exc, "code", type(exc).__name__))
                partial = PruneReport(
                    base=base,
                    kind=which,
                    archived=list(archived),
                    forgotten=list(forgotten),
                    kept=kept,
                    failed=item.name,
                    reason=code,
                )
                raise ProvisioningError(
                    f"prune of {base!r} stopped at {item.name} ({code}) after archiving "
                    f"{len(archived)}",
                    code="prune_partial",
                    report=partial,
                    archived=list(archived),
                    failed=item.name,
                    reason=code,
                ) from exc
            archived.append(item.name)
            try:
                await _s(st.delete, index_key(which, base, str(digest8[item.name])))
            except StoreError as exc:
                logger.warning("prune could not drop the store entry of %s (%s)", item.name, exc)
        return PruneReport(base=base, kind=which, archived=archived, forgotten=forgotten, kept=kept)


async def prune_agents(
    provider: Any,
    base: str,
    *,
    keep: int = MISSING,  # no default: MISSING is refused with keep_required
    store: Store | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """Archive the versions of agent ``base`` beyond the newest ``keep`` (AgentCore: delete
    the harnesses, and forget the versions of a versioned harness), never a tagged one,
    oldest first."""
    return await _prune(provider, base, kind=None, keep=keep, store=store, dry_run=dry_run)


async def prune_environments(
    provider: Any,
    base: str,
    *,
    keep: int = MISSING,  # no default: MISSING is refused with keep_required
    store: Store | None = None,
    dry_run: bool = False,
) -> PruneReport:
    """Archive the versions of environment ``base`` beyond the newest ``keep`` (Claude)."""
    return await _prune(provider, base, kind="environment", keep=keep, store=store, dry_run=dry_run)
