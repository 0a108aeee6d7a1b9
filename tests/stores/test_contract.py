"""One contract, every store backend (the ``store`` fixture in ``conftest.py``).

Pins the invariants of ``managedloop.stores._base``: key and value checks before any I/O,
exact round trips with no shared references, whole-value replacement, idempotent delete,
prefix scans.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from managedloop.errors import StoreError
from managedloop.stores import Store

pytestmark = pytest.mark.filterwarnings("error")


def test_is_a_store(store: Store) -> None:
    assert isinstance(store, Store)


def test_round_trip_and_replace(store: Store) -> None:
    assert store.get("agent:x") is None
    value: dict[str, Any] = {
        "id": "agent_1",
        "n": 3,
        "f": 1.5,
        "ok": True,
        "none": None,
        "text": "héllo ✓",
        "list": [1, {"a": []}],
    }
    store.put("agent:x", value)
    assert store.get("agent:x") == value
    store.put("agent:x", {"id": "agent_2"})
    assert store.get("agent:x") == {"id": "agent_2"}  # replaced whole, nothing merged


def test_no_shared_references(store: Store) -> None:
    value: dict[str, Any] = {"list": [1]}
    store.put("k", value)
    value["list"].append(2)
    got = store.get("k")
    assert got == {"list": [1]}
    assert got is not None
    got["list"].append(3)
    assert store.get("k") == {"list": [1]}


def test_delete_is_idempotent(store: Store) -> None:
    store.put("k", {})
    assert store.delete("k") is True
    assert store.delete("k") is False
    assert store.get("k") is None


def test_scan_by_prefix(store: Store) -> None:
    store.put("tag:data:prod", {"digest": "a"})
    store.put("tag:data_analysis:prod", {"digest": "b"})
    store.put("tag:data:canary", {"digest": "c"})
    store.put("agent:data", {})
    assert store.scan("tag:data:") == {
        "tag:data:canary": {"digest": "c"},
        "tag:data:prod": {"digest": "a"},
    }
    assert set(store.scan("")) == {
        "tag:data:prod",
        "tag:data_analysis:prod",
        "tag:data:canary",
        "agent:data",
    }
    assert store.scan("nothing:") == {}


def test_scan_prefixes_are_text_never_patterns(store: Store) -> None:
    """``_`` and ``%`` (SQL LIKE), ``*``, ``?`` and ``[`` (Redis globs) match themselves only,
    and keys past the Basic Multilingual Plane sort inside their prefix's range."""
    keys = [
        "p_x", "pax", "p%x", "p*x", "p?x", "p[a]x", "pbx", "p\\x",
        "q😀", "q\uffff", "q\U0010ffff", "q\U0010ffff\U0010ffffz", "r",
    ]  # fmt: skip
    for key in keys:
        store.put(key, {"k": key})
    for prefix in ("p_", "p%", "p*", "p?", "p[", "p[a]", "p\\"):
        assert store.scan(prefix) == {k: {"k": k} for k in keys if k.startswith(prefix)}
    assert set(store.scan("q")) == {"q😀", "q\uffff", "q\U0010ffff", "q\U0010ffff\U0010ffffz"}
    assert set(store.scan("q\U0010ffff")) == {"q\U0010ffff", "q\U0010ffff\U0010ffffz"}
    assert set(store.scan("\U0010ffff")) == set()
    assert list(store.scan("")) == sorted(keys)  # in code-point (= UTF-8 byte) order


def test_values_keep_unicode_and_nesting(store: Store) -> None:
    value = {"😀": ["\U0010ffff", {"deep": [[[]]]}], "": 0, "big": 2**62, "neg": -1.25e-300}
    store.put("k", value)
    assert store.get("k") == value
    assert store.scan("k") == {"k": value}


@pytest.mark.parametrize(
    "key", ["", "a\nb", "a\x00b", "x" * 1025, 12, None, b"k", "a\x85", "a\ud800"]
)
def test_bad_keys_are_named_errors(store: Store, key: Any) -> None:
    for call in (lambda: store.get(key), lambda: store.put(key, {}), lambda: store.delete(key)):
        with pytest.raises(StoreError) as info:
            call()
        assert info.value.code == "invalid_key"


@pytest.mark.parametrize(
    "value",
    [
        [1],
        "text",
        {"t": (1, 2)},
        {"nan": math.nan},
        {"inf": math.inf},
        {1: "int key"},
        {"s": {1, 2}},
        {"b": b"bytes"},
        {"o": object()},
        {"lone": "\udc00"},
    ],
)
def test_values_that_do_not_round_trip_are_refused(store: Store, value: Any) -> None:
    with pytest.raises(StoreError) as info:
        store.put("k", value)
    assert info.value.code == "not_json"
    assert store.get("k") is None  # nothing half-written


def test_bad_prefixes_are_named_errors(store: Store) -> None:
    for prefix in ("a\n", 3, None, "\ud800", "x" * 1025):
        with pytest.raises(StoreError) as info:
            store.scan(prefix)  # type: ignore[arg-type]
        assert info.value.code == "invalid_key"
