"""What each persistent backend promises beyond the shared contract.

FileStore: a damaged file is ``store_corrupt`` naming the path, on every operation, and is
never overwritten; a held lock is ``store_unavailable`` after ``lock_timeout`` (zero here:
no clock involved); a failed write leaves the store and no temporary file behind; the
file keeps its permissions. SQLiteStore: WAL (a reader is not blocked by a writer), a
held write lock is ``store_unavailable`` after ``busy_timeout``, a foreign or damaged
database is ``store_corrupt``, scans use the primary-key index. RedisStore: the password
of the URL never shows, an unreachable server is ``store_unavailable``, a missing extra
names the extra, namespaces keep stores apart. And ``open_store``/``default_store_path``.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import filelock
import pytest

from managedloop.errors import ConfigError, InvalidOptionsError, StoreError
from managedloop.stores import (
    FileStore,
    MemoryStore,
    RedisStore,
    SQLiteStore,
    default_store_path,
    open_store,
)
from managedloop.stores._sqlite import prefix_successor

from .conftest import RedisServer

# -- FileStore -------------------------------------------------------------------------


def _all_ops(store: Any) -> list[Any]:
    return [
        lambda: store.get("k"),
        lambda: store.put("k", {}),
        lambda: store.delete("k"),
        lambda: store.scan(""),
    ]


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b"\xff\xfe",
        b"[]",
        b'{"k": {}}',  # JSON, but not this store's layout
        b'{"managedloop_store": 2, "entries": {}}',
        b'{"managedloop_store": 1, "entries": []}',
        b'{"managedloop_store": 1, "entries": {"k": 3}}',
    ],
)
def test_file_damaged_is_store_corrupt_and_never_reset(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "store.json"
    path.write_bytes(content)
    store = FileStore(path)
    for call in _all_ops(store):
        with pytest.raises(StoreError) as info:
            call()
        assert info.value.code == "store_corrupt"
        assert str(path) in str(info.value)
        assert info.value.context["path"] == str(path)
    assert path.read_bytes() == content


def test_file_layout_and_persistence(tmp_path: Path) -> None:
    path = tmp_path / "deeper" / "store.json"  # the directory is made
    FileStore(path).put("agent:x", {"id": "a1", "text": "é"})
    assert json.loads(path.read_text("utf-8")) == {
        "managedloop_store": 1,
        "entries": {"agent:x": {"id": "a1", "text": "é"}},
    }
    again = FileStore(path)
    assert again.get("agent:x") == {"id": "a1", "text": "é"}
    assert repr(again) == f"FileStore({str(path)!r})"
    assert again.path == path


def test_file_lock_held_elsewhere_is_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    store = FileStore(path, lock_timeout=0)
    store.put("k", {"v": 1})
    other = filelock.FileLock(str(path) + ".lock")  # another holder (flock: per open file)
    with other:
        for call in _all_ops(store):
            with pytest.raises(StoreError) as info:
                call()
            assert info.value.code == "store_unavailable"
            assert info.value.context["path"] == str(path)
    assert store.get("k") == {"v": 1}  # free again


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "1", None, True])
def test_file_bad_lock_timeout(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(InvalidOptionsError) as info:
        FileStore(tmp_path / "s.json", lock_timeout=bad)
    assert info.value.context["option"] == "lock_timeout"


def test_file_failed_write_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    store = FileStore(path)
    store.put("k", {"v": 1})

    def disk_full() -> None:
        raise OSError(28, "No space left on device")

    store._before_replace = disk_full
    with pytest.raises(StoreError) as info:
        store.put("k", {"v": 2})
    assert info.value.code == "store_unavailable"
    assert info.value.context["errno"] == 28
    store._before_replace = None
    assert store.get("k") == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.json", "store.json.lock"]


def test_file_directory_that_cannot_exist_is_store_unavailable(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("a file, not a directory")
    store = FileStore(tmp_path / "plain" / "store.json")
    with pytest.raises(StoreError) as info:
        store.get("k")
    assert info.value.code == "store_unavailable"


def test_file_keeps_its_permissions(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    store = FileStore(path)
    store.put("a", {})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # private by default
    path.chmod(0o640)
    store.put("b", {})
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


# -- SQLiteStore -----------------------------------------------------------------------


def test_sqlite_is_wal_and_persists(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "store.sqlite3"
    store = SQLiteStore(path)
    store.put("k", {"v": 1})
    store.close()
    store.close()  # idempotent
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 1
    raw.close()
    again = SQLiteStore(path)
    assert again.get("k") == {"v": 1}
    assert repr(again) == f"SQLiteStore({str(path)!r})"
    assert again.path == path
    again.close()
    assert again.get("k") == {"v": 1}  # a closed store reopens on use
    again.close()


def test_sqlite_reader_not_blocked_and_writer_times_out(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = SQLiteStore(path, busy_timeout=0)
    store.put("k", {"v": 1})
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        writer.execute("UPDATE entries SET value = '{\"v\": 9}'")
        assert store.get("k") == {"v": 1}  # WAL: the reader sees the last commit
        assert store.scan("") == {"k": {"v": 1}}
        for call in (lambda: store.put("k", {"v": 2}), lambda: store.delete("k")):
            with pytest.raises(StoreError) as info:
                call()
            assert info.value.code == "store_unavailable"
            assert info.value.context["path"] == str(path)
        writer.execute("ROLLBACK")
    finally:
        writer.close()
    store.put("k", {"v": 2})
    assert store.get("k") == {"v": 2}
    store.close()


def test_sqlite_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    path.write_bytes(b"this is not an sqlite file at all, it is plain text" * 20)
    with pytest.raises(StoreError) as info:
        SQLiteStore(path)
    assert info.value.code == "store_corrupt"
    assert str(path) in str(info.value)


def test_sqlite_foreign_database(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite3"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE users (name TEXT)")
    raw.close()
    with pytest.raises(StoreError) as info:
        SQLiteStore(path)
    assert info.value.code == "store_corrupt"
    assert "not a managedloop store" in str(info.value)
    with sqlite3.connect(path) as raw:  # untouched
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 0
        names = [r[0] for r in raw.execute("SELECT name FROM sqlite_master")]
        assert names == ["users"]
    raw.close()


def test_sqlite_other_layout_version(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA user_version = 7")
    raw.close()
    with pytest.raises(StoreError) as info:
        SQLiteStore(path)
    assert info.value.code == "store_corrupt"
    assert "user_version 7" in str(info.value)


@pytest.mark.parametrize("stored", ["not json", "[1]"])
def test_sqlite_damaged_value(tmp_path: Path, stored: str) -> None:
    path = tmp_path / "store.sqlite3"
    store = SQLiteStore(path)
    with sqlite3.connect(path) as raw:
        raw.execute("INSERT INTO entries VALUES ('k', ?)", (stored,))
        raw.execute("INSERT INTO entries VALUES ('b', ?)", (b"\x00blob",))
    raw.close()
    for call in (lambda: store.get("k"), lambda: store.get("b"), lambda: store.scan("")):
        with pytest.raises(StoreError) as info:
            call()
        assert info.value.code == "store_corrupt"
        assert str(path) in str(info.value)
    store.close()


def test_sqlite_scan_uses_the_primary_key_index(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store.sqlite3")
    store.put("tag:a_b:x", {})
    statements: list[str] = []
    assert store._connection is not None
    store._connection.set_trace_callback(statements.append)
    for prefix in ("tag:a_b:", "\U0010ffff"):
        store.scan(prefix)
    store._connection.set_trace_callback(None)
    assert len(statements) == 2
    for sql in statements:
        assert "LIKE" not in sql.upper()
        plan = store._connection.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
        detail = " ".join(str(row[-1]) for row in plan)
        assert "USING PRIMARY KEY" in detail, detail
        assert "SCAN" not in detail.replace("SEARCH", ""), detail
    store.close()


@pytest.mark.parametrize("bad", [-1, math.nan, "3", None])
def test_sqlite_bad_busy_timeout(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(InvalidOptionsError) as info:
        SQLiteStore(tmp_path / "s.sqlite3", busy_timeout=bad)
    assert info.value.context["option"] == "busy_timeout"


def test_sqlite_directory_that_cannot_exist(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("a file")
    with pytest.raises(StoreError) as info:
        SQLiteStore(tmp_path / "plain" / "s.sqlite3")
    assert info.value.code == "store_unavailable"


def test_sqlite_other_operational_error_is_store_unavailable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite3")
    assert store._connection is not None
    store._connection.execute("DROP TABLE entries")  # the layout vanished under us
    with pytest.raises(StoreError) as info:
        store.get("k")
    assert info.value.code == "store_unavailable"
    assert "no such table" in str(info.value)
    store.close()


@pytest.mark.parametrize(
    ("prefix", "successor"),
    [
        ("a", "b"),
        ("tag:x", "tag:y"),
        ("a\U0010ffff", "b"),
        ("\U0010ffff\U0010ffff", None),
        ("", None),
        ("\ud7ff", "\ue000"),  # never a surrogate
        ("😀", "😁"),
    ],
)
def test_prefix_successor(prefix: str, successor: str | None) -> None:
    assert prefix_successor(prefix) == successor


# -- RedisStore ------------------------------------------------------------------------


def test_redis_password_never_shows(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, namespace=redis_server.namespace())
    assert redis_server.password not in repr(store)
    assert "***@127.0.0.1" in repr(store)
    store.put("k", {"v": 1})
    assert store.get("k") == {"v": 1}
    store.close()
    wrong = f"redis://:{redis_server.password}x@127.0.0.1:{redis_server.port}/0"
    bad = RedisStore(wrong)
    with pytest.raises(StoreError) as info:
        bad.get("k")
    assert info.value.code == "store_unavailable"
    for shown in (str(info.value), repr(info.value.context), repr(bad)):
        assert redis_server.password not in shown
    bad.close()


def test_redis_percent_encoded_password_is_scrubbed(redis_server: RedisServer) -> None:
    store = RedisStore(f"redis://:p%40ss@127.0.0.1:{redis_server.port}/0")
    assert store._scrub("a p@ss and p%40ss b") == "a *** and *** b"
    store.close()


def test_redis_url_options_that_decode_replies(redis_server: RedisServer) -> None:
    store = RedisStore(
        redis_server.url + "?decode_responses=True", namespace=redis_server.namespace()
    )
    store.put("k😀", {"v": "é"})
    assert store.get("k😀") == {"v": "é"}
    assert store.scan("k") == {"k😀": {"v": "é"}}
    store.close()


def test_redis_unreachable_is_store_unavailable() -> None:
    import socket

    with socket.socket() as sock:  # a port with nobody listening (bound, not listening)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        store = RedisStore(f"redis://:s3cret@127.0.0.1:{port}/0", socket_timeout=5)
        for call in _all_ops(store):
            with pytest.raises(StoreError) as info:
                call()
            assert info.value.code == "store_unavailable"
            assert "s3cret" not in str(info.value)
            assert info.value.context["url"] == f"redis://***@127.0.0.1:{port}/0"
        store.close()


def test_redis_namespaces_keep_stores_apart(redis_server: RedisServer) -> None:
    one = RedisStore(redis_server.url, namespace=redis_server.namespace())
    two = RedisStore(redis_server.url, namespace=redis_server.namespace())
    one.put("k", {"who": 1})
    assert two.get("k") is None
    assert two.scan("") == {}
    two.put("k", {"who": 2})
    assert one.get("k") == {"who": 1}
    one.close()
    two.close()


def test_redis_damaged_values_are_store_corrupt(redis_server: RedisServer) -> None:
    import redis

    namespace = redis_server.namespace()
    store = RedisStore(redis_server.url, namespace=namespace)
    raw = redis.Redis.from_url(redis_server.url)
    raw.set(namespace + "v:k", b"not json")
    raw.zadd(namespace + "index", {b"k": 0})
    for call in (lambda: store.get("k"), lambda: store.scan("")):
        with pytest.raises(StoreError) as info:
            call()
        assert info.value.code == "store_corrupt"
        assert "'k'" in str(info.value)
    raw.set(namespace + "index", b"a string, not a sorted set")
    with pytest.raises(StoreError) as info:
        store.scan("")
    assert info.value.code == "store_corrupt"
    raw.close()
    store.close()


def test_redis_scan_skips_a_key_deleted_since_the_index_read(redis_server: RedisServer) -> None:
    import redis

    namespace = redis_server.namespace()
    store = RedisStore(redis_server.url, namespace=namespace)
    store.put("a", {"v": 1})
    raw = redis.Redis.from_url(redis_server.url)
    raw.zadd(namespace + "index", {b"gone": 0})  # as if deleted between ZRANGEBYLEX and MGET
    assert store.scan("") == {"a": {"v": 1}}
    raw.close()
    store.close()


def test_redis_scan_pages_through_many_keys(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, namespace=redis_server.namespace())
    for i in range(1200):  # more than one MGET batch
        store.put(f"k:{i:04}", {"i": i})
    found = store.scan("k:")
    assert len(found) == 1200
    assert found["k:1199"] == {"i": 1199}
    store.close()


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"url": "http://127.0.0.1/"}, "url"),
        ({"url": "redis://127.0.0.1:notaport/0"}, "url"),
        ({"url": ""}, "url"),
        ({"url": "redis://127.0.0.1/0", "namespace": ""}, "namespace"),
        ({"url": "redis://127.0.0.1/0", "namespace": "a\nb"}, "namespace"),
        ({"url": "redis://127.0.0.1/0", "socket_timeout": 0}, "socket_timeout"),
        ({"url": "redis://127.0.0.1/0", "socket_timeout": math.nan}, "socket_timeout"),
    ],
)
def test_redis_bad_options(kwargs: dict[str, Any], option: str) -> None:
    with pytest.raises(InvalidOptionsError) as info:
        RedisStore(**kwargs)
    assert info.value.context["option"] == option


def test_redis_bad_url_error_hides_the_password() -> None:
    with pytest.raises(InvalidOptionsError) as info:
        RedisStore("redis://:hunter2@127.0.0.1:notaport/0")
    assert "hunter2" not in str(info.value)


def test_redis_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis -> ImportError
    with pytest.raises(ConfigError) as info:
        RedisStore("redis://127.0.0.1:6379/0")
    assert info.value.code == "missing_dependency"
    assert "managedloop[redis]" in str(info.value)
    assert info.value.context["extra"] == "redis"


def test_importing_stores_does_not_import_redis() -> None:
    code = "import sys, managedloop.stores; sys.exit('redis' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# -- open_store, default_store_path ----------------------------------------------------


def test_default_store_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_store_path() == tmp_path / "cache" / "managedloop" / "store.sqlite3"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored (XDG)
    home_cache = tmp_path / "home" / ".cache" / "managedloop" / "store.sqlite3"
    assert default_store_path() == home_cache
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_store_path() == home_cache
    assert not home_cache.parent.exists()  # nothing created


def test_open_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = open_store()
    assert isinstance(default, SQLiteStore)
    assert default.path == tmp_path / "cache" / "managedloop" / "store.sqlite3"
    default.close()
    assert isinstance(open_store(""), SQLiteStore)
    assert isinstance(open_store("memory:"), MemoryStore)
    file_store = open_store("~/handles.JSON")
    assert isinstance(file_store, FileStore)
    assert file_store.path == tmp_path / "home" / "handles.JSON"
    sqlite_store = open_store(tmp_path / "x.db")
    assert isinstance(sqlite_store, SQLiteStore)
    sqlite_store.close()
    redis_store = open_store("redis://:pw@127.0.0.1:1/0")
    assert isinstance(redis_store, RedisStore)
    assert "pw" not in repr(redis_store)
    redis_store.close()
    assert os.path.exists(tmp_path / "x.db")


# -- scripts/ensure-redis --------------------------------------------------------------

ENSURE = Path(__file__).resolve().parents[2] / "scripts" / "ensure-redis"


def test_ensure_redis_fails_loudly_on_a_bad_binary(tmp_path: Path) -> None:
    env = {**os.environ, "REDIS_SERVER": str(tmp_path / "no-such-redis-server")}
    done = subprocess.run([str(ENSURE)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "not executable" in done.stderr
    assert done.stdout == ""


def test_ensure_redis_prints_the_binary_it_found(redis_server: RedisServer) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_SERVER"}
    done = subprocess.run([str(ENSURE)], env=env, capture_output=True, text=True, check=True)
    found = done.stdout.strip()
    assert os.access(found, os.X_OK)
    version = subprocess.run([found, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("Redis server")
