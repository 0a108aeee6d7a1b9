"""The ``Store`` conformance kit: run the protocol's whole contract against any store.

A store written to :class:`managedloop.stores.Store` (a database the library does not
ship, a wrapper adding encryption or metrics) can check itself with the same checks the
suite runs against the four backends::

    from managedloop.testing.stores import CHECKS, check_store

    def test_my_store_conforms(tmp_path):
        check_store(lambda: MyStore(tmp_path / "db"))      # every check, in turn

    # or one pytest test per check, each named:
    @pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
    def test_my_store(check, tmp_path):
        check(lambda: MyStore(tmp_path / "db"))

``make`` is called with no argument and returns a handle on the store under test; each
call must reach the *same* data (a new connection to one database, or one shared object
for a store without connections). The checks use keys under ``prefix`` only (default
``"conformance:"``), remove what they wrote, and close every handle they made. A failed
check raises ``AssertionError`` naming the rule of ``managedloop.stores._base`` it breaks.

What is checked: key and value refusal before any I/O (``invalid_key``, ``not_json``);
exact round trips with no shared references; whole-value replacement; idempotent delete;
prefix scans in key order with prefixes taken as text; and the atomic update —
create, replace and delete through ``fn``, the value returned, an exception from ``fn``
propagated unchanged with nothing written, a non-JSON result refused with nothing written,
and ``threads`` threads, each with its own handle, doing ``rounds`` updates of one key
each: every one counted (a lost update fails it). Across processes, run your own test
in the shape of ``tests/stores/test_atomic_processes.py``: this kit stays in one process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, cast

from managedloop.errors import StoreError
from managedloop.stores import MAX_KEY_LENGTH, Store, Updater

__all__ = ["CHECKS", "check_store"]

Make = Callable[[], Store]


class _BoomError(Exception):
    """What the abort check's update function raises (only its identity matters)."""


def _expect(ok: object, rule: str) -> None:
    """Fail the check naming ``rule`` (an explicit raise: ``assert`` vanishes under ``-O``)."""
    if not ok:
        raise AssertionError(rule)


@contextmanager
def _opened(make: Make, prefix: str) -> Iterator[Store]:
    store = make()
    try:
        _expect(
            isinstance(store, Store),
            f"{store!r} does not implement managedloop.stores.Store "
            "(get, put, update, delete, scan, close)",
        )
        _clear(store, prefix)
        yield store
        _clear(store, prefix)
    finally:
        store.close()


def _clear(store: Store, prefix: str) -> None:
    for key in store.scan(prefix):
        store.delete(key)


def _raised(call: Callable[[], object], what: str) -> BaseException:
    """What ``call()`` raised; failing the check when it returned."""
    try:
        call()
    except BaseException as exc:
        return exc
    raise AssertionError(f"{what}: returned, expected an exception")


def _refused(code: str, call: Callable[[], object], what: str) -> None:
    exc = _raised(call, what)
    _expect(
        isinstance(exc, StoreError) and exc.code == code,
        f"{what}: raised {exc!r}, expected StoreError(code={code!r})",
    )


def _same(value: dict[str, Any] | None) -> dict[str, Any] | None:
    return value


def _gone(_value: dict[str, Any] | None) -> dict[str, Any] | None:
    return None


def _raise(error: BaseException) -> Updater:
    def fn(_value: dict[str, Any] | None) -> dict[str, Any] | None:
        raise error

    return fn


def _returning(value: Any) -> Updater:
    def fn(_value: dict[str, Any] | None) -> dict[str, Any] | None:
        result: dict[str, Any] | None = value
        return result

    return fn


def check_round_trip(make: Make, *, prefix: str = "conformance:") -> None:
    """``get`` returns exactly what ``put`` stored, a fresh copy each time; a ``put``
    replaces the whole value; ``delete`` of a missing key is ``False``."""
    with _opened(make, prefix) as store:
        key = prefix + "k"
        _expect(store.get(key) is None, "get of a missing key must be None")
        value: dict[str, Any] = {"n": 3, "f": 1.5, "ok": True, "none": None, "t": "héllo ✓"}
        value["list"] = [1, {"a": []}]
        store.put(key, value)
        _expect(store.get(key) == value, "get must return what put stored")
        value["list"].append(2)
        got = store.get(key)
        _expect(got is not None and got["list"] == [1, {"a": []}], "put must copy its value")
        assert got is not None  # for the type checker: checked just above
        got["list"].append(3)
        _expect(store.get(key) == {**value, "list": [1, {"a": []}]}, "get must return a copy")
        store.put(key, {"other": 1})
        _expect(store.get(key) == {"other": 1}, "put must replace the whole value")
        _expect(store.delete(key) is True, "delete of a present key must be True")
        _expect(store.delete(key) is False, "delete of a missing key must be False")
        _expect(store.get(key) is None, "a deleted key must be gone")


