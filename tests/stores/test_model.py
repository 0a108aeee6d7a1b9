"""Property: any sequence of put, update, delete, get and scan on a backend behaves as a dict.

``update`` comes in four shapes: set a value, merge one into the current value, delete
(``fn`` returns ``None``), and fail (``fn`` raises: nothing changes, the exception comes
out unchanged); its return value is checked against the model too.

Keys come from a small alphabet that holds what breaks stores — SQL ``LIKE`` and Redis glob
characters, a character past the Basic Multilingual Plane, the largest code point — so
puts collide, deletes hit and miss, and scans cross range boundaries. Each example works
under a prefix of its own on a store shared by the test (a fresh database per example
would measure database creation, not the store) — except ``FileStore``, which rewrites
the whole file on every write and so gets a new file per example instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from managedloop.stores import FileStore, Store

from .conftest import FACTORIES

ALPHABET = "ab_%*?[:😀\U0010ffff"

keys = st.text(ALPHABET, min_size=1, max_size=4)
json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
json_leaf |= st.floats(allow_nan=False, allow_infinity=False)
values = st.dictionaries(
    st.text(max_size=3),
    st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=3), max_leaves=5),
    max_size=3,
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), keys, values),
        st.tuples(st.just("delete"), keys, st.none()),
        st.tuples(st.sampled_from(["update-set", "update-merge"]), keys, values),
        st.tuples(st.sampled_from(["update-delete", "update-fail"]), keys, st.none()),
        st.tuples(st.just("get"), keys, st.none()),
        st.tuples(st.just("scan"), st.text(ALPHABET, max_size=2), st.none()),
    ),
    max_size=30,
)


_examples = itertools.count()


@pytest.fixture(scope="module", params=sorted(FACTORIES))
def fresh(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[], tuple[Store, str]]]:
    """A store and a key root no earlier example used."""
    tmp = tmp_path_factory.mktemp("model")
    if request.param == "file":
        yield lambda: (FileStore(tmp / f"ex{next(_examples)}.json"), "")
        return
    made = FACTORIES[request.param](tmp, request)
    yield lambda: (made, f"ex{next(_examples)}/")
    made.close()


@pytest.mark.fuzz
@given(ops=ops)
def test_operations_match_a_dict(
    fresh: Callable[[], tuple[Store, str]], ops: list[tuple[str, str, Any]]
) -> None:
    store, root = fresh()
    model: dict[str, dict[str, Any]] = {}
    for op, key, value in ops:
        full = root + key
        if op == "put":
            store.put(full, value)
            model[full] = value
        elif op == "delete":
            assert store.delete(full) is (model.pop(full, None) is not None)
        elif op == "update-set":
            assert store.update(full, lambda _current, v=value: v) == value
            model[full] = value
        elif op == "update-merge":
            merged = {**model.get(full, {}), **value}
            assert store.update(full, lambda current, v=value: {**(current or {}), **v}) == merged
            model[full] = merged
        elif op == "update-delete":
            assert store.update(full, lambda _current: None) is None
            model.pop(full, None)
        elif op == "update-fail":
            with pytest.raises(_Refused):
                store.update(full, _refuse)
        elif op == "get":
            assert store.get(full) == model.get(full)
        else:
            assert store.scan(full) == {
                k: v for k, v in sorted(model.items()) if k.startswith(full)
            }
    assert store.scan(root) == model


class _Refused(Exception):
    pass


def _refuse(current: dict[str, Any] | None) -> dict[str, Any] | None:
    raise _Refused(current)
