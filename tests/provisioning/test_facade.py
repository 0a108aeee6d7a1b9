"""``ml.provision`` / ``ml.teardown`` over a store (issue 10 item 3, the ``store=`` part).

§9 lines covered (reference-inventory.md):

* provisioner_test / provisioning_test: a miss provisions once, a hit is served without
  calling the host; a changed spec re-provisions; environments differing only by name
  share the entry; the same spec on two providers gets two handles; a failed provision is
  not stored (the next call provisions); a store that fails on read is a miss and one that
  fails on write still returns the handle; teardown evicts from the given store, a failed
  teardown evicts nothing.

Deliberately changed: a stored handle comes back equal (a JSON round trip), not identical;
an entry naming a type outside ``managedloop`` is never loaded (a miss); options that are
not JSON data (an injected clock, a progress callback) do not key the entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

import managedloop as ml
from managedloop.errors import StoreError
from managedloop.stores import MemoryStore

pytestmark = pytest.mark.anyio


class Host:
    name = "fake"

    def __init__(self, who: str = "acct") -> None:
        self.who = who
        self.made = 0
        self.fail_teardown = False
        self.fail_provision = False

    def cache_identity(self) -> tuple[str, ...]:
        return ("fake", self.who)

    async def provision(self, spec: ml.AgentSpec, *, environment: Any = None, **o: Any) -> Any:
        if self.fail_provision:
            raise ml.ProvisioningError("no", code="create_agent_failed")
        self.made += 1
        return {"agent_id": f"{self.who}-{self.made}"}

    async def teardown(self, handle: Any) -> str:
        if self.fail_teardown:
            raise ml.ProvisioningError("no", code="teardown_failed")
        return "ok"


class Broken(MemoryStore):
    def __init__(self, *, read: bool = False, write: bool = False) -> None:
        super().__init__()
        self.read, self.write = read, write

    def get(self, key: str) -> dict[str, Any] | None:
        if self.read:
            raise StoreError("down", code="store_unavailable")
        return super().get(key)

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        if self.write:
            raise StoreError("down", code="store_unavailable")
        super().put(key, value)


SPEC = ml.AgentSpec(name="a", system_prompt="s")


async def test_hit_miss_keys_and_failures() -> None:
    host, other, store = Host(), Host("b"), MemoryStore()
    first = await ml.provision(host, SPEC, store=store, clock=lambda: 0.0)
    assert await ml.provision(host, SPEC, store=store, clock=object()) == first
    assert host.made == 1
    await ml.provision(host, ml.AgentSpec(name="a", system_prompt="t"), store=store)
    assert host.made == 2
    env_a = ml.EnvironmentSpec(name="x", config={"type": "cloud"})
    env_b = ml.EnvironmentSpec(name="y", config={"type": "cloud"})
    with_env = await ml.provision(host, SPEC, store=store, environment=env_a)
    assert await ml.provision(host, SPEC, store=store, environment=env_b) == with_env
    assert with_env != first
    assert (await ml.provision(other, SPEC, store=store))["agent_id"] == "b-1"
    host.fail_provision = True
    with pytest.raises(ml.ProvisioningError):
        await ml.provision(host, ml.AgentSpec(name="z"), store=store)
    host.fail_provision = False
    await ml.provision(host, ml.AgentSpec(name="z"), store=store)  # not stored: provisions


async def test_a_broken_store_never_blocks_provisioning() -> None:
    host = Host()
    assert await ml.provision(host, SPEC, store=Broken(read=True))
    assert await ml.provision(host, SPEC, store=Broken(write=True))
    assert host.made == 2


async def test_foreign_entries_and_non_json_handles() -> None:
    host, store = Host(), MemoryStore()
    await ml.provision(host, SPEC, store=store)
    ((key, _),) = store.scan("provision:").items()
    store.put(key, {"type": "os:system", "handle": "rm -rf /"})
    assert (await ml.provision(host, SPEC, store=store))["agent_id"] == "acct-2"

    class ObjectHost(Host):
        async def provision(self, spec: ml.AgentSpec, **o: Any) -> Any:
            self.made += 1
            return object()

    objects = ObjectHost("obj")
    await ml.provision(objects, SPEC, store=store)
    await ml.provision(objects, SPEC, store=store)
    assert objects.made == 2  # not JSON: not stored


async def test_teardown_evicts_only_on_success() -> None:
    host, store = Host(), MemoryStore()
    handle = await ml.provision(host, SPEC, store=store)
    host.fail_teardown = True
    with pytest.raises(ml.ProvisioningError):
        await ml.teardown(host, handle, store=store)
    assert await ml.provision(host, SPEC, store=store) == handle  # still served
    host.fail_teardown = False
    assert await ml.teardown(host, handle, store=store) == "ok"
    assert store.scan("provision:") == {}
    with pytest.raises(ml.InvalidOptionsError):
        await ml.provision(host, SPEC, store={})  # type: ignore[arg-type]
