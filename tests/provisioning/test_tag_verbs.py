"""``tag`` / ``untag`` / ``tags`` / ``is_tracked``: the tag verbs and the public store helpers
the command line reads through (issue 25: atomic; issue 27: no private names)."""

from __future__ import annotations

import pytest

import managedloop as ml
from managedloop.errors import InvalidOptionsError
from managedloop.provisioning import lifecycle
from managedloop.stores import MemoryStore

pytestmark = pytest.mark.anyio


async def test_tag_returns_what_it_pointed_at_and_untag_removes_it() -> None:
    store = MemoryStore()
    assert await ml.tag("base", "prod", "aaaaaaaa", kind="agent", store=store) is None
    assert await ml.tag("base", "prod", "bbbbbbbb", kind="agent", store=store) == "aaaaaaaa"
    assert await ml.tag("base", "canary", "cccccccc", kind="agent", store=store) is None
    assert await lifecycle.tags("base", kind="agent", store=store) == {
        "canary": "cccccccc",
        "prod": "bbbbbbbb",
    }
    assert await ml.untag("base", "prod", kind="agent", store=store) == "bbbbbbbb"
    assert await ml.untag("base", "prod", kind="agent", store=store) is None  # idempotent
    assert await lifecycle.tags("base", kind="agent", store=store) == {"canary": "cccccccc"}
    assert await ml.untag("base", "canary", store=store) == "cccccccc"  # kind found
    assert store.get(lifecycle.tags_key("agent", "base")) is None  # last tag: key gone
    assert await ml.untag("base", "nothing", store=store) is None


async def test_untag_of_a_tag_under_two_kinds_needs_kind() -> None:
    store = MemoryStore()
    await ml.tag("base", "prod", "aaaaaaaa", kind="agent", store=store)
    await ml.tag("base", "prod", "bbbbbbbb", kind="environment", store=store)
    with pytest.raises(InvalidOptionsError) as caught:
        await ml.untag("base", "prod", store=store)
    assert caught.value.code == "ambiguous_tag"
    assert await ml.untag("base", "prod", kind="environment", store=store) == "bbbbbbbb"
    assert await lifecycle.tags("base", kind="agent", store=store) == {"prod": "aaaaaaaa"}


def test_untag_sync_is_the_blocking_face() -> None:
    store = MemoryStore()
    ml.tag_sync("base", "prod", "aaaaaaaa", kind="harness", store=store)
    assert ml.untag_sync("base", "prod", kind="harness", store=store) == "aaaaaaaa"


async def test_a_damaged_tags_entry_reads_as_no_tags_and_is_repaired_by_tag() -> None:
    store = MemoryStore()
    store.put(lifecycle.tags_key("agent", "base"), {"tags": ["not", "a", "map"]})
    assert await lifecycle.tags("base", kind="agent", store=store) == {}
    await ml.tag("base", "prod", "aaaaaaaa", kind="agent", store=store)
    assert store.get(lifecycle.tags_key("agent", "base")) == {"tags": {"prod": "aaaaaaaa"}}


async def test_is_tracked_reads_the_version_index() -> None:
    store = MemoryStore()
    assert not await lifecycle.is_tracked("base", "aaaaaaaa", kind="agent", store=store)
    store.put(lifecycle.index_key("agent", "base", "aaaaaaaa"), {"handle": {}})
    assert await lifecycle.is_tracked("base", "aaaaaaaa", kind="agent", store=store)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: lifecycle.tags("base", kind="robot", store=s),
        lambda s: lifecycle.is_tracked("base", "aaaaaaaa", kind="robot", store=s),
        lambda s: ml.untag("base", "t", kind="robot", store=s),
        lambda s: ml.untag("ba:se", "t", store=s),
        lambda s: lifecycle.tags("", kind="agent", store=s),
    ],
)
async def test_bad_arguments_are_named(call: object) -> None:
    with pytest.raises(InvalidOptionsError):
        await call(MemoryStore())  # type: ignore[operator]


def test_as_store_refuses_a_store_without_update() -> None:
    class Old:  # the protocol before update: refused by name, never half-used
        def get(self, key: str) -> None: ...
        def put(self, key: str, value: object) -> None: ...
        def delete(self, key: str) -> bool: ...
        def scan(self, prefix: str) -> dict[str, object]: ...
        def close(self) -> None: ...

    with pytest.raises(InvalidOptionsError, match="update"):
        lifecycle.as_store(Old())
    assert lifecycle.as_store(None) is lifecycle.default_store()
