"""``provision`` / ``teardown``: create-or-reuse a host's agent (and environment).

Results are kept in a :class:`~managedloop.stores.Store` (``store=``; default: the
in-process ``MemoryStore`` of :func:`managedloop.provisioning.lifecycle.default_store`)
under ``provision:<sha256>`` of (the provider's ``cache_identity``, the spec's name and
digest, the environment's digest (its name excluded) and the options). A second
``provision`` of the same content returns the stored handle without a request, in this
process or, with a persistent store, in any other. A failed provision is not stored.
``teardown`` releases a handle and drops every entry holding it; a failed teardown drops
nothing (the handle keeps being served).

A host implements ``async provision(spec, *, environment, **options) -> handle`` and
``async teardown(handle, **options) -> report``; handles are frozen dataclasses with
``to_dict``/``from_dict`` defined in a ``managedloop`` module (an entry naming any other
type is not trusted: it is a miss).

Options that are not JSON data (an injected ``clock``, a ``progress`` callback) do not
key the entry: they change how a provision waits, not what it makes.
"""

from __future__ import annotations

import importlib
import json
import logging
from typing import Any

import anyio

from managedloop.errors import InvalidOptionsError, StoreError, UnsupportedError
from managedloop.provisioning import lifecycle
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec, digest_of
from managedloop.stores import Store

__all__ = ["clear_cache", "provision", "teardown"]

logger = logging.getLogger("managedloop.provisioning")
_PREFIX = "provision:"


def _plain_options(options: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in options.items():
        try:
            json.dumps(value, allow_nan=False, sort_keys=True)
        except (TypeError, ValueError):
            continue
        out[key] = value
    return out


def _key(provider: Any, spec: AgentSpec, environment: Any, options: dict[str, Any]) -> str:
    env = environment.identity() if isinstance(environment, EnvironmentSpec) else environment
    ident = getattr(provider, "cache_identity", None)
    who = list(ident()) if callable(ident) else f"object:{id(provider)}"
    try:
        env_digest = digest_of(env)
    except InvalidOptionsError:  # an environment id or a handle object: its repr is stable
        env_digest = repr(env)
    return _PREFIX + digest_of(
        {
            "host": who,
            "name": spec.name,
            "digest": spec.digest,
            "environment": env_digest,
            "options": _plain_options(options),
        }
    )


def _type_name(handle: Any) -> str:
    return f"{type(handle).__module__}:{type(handle).__qualname__}"


def _entry(handle: Any) -> dict[str, Any] | None:
    """What the store keeps for ``handle`` (``None``: not storable, so not kept)."""
    if callable(getattr(handle, "to_dict", None)):
        return {"type": _type_name(handle), "handle": handle.to_dict()}
    try:
        json.dumps(handle, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return {"type": "json", "handle": handle}  # a host whose handles are plain JSON


def _load(entry: dict[str, Any]) -> Any:
    """The handle an entry holds, or ``None`` for a foreign or damaged entry."""
    where = entry.get("type")
    data = entry.get("handle")
    if where == "json":
        return data
    if not isinstance(where, str) or not where.startswith("managedloop.") or ":" not in where:
        return None
    module, _, name = where.partition(":")
    try:
        cls = getattr(importlib.import_module(module), name)
        return cls.from_dict(data)
    except Exception:
        return None


async def provision(
    provider: Any,
    spec: AgentSpec,
    *,
    environment: Any = None,
    store: Store | None = None,
    **options: Any,
) -> Any:
    """Create or reuse ``spec`` (and ``environment``) on ``provider``; return its handle."""
    do = getattr(provider, "provision", None)
    if do is None:
        raise UnsupportedError(
            f"the {getattr(provider, 'name', provider)!r} host has nothing to provision",
            code="not_supported",
        )
    st = lifecycle.as_store(store)
    key = _key(provider, spec, environment, options)
    try:
        entry = await anyio.to_thread.run_sync(st.get, key)
    except StoreError as exc:
        logger.warning("provision store unreadable (%s): treated as a miss", exc.code)
        entry = None
    if entry is not None:
        handle = _load(entry)
        if handle is not None:
            return handle
        logger.warning("provision store entry %s has an unexpected shape: re-provisioning", key)
    handle = await do(spec, environment=environment, **options)
    value = _entry(handle)
    if value is None:
        logger.debug("provision handle %r is not JSON: not stored", type(handle).__name__)
    else:
        try:
            await anyio.to_thread.run_sync(st.put, key, value)
        except StoreError as exc:
            # A broken store never blocks provisioning: the handle is still returned.
            logger.warning("provision store could not keep %s (%s)", key, exc.code)
    return handle


async def teardown(
    provider: Any, handle: Any, *, store: Store | None = None, **options: Any
) -> Any:
    """Release what ``provision`` made; returns the host's per-resource report."""
    do = getattr(provider, "teardown", None)
    if do is None:
        raise UnsupportedError(
            f"the {getattr(provider, 'name', provider)!r} host has nothing to tear down",
            code="not_supported",
        )
    report = await do(handle, **options)
    st = lifecycle.as_store(store)
    wanted = (_entry(handle) or {}).get("handle")

    def unless_replaced(entry: dict[str, Any] | None) -> dict[str, Any] | None:
        # Dropped only if it still holds this handle: another process may have stored a
        # new one under the key since the scan.
        return None if entry is None or entry.get("handle") == wanted else entry

    def evict() -> None:
        for key, entry in st.scan(_PREFIX).items():
            if entry.get("handle") == wanted:
                st.update(key, unless_replaced)

    try:
        await anyio.to_thread.run_sync(evict)
    except StoreError as exc:
        logger.warning("teardown could not evict the handle from the store (%s)", exc.code)
    return report


def clear_cache() -> None:
    """Forget every handle in the default in-process store (not in a ``store=`` you pass)."""
    lifecycle.reset_default_store()
