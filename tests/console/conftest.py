"""The console under test: the real application on a real uvicorn server (127.0.0.1, a free
port, in a thread of the test process), and Debian's Chromium driven by Playwright.

The browser is the one ``scripts/ensure-chromium`` installs (Playwright's own download
needs a network CI does not have); a missing browser fails the tests, never skips them.
The browser tests take a screenshot of each page; with ``MANAGEDLOOP_SCREENSHOTS=1`` in the
environment they replace the docs' ``docs/img/console-*.png`` (else they go to a temporary
folder, so a test run leaves the tree as it found it).
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

ROOT = Path(__file__).resolve().parents[2]
SHOTS = (
    ROOT / "docs" / "img"
    if os.environ.get("MANAGEDLOOP_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "managedloop-console-shots"
)
TOKEN = "test-token-0123456789abcdef"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    url: str
    app: Any
    server: uvicorn.Server

    def get(
        self, path: str, *, token: str | None = TOKEN, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], str]:
        return self.request("GET", path, token=token, headers=headers)

    def request(
        self,
        method: str,
        path: str,
        *,
        token: str | None = TOKEN,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], str]:
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=all_headers)
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=30) as resp:
                return resp.status, dict(resp.headers), resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read().decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@pytest.fixture
def serve() -> Iterator[Callable[[Any], Served]]:
    """``serve(app)``: the app on uvicorn in a thread, until the test ends."""
    running: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(app: Any) -> Served:
        port = free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        for _ in range(500):  # up to 10 s on a loaded machine: the server binds
            if server.started:
                break
            time.sleep(0.02)
        assert server.started, "uvicorn did not start"
        running.append((server, thread))
        return Served(url=f"http://127.0.0.1:{port}", app=app, server=server)

    yield start
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=10)


def chromium_path() -> str:
    found = subprocess.run(
        [str(ROOT / "scripts" / "ensure-chromium")], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        pytest.fail("no Chromium for the browser tests (scripts/ensure-chromium):\n" + found.stderr)
    return found.stdout.strip()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per module: Playwright's sync API keeps an event loop in this thread
    while it runs, so it must be gone before any async test of another module starts."""
    from playwright.sync_api import sync_playwright

    path = os.environ.get("CHROMIUM") or chromium_path()
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=path, args=LAUNCH_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


def screenshot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"console-{name}.png"), full_page=False)
