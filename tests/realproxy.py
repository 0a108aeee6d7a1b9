"""A real forwarding proxy on loopback for the Local host's proxy tests: ``proxy.py`` from
PyPI (the ``dev`` extra), started as its own process on ``127.0.0.1`` and a free port.

It forwards ``http://`` requests (absolute-form request lines) and tunnels ``CONNECT``;
with ``auth="user:password"`` it answers 407 without the right ``Proxy-Authorization``.
Its access log (one line per request: ``POST 127.0.0.1:PORT/...`` or ``CONNECT
127.0.0.1:PORT``) is what the tests read to see that a request went through it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

_START_BUDGET = 60.0  # seconds for proxy.py to start on a loaded two-core machine


class RealProxy:
    def __init__(self, directory: Path, *, auth: str | None = None) -> None:
        self.directory = directory
        self.auth = auth
        self.port = 0
        self.log = directory / "proxy.log"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RealProxy:
        port_file = self.directory / "proxy.port"
        command = [
            sys.executable,
            "-m",
            "proxy",
            "--hostname",
            "127.0.0.1",
            "--port",
            "0",
            "--port-file",
            str(port_file),
            "--num-workers",
            "1",
            "--num-acceptors",
            "1",
            "--log-level",
            "INFO",
            "--log-file",
            str(self.log),
        ]
        if self.auth is not None:
            command += ["--basic-auth", self.auth]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.directory
        )
        deadline = time.monotonic() + _START_BUDGET
        while time.monotonic() < deadline:
            if port_file.exists() and port_file.read_text().strip():
                self.port = int(port_file.read_text().strip())
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
                except OSError:
                    pass
                else:
                    break
            if self.process.poll() is not None:
                raise RuntimeError(f"proxy.py exited at start: {self.log_text()}")
            time.sleep(0.05)
        else:
            self.__exit__(None, None, None)
            raise RuntimeError("proxy.py did not start")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def access_lines(self) -> list[str]:
        return [line for line in self.log_text().splitlines() if "access_log" in line]

    def wait_for(self, needle: str, count: int = 1, budget: float = 30.0) -> list[str]:
        """The access-log lines holding ``needle``, once there are ``count`` of them
        (proxy.py writes a line when the client's connection ends)."""
        deadline = time.monotonic() + budget
        while True:
            lines = [line for line in self.access_lines() if needle in line]
            if len(lines) >= count or time.monotonic() > deadline:
                return lines
            time.sleep(0.05)
