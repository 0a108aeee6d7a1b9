"""``managedloop console`` as a user starts it: a process that binds 127.0.0.1, prints the
URL with its token, and answers 401 without it."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import managedloop as ml
from managedloop.stores import SQLiteStore

pytestmark = pytest.mark.timeout(60)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _get(url: str, cookie: str | None = None) -> tuple[int, dict[str, str]]:
    opener = urllib.request.build_opener(_NoRedirect)
    req = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with opener.open(req, timeout=20) as resp:
            return int(resp.status), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers)


@pytest.mark.parametrize("given", [None, "a-token-given-by-env-0123"])
def test_the_command_prints_its_url_and_guards_it(tmp_path: Path, given: str | None) -> None:
    path = tmp_path / "ml.sqlite3"
    store = SQLiteStore(path)
    ml.SessionRecord(store).append("sesn_cli", {"kind": "prompt", "text": "hello"})
    store.close()
    env = {k: v for k, v in os.environ.items() if k != "MANAGEDLOOP_CONSOLE_TOKEN"}
    if given:
        env["MANAGEDLOOP_CONSOLE_TOKEN"] = given
    proc = subprocess.Popen(
        [sys.executable, "-m", "managedloop", "console", "--store", str(path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        prefix = "managedloop console: http://127.0.0.1:"
        assert line.startswith(prefix), (
            line,
            proc.stderr.read() if proc.poll() is not None else "",
        )
        url = line.removeprefix("managedloop console: ")
        base, _, token = url.partition("/?token=")
        assert len(token) >= 16
        if given:
            assert token == given
        assert _get(base + "/")[0] == 401
        status, headers = _get(url)  # the printed URL: a cookie for the token
        assert status == 303
        cookie = headers["set-cookie"].split(";")[0]
        assert _get(base + "/", cookie)[0] == 200
        req = urllib.request.Request(
            base + "/sessions/sesn_cli", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(req, timeout=20) as resp:
            assert "hello" in resp.read().decode()
    finally:
        proc.terminate()
        proc.communicate(timeout=20)  # closes the pipes too
