"""``provision`` / ``teardown``: create-or-reuse a host's agent (and environment).

Results are cached in-process per (provider, spec, environment, options): a second
``provision`` of the same content returns the same handle without a request. A failed
provision is not cached. ``teardown`` releases a handle and drops it from the cache.

A host implements ``async provision(spec, *, environment, **options) -> handle`` and
``async teardown(handle, **options) -> report``; handles are JSON-serialisable frozen
dataclasses with ``to_dict``/``from_dict``.
"""

from __future__ import annotations

import threading
from typing import Any

from managedloop.errors import UnsupportedError
from managedloop.provisioning.specs import AgentSpec, EnvironmentSpec, canonical_json, digest_of

__all__ = ["clear_cache", "provision", "teardown"]

_lock = threading.Lock()
_cache: dict[tuple[Any, ...], Any] = {}


def _key(
    provider: Any, spec: AgentSpec, environment: Any, options: dict[str, Any]
) -> tuple[Any, ...]:
    env = environment.identity() if isinstance(environment, EnvironmentSpec) else environment
    env_name = environment.name if isinstance(environment, EnvironmentSpec) else None
    ident = getattr(provider, "cache_identity", None)
    who = ident() if callable(ident) else id(provider)
    return (
        who,
        spec.name,
        spec.digest,
        env_name,
        digest_of(env),
        canonical_json(options),
    )


async def provision(
    provider: Any, spec: AgentSpec, *, environment: Any = None, **options: Any
) -> Any:
    """Create or reuse ``spec`` (and ``environment``) on ``provider``; return its handle."""
    do = getattr(provider, "provision", None)
    if do is None:
        raise UnsupportedError(
            f"the {getattr(provider, 'name', provider)!r} host has nothing to provision",
            code="not_supported",
        )
    key = _key(provider, spec, environment, options)
    with _lock:
        if key in _cache:
            return _cache[key]
    handle = await do(spec, environment=environment, **options)
    with _lock:
        _cache[key] = handle
    return handle


async def teardown(provider: Any, handle: Any, **options: Any) -> Any:
    """Release what ``provision`` made; returns the host's per-resource report."""
    do = getattr(provider, "teardown", None)
    if do is None:
        raise UnsupportedError(
            f"the {getattr(provider, 'name', provider)!r} host has nothing to tear down",
            code="not_supported",
        )
    report = await do(handle, **options)
    with _lock:
        for key in [k for k, v in _cache.items() if v == handle]:
            del _cache[key]
    return report


def clear_cache() -> None:
    with _lock:
        _cache.clear()