def check_refusals(make: Make, *, prefix: str = "conformance:") -> None:
    """Bad keys are ``invalid_key`` and bad values ``not_json``, on every verb, and nothing
    is written."""
    with _opened(make, prefix) as store:
        key = prefix + "k"
        loose = cast(Any, store)  # the point is to pass what the types forbid
        bad_keys: list[Any] = ["", None, 7, "a\nb", "a\x00b", "\ud800", "k" * (MAX_KEY_LENGTH + 1)]
        for bad in bad_keys:
            name = repr(bad)[:20]
            _refused("invalid_key", partial(loose.get, bad), f"get({name})")
            _refused("invalid_key", partial(loose.put, bad, {}), f"put({name})")
            _refused("invalid_key", partial(loose.delete, bad), f"delete({name})")
            _refused("invalid_key", partial(loose.update, bad, _same), f"update({name})")
        _refused("invalid_key", lambda: loose.scan(None), "scan(None)")
        bad_values: list[Any] = [[1], "text", {"t": (1, 2)}, {1: "x"}, {"f": float("nan")}]
        bad_values += [{"s": {1, 2}}, {"u": "\ud800"}]
        for bad in bad_values:
            name = repr(bad)[:30]
            _refused("not_json", partial(loose.put, key, bad), f"put(value={name})")
            _refused("not_json", partial(store.update, key, _returning(bad)), f"update to {name}")
        _expect(store.get(key) is None, "a refused value must not be written")


def check_scan(make: Make, *, prefix: str = "conformance:") -> None:
    """``scan(prefix)`` returns exactly the keys starting with ``prefix``, in key order,
    and a prefix is text (``_``, ``%``, ``*``, ``?``, ``[`` match only themselves)."""
    with _opened(make, prefix) as store:
        keys = ["a", "a_b", "a%b", "a*b", "a?b", "a[b", "ab", "b", "\U0001f600", "é"]
        for i, k in enumerate(keys):
            store.put(prefix + k, {"i": i})
        found = store.scan(prefix)
        _expect(list(found) == sorted(prefix + k for k in keys), "scan must return key order")
        _expect(found.get(prefix + "ab") == {"i": keys.index("ab")}, "scan must return values")
        for pattern in ("a_", "a%", "a*", "a?", "a["):
            _expect(
                list(store.scan(prefix + pattern)) == [prefix + pattern + "b"],
                f"scan({pattern!r}) must treat the prefix as text",
            )
        _expect(store.scan(prefix + "zzz") == {}, "scan of an unused prefix must be empty")


