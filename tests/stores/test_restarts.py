"""Every acknowledged write survives Redis restarts mid-load (issue 25's acceptance line).

A real ``redis-server`` with append-only persistence (``appendonly yes``, ``appendfsync
always``: a write is on disk before it is answered) serves 1,000 lifecycle and webhook
ledger operations on one ``RedisStore``: tags, untags, delivery admissions and tool-use
claims, in turn. At operations 250, 500 and 750 the server is stopped — SIGTERM, SIGKILL,
SIGTERM — and, once the load has seen it gone (an operation failed with
``store_unavailable``; no sleep decides this), started again on the same port and data
directory. A failed operation is retried until it is acknowledged (each of these is safe
to repeat). Afterwards the store holds exactly what the acknowledged operations leave:
every tag not untagged since, no untagged one, every admitted delivery and every claimed
tool use. Bounded: each retry loop gives up after ``RETRY_DEADLINE`` seconds.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

import managedloop as ml
from managedloop.errors import StoreError
from managedloop.provisioning import lifecycle
from managedloop.stores import RedisStore
from managedloop.webhooks._ledger import Ledger

from .conftest import REDIS_START_DEADLINE, _answers, _free_port, find_redis_server

T = TypeVar("T")
OPS = 1000
RESTART_AT = {250: signal.SIGTERM, 500: signal.SIGKILL, 750: signal.SIGTERM}
RETRY_DEADLINE = 60.0
"""Seconds one operation may keep failing before the test fails: a restart takes well
under a second; this only turns a server that never returns into a failure."""


class PersistentRedis:
    """A ``redis-server`` with append-only persistence that can be stopped and restarted."""

    def __init__(self, workdir: Path) -> None:
        self.binary = find_redis_server()
        self.workdir = workdir
        self.port = _free_port()
        self.password = secrets.token_hex(16)
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def start(self) -> None:
        config = "\n".join(
            [
                "bind 127.0.0.1",
                f"port {self.port}",
                'save ""',
                "appendonly yes",
                "appendfsync always",
                f"requirepass {self.password}",
                f"dir {self.workdir}",
                "daemonize no",
                "loglevel warning",
                "",
            ]
        )
        log = (self.workdir / f"redis-{self.starts}.log").open("wb")
        self.process = subprocess.Popen(
            [self.binary, "-"], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        assert self.process.stdin is not None
        self.process.stdin.write(config.encode())
        self.process.stdin.close()
        self.starts += 1
        deadline = time.monotonic() + REDIS_START_DEADLINE
        while not _answers(self.port, self.password):
            assert self.process.poll() is None, (self.workdir / "redis-0.log").read_text()
            assert time.monotonic() < deadline, "redis-server did not come back"
            time.sleep(0.02)

    def stop(self, how: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(how)
        self.process.wait(timeout=30)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PersistentRedis]:
    made = PersistentRedis(tmp_path)
    made.start()
    try:
        yield made
    finally:
        made.close()


def test_acknowledged_writes_survive_redis_restarts(server: PersistentRedis) -> None:
    store = RedisStore(server.url, namespace="restarts:", socket_timeout=5)
    ledger = Ledger(store, "hooks:", lambda: 1000.0)
    failed_while_down = threading.Event()
    restarts: list[int] = []
    errors: list[StoreError] = []

    def acknowledged(call: Callable[[], T]) -> T:
        deadline = time.monotonic() + RETRY_DEADLINE
        while True:
            try:
                return call()
            except StoreError as exc:  # not acknowledged: checked below, then retried
                errors.append(exc)
                failed_while_down.set()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def restart(how: signal.Signals) -> None:
        server.stop(how)
        failed_while_down.wait(timeout=RETRY_DEADLINE)  # the load saw the server gone
        server.start()
        restarts.append(how)

    def tag(i: int) -> None:
        ml.tag_sync("base", f"t{i}", f"{i:08x}", kind="agent", store=store)

    def untag(i: int) -> None:
        ml.untag_sync("base", f"t{i}", kind="agent", store=store)

    def admit(key: str) -> bool:
        return anyio.run(ledger.admit, key, "sesn_1", 3600.0)

    def claim(key: str) -> bool:
        return anyio.run(ledger.claim, key, "hook-1")

    restarter: threading.Thread | None = None
    for i in range(OPS):
        if i in RESTART_AT:
            if restarter is not None:
                restarter.join()
            failed_while_down.clear()
            restarter = threading.Thread(target=restart, args=(RESTART_AT[i],))
            restarter.start()
        kind = i % 4
        if kind == 0:
            acknowledged(
                lambda i=i: ml.tag_sync("base", f"t{i}", f"{i:08x}", kind="agent", store=store)
            )
        elif kind == 1:
            if i % 8 == 1:  # every other tag is untagged again
                acknowledged(
                    lambda i=i: ml.untag_sync("base", f"t{i - 1}", kind="agent", store=store)
                )
        elif kind == 2:
            acknowledged(lambda i=i: admit(ledger.delivery_key(f"d{i}")))
        else:
            acknowledged(lambda i=i: claim(ledger.tool_key("sesn_1", f"u{i}")))
    assert restarter is not None
    restarter.join()
    assert restarts == list(RESTART_AT.values())
    assert len(errors) >= len(RESTART_AT)  # the load really ran into each restart
    assert {e.code for e in errors} == {"store_unavailable"}
    assert not [e for e in errors if server.password in f"{e} {e.context}"]  # redacted

    server.stop(signal.SIGKILL)  # and once more, at rest: nothing acknowledged is lost
    server.start()
    after = RedisStore(server.url, namespace="restarts:")
    try:
        tags = anyio.run(lambda: lifecycle.tags("base", kind="agent", store=after))
        assert tags == {f"t{i}": f"{i:08x}" for i in range(0, OPS, 4) if i % 8 != 0}
        records: dict[str, Any] = after.scan("hooks:")
        deliveries = {k for k, v in records.items() if v.get("state") == "running"}
        claims = {k for k, v in records.items() if v.get("state") == "started"}
        assert deliveries == {ledger.delivery_key(f"d{i}") for i in range(2, OPS, 4)}
        assert claims == {ledger.tool_key("sesn_1", f"u{i}") for i in range(3, OPS, 4)}
        assert len(records) == OPS // 2
    finally:
        after.close()
        store.close()
