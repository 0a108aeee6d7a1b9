"""The ``store`` fixture: one instance of every backend the contract suite runs against,
and ``redis_server``: a real ``redis-server`` on 127.0.0.1 for the whole test session.

Each backend adds one factory here; ``test_contract.py`` then runs unchanged against it.

The Redis server is the real program, never a fake: found as ``$REDIS_SERVER``, on
``PATH`` or in ``/usr/bin``, else installed by ``scripts/ensure-redis`` (Debian's package,
as root, which is what CI is). If none can be had the Redis tests *fail*, loudly: they
never skip. The server runs with no persistence (``save ""``, ``appendonly no``), a
random password (so every test also goes through authentication and the redaction of a
password in the URL), on a free port, and is stopped when the session ends.
"""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from managedloop.stores import FileStore, MemoryStore, RedisStore, SQLiteStore, Store

ROOT = Path(__file__).resolve().parents[2]

# A start-up deadline for the server, not a margin any test depends on: it answers PING
# in milliseconds; this only turns a server that never comes up into a failure.
REDIS_START_DEADLINE = 30.0

_namespaces = itertools.count()


@dataclass(frozen=True)
class RedisServer:
    """A running ``redis-server``: ``url`` carries the password."""

    host: str
    port: int
    password: str

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@{self.host}:{self.port}/0"

    def namespace(self) -> str:
        """A namespace no other test uses (the server is shared by the session)."""
        return f"test{os.getpid()}-{next(_namespaces)}:"


def find_redis_server() -> str:
    """The path of a ``redis-server`` binary; installs one if it can, else fails loudly."""
    given = os.environ.get("REDIS_SERVER")
    if given:
        return given
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )
    if found:
        return found
    done = subprocess.run(
        [str(ROOT / "scripts" / "ensure-redis")],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.fail(
            "the RedisStore tests need a real redis-server and none could be found or "
            f"installed (scripts/ensure-redis):\n{done.stderr}",
            pytrace=False,
        )
    return done.stdout.strip().splitlines()[-1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _answers(port: int, password: str) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(f"AUTH {password}\r\nPING\r\n".encode())
            reply = b""
            while b"PONG" not in reply and len(reply) < 1000:
                chunk = sock.recv(1000)
                if not chunk:
                    return False
                reply += chunk
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    binary = find_redis_server()
    workdir = tmp_path_factory.mktemp("redis")
    for _attempt in range(5):  # another process may take the free port before the server
        port, password = _free_port(), secrets.token_hex(16)
        config = "\n".join(
            [
                "bind 127.0.0.1",
                f"port {port}",
                'save ""',
                "appendonly no",
                f"requirepass {password}",
                f"dir {workdir}",
                "daemonize no",
                "loglevel warning",
                "",
            ]
        )
        log = (workdir / f"redis-{port}.log").open("w+b")
        server = subprocess.Popen(  # config on stdin: the password is not in argv
            [binary, "-"], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT
        )
        assert server.stdin is not None
        server.stdin.write(config.encode())
        server.stdin.close()
        deadline = time.monotonic() + REDIS_START_DEADLINE
        while server.poll() is None and time.monotonic() < deadline:
            if _answers(port, password):
                break
            time.sleep(0.02)
        if server.poll() is None and _answers(port, password):
            try:
                yield RedisServer(host="127.0.0.1", port=port, password=password)
            finally:
                server.terminate()
                server.wait(timeout=30)
                log.close()
            return
        server.kill()
        server.wait()
        log.seek(0)
        output = log.read().decode(errors="replace")
        log.close()
        if "Address already in use" not in output:
            break
    pytest.fail(f"redis-server ({binary}) did not start:\n{output}", pytrace=False)


def _redis(tmp: Path, request: pytest.FixtureRequest) -> Store:
    server: RedisServer = request.getfixturevalue("redis_server")
    return RedisStore(server.url, namespace=server.namespace())


FACTORIES: dict[str, Callable[[Path, pytest.FixtureRequest], Store]] = {
    "memory": lambda _tmp, _request: MemoryStore(),
    "file": lambda tmp, _request: FileStore(tmp / "store.json"),
    "sqlite": lambda tmp, _request: SQLiteStore(tmp / "store.sqlite3"),
    "redis": _redis,
}

PERSISTENT = ("file", "sqlite", "redis")


@pytest.fixture(params=sorted(FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made = FACTORIES[request.param](tmp_path, request)
    yield made
    made.close()