def check_update(make: Make, *, prefix: str = "conformance:") -> None:
    """``update`` creates, replaces and deletes through ``fn``, returns what is stored, and
    an exception from ``fn`` or a non-JSON result leaves the value as it was."""
    with _opened(make, prefix) as store:
        key = prefix + "u"
        seen: list[Any] = []

        def create(current: dict[str, Any] | None) -> dict[str, Any] | None:
            seen.append(current)
            return {"n": 1, "list": [1]}

        made = store.update(key, create)
        _expect(seen and seen[-1] is None, "fn must get None for a missing key")
        _expect(made == {"n": 1, "list": [1]}, "update must return the new value")
        assert made is not None  # for the type checker: checked just above
        made["list"].append(2)
        _expect(store.get(key) == {"n": 1, "list": [1]}, "update must return a copy")

        def bump(current: dict[str, Any] | None) -> dict[str, Any] | None:
            _expect(current is not None, "fn must get the current value")
            assert current is not None
            current["list"].append(9)  # fn may change what it got: it is a copy
            return {"n": current["n"] + 1, "list": current["list"]}

        _expect(store.update(key, bump) == {"n": 2, "list": [1, 9]}, "update must return it")
        _expect(store.get(key) == {"n": 2, "list": [1, 9]}, "update must store fn's result")
        stored = {"n": 2, "list": [1, 9]}

        def fail(current: dict[str, Any] | None) -> dict[str, Any] | None:
            if current is not None:
                current["n"] = 99  # changed, then failed: nothing may be written
            raise boom

        boom = _BoomError("from fn")
        for fn, error in [(fail, boom)] + [
            (_raise(e), e) for e in (OSError("disk"), KeyError("k"), StoreError("x", code="x"))
        ]:
            name = type(error).__name__
            got = _raised(partial(store.update, key, fn), f"update with fn raising {name}")
            _expect(got is error, f"fn's {name} must propagate unchanged, got {got!r}")
            _expect(store.get(key) == stored, f"fn raising {name} must write nothing")

        _expect(store.update(key, _same) == stored, "an update to the same value returns it")
        _expect(store.update(key, _gone) is None, "fn returning None: update returns None")
        _expect(store.get(key) is None, "fn returning None must delete the key")
        _expect(key not in store.scan(prefix), "a key deleted by update must leave the scan")
        _expect(store.update(key, _gone) is None, "None on a missing key must leave it absent")
        _expect(store.get(key) is None, "None on a missing key must leave it absent")
        store.update(key, _returning({"back": True}))
        _expect(store.scan(prefix) == {key: {"back": True}}, "a key made by update is scanned")


def check_update_sees_other_handles(make: Make, *, prefix: str = "conformance:") -> None:
    """An update through one handle starts from what another handle wrote."""
    with _opened(make, prefix) as first, _opened(make, prefix) as second:
        key = prefix + "shared"
        first.put(key, {"n": 1})
        _expect(
            second.update(key, lambda v: {"n": (v or {"n": 0})["n"] + 1}) == {"n": 2},
            "update must start from another handle's write",
        )
        _expect(first.get(key) == {"n": 2}, "a handle must see another handle's update")
        first.delete(key)
        _expect(
            second.update(key, lambda v: {"was": v}) == {"was": None},
            "update must see another handle's delete",
        )


def check_concurrent_updates(
    make: Make, *, prefix: str = "conformance:", threads: int = 8, rounds: int = 50
) -> None:
    """``threads`` threads, each with its own handle, each doing ``rounds`` updates of one
    key (a counter and a list of who wrote): none is lost, counted exactly."""
    key = prefix + "counter"
    with _opened(make, prefix) as owner:
        failures: list[BaseException] = []
        start = threading.Barrier(threads)

        def work(t: int) -> None:
            try:
                store = make()
                try:
                    start.wait()
                    for i in range(rounds):
                        store.update(key, _adding(f"{t}:{i}"))
                finally:
                    store.close()
            except BaseException as exc:
                failures.append(exc)

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        _expect(failures == [], f"concurrent updates failed: {failures[:3]!r}")
        final = owner.get(key)
        _expect(final is not None, "concurrent updates left nothing")
        assert final is not None
        expected = threads * rounds
        _expect(final["n"] == expected, f"lost updates: counter {final['n']} of {expected}")
        wrote = sorted(final["by"])
        _expect(
            wrote == sorted(f"{t}:{i}" for t in range(threads) for i in range(rounds)),
            f"lost updates: {expected - len(set(wrote))} writers missing, "
            f"{len(wrote) - len(set(wrote))} twice",
        )


def _adding(name: str) -> Updater:
    def fn(current: dict[str, Any] | None) -> dict[str, Any] | None:
        value = current or {"n": 0, "by": []}
        return {"n": value["n"] + 1, "by": [*value["by"], name]}

    return fn


CHECKS: tuple[Callable[..., None], ...] = (
    check_round_trip,
    check_refusals,
    check_scan,
    check_update,
    check_update_sees_other_handles,
    check_concurrent_updates,
)
"""Every check, in the order :func:`check_store` runs them; each takes ``(make, *,
prefix=...)``."""


def check_store(make: Make, *, prefix: str = "conformance:") -> None:
    """Run every check of :data:`CHECKS` against the store ``make()`` opens (see the module
    docstring); the first failure raises ``AssertionError`` naming the broken rule."""
    for check in CHECKS:
        check(make, prefix=prefix)
