"""Authentication and configuration: API key, bearer-token file, config precedence, secrets.

Reference §9 / §10 lines covered here:

* ``config_test``: opts > configure() > env > default; a missing key names every layer
  (argument, configure, env var); presence-based None selects the other auth source.
* ``client_test`` ``new``: default base URL, beta, files beta, version, receive timeout.
  *Not ported:* ``profile`` (dead code in the reference, §11.8).
* §10 bearer file: re-read on every HTTP attempt, including the SDK's retries (each
  attempt carries the then-current token, rotated by an emulator hook) and the stream;
  30 s or less left fails before dispatch with ``authentication_error``; no redirects; the
  token never reaches a repr, telemetry, an error or the cache key.
* ``redaction_test`` (runtime part): the API key never appears in a repr, log line,
  telemetry attribute, error or result. The capture corpus redaction is not part of this
  host.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

import managedloop as ml
from emitted import emitted
from managedloop.providers import ClaudeManagedAgents
from managedloop.providers.claude._api import read_bearer_token, settings
from managedloop.testing import ClaudeEmulator
from managedloop.testing.claude import credential_id

from .conftest import WEATHER

pytestmark = pytest.mark.anyio


def _write_token(path: Path, token: str, expires_in: float = 3600) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"access_token": token, "expires_at": time.time() + expires_in}))
    tmp.replace(path)  # rotated atomically, as the README says


def test_config_resolution_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")
    monkeypatch.delenv("ANTHROPIC_BEARER_TOKEN_FILE", raising=False)
    s = settings()
    assert s.api_key is not None
    assert s.api_key.reveal() == "sk-env"
    assert s.base_url == "https://api.anthropic.com"
    assert s.beta == "managed-agents-2026-04-01"
    assert s.files_beta == "files-api-2025-04-14"
    assert s.anthropic_version == "2023-06-01"
    assert s.receive_timeout == 60.0
    ml.configure(api_key="sk-conf", base_url="http://x", receive_timeout=5)
    s = settings()
    assert s.api_key is not None
    assert s.api_key.reveal() == "sk-conf"
    assert s.base_url == "http://x"
    s = settings(api_key="sk-opt")
    assert s.api_key is not None
    assert s.api_key.reveal() == "sk-opt"
    assert "sk-" not in repr(s)


def test_explicit_none_selects_the_other_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")
    monkeypatch.setenv("ANTHROPIC_BEARER_TOKEN_FILE", "/tmp/token.json")
    with pytest.raises(ml.ConfigError) as info:
        settings()
    assert info.value.code == "invalid_configuration"
    bearer = settings(api_key=None)
    assert bearer.api_key is None
    assert bearer.bearer_token_file == "/tmp/token.json"
    key = settings(bearer_token_file=None)
    assert key.bearer_token_file is None
    assert key.api_key is not None


def test_missing_auth_names_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BEARER_TOKEN_FILE", raising=False)
    with pytest.raises(ml.ConfigError) as info:
        ClaudeManagedAgents()
    assert "ANTHROPIC_API_KEY" in info.value.message
    assert "bearer_token_file" in info.value.message


def test_bearer_file_validation(tmp_path: Path) -> None:
    path = tmp_path / "token.json"
    with pytest.raises(ml.AuthenticationError) as info:
        read_bearer_token(str(path))
    assert info.value.context["reason"] == "bearer_file_missing"
    path.write_text("not json")
    with pytest.raises(ml.AuthenticationError):
        read_bearer_token(str(path))
    _write_token(path, "tok-secret", expires_in=30)
    with pytest.raises(ml.AuthenticationError) as info:
        read_bearer_token(str(path))
    assert info.value.code == "authentication_error"
    assert info.value.context["reason"] == "bearer_token_expiring"
    assert "tok-secret" not in str(info.value)
    assert "tok-secret" not in repr(info.value.context)
    _write_token(path, "tok-secret", expires_in=31.5)
    assert read_bearer_token(str(path)) == "tok-secret"


async def test_bearer_file_is_reread_on_every_attempt(tmp_path: Path) -> None:
    path = tmp_path / "token.json"
    with ClaudeEmulator() as emu:
        emu.bearer_tokens.update({"tok-one", "tok-two"})
        _write_token(path, "tok-one")
        provider = ClaudeManagedAgents(
            bearer_token_file=str(path), base_url=emu.base_url, reconnect_backoff=0
        )
        try:
            handle = await ml.provision(provider, WEATHER)

            def rotate(request: Any) -> Any:
                _write_token(path, "tok-two")  # rotation mid-session takes effect at once
                emu.bearer_tokens.discard("tok-one")
                return ml.testing.say("rotated")

            emu.agent.script = [rotate, ml.testing.say("again")]
            provider2 = ClaudeManagedAgents(
                bearer_token_file=str(path),
                base_url=emu.base_url,
                agent=handle,
                environment=handle,
                reconnect_backoff=0,
            )
            async with ml.start(provider2, agent=WEATHER, prompt="go") as live:
                assert (await live.result()).text == "rotated"
                await live.send("more")  # only tok-two is accepted now
                assert (await live.result()).text == "again"
            await provider2.aclose()
        finally:
            await provider.aclose()
        assert all("authorization" not in r.headers for r in emu.requests)


async def test_each_retry_attempt_carries_the_then_current_token(tmp_path: Path) -> None:
    """The file is re-read per HTTP attempt, including the SDK's own retries: the emulator
    rotates the file as each attempt arrives, and each next attempt carries the new token.
    """
    path = tmp_path / "token.json"
    tokens = [f"tok-{i}" for i in range(4)]
    with ClaudeEmulator() as emu:
        emu.bearer_tokens.update(tokens)
        _write_token(path, tokens[0])
        arrived: list[str] = []

        def rotate(method: str, request_path: str) -> None:
            if request_path == "/v1/files":
                arrived.append(method)
                _write_token(path, tokens[len(arrived)])  # the next attempt's token

        emu.faults.before_request = rotate
        emu.faults.rate_limit = 2  # two 429s: the SDK retries twice (retry-after honoured)
        emu.faults.retry_after = "0.01"
        emu.faults.fault_path = "/v1/files"
        provider = ClaudeManagedAgents(
            bearer_token_file=str(path), base_url=emu.base_url, max_retries=2
        )
        try:
            with emitted() as got:
                assert await provider.list_files() == []
                with pytest.raises(ml.APIStatusError) as info:
                    await provider.download_file("file_missing")
        finally:
            await provider.aclose()
    blobs = [repr(provider), repr(provider._settings), repr(got), str(info.value)]
    blobs += [repr(info.value.context), repr(provider.cache_identity())]
    assert not any(t in b for t in tokens for b in blobs), "a bearer token leaked"
    attempts = [r for r in emu.requests if r.path == "/v1/files"]
    assert [r.status for r in attempts] == [429, 429, 200]
    assert [r.credential for r in attempts] == [credential_id(t) for t in tokens[:3]]
    assert all("authorization" not in r.headers for r in attempts)


async def test_expiring_token_fails_before_dispatch(tmp_path: Path) -> None:
    path = tmp_path / "token.json"
    with ClaudeEmulator() as emu:
        _write_token(path, "tok-old", expires_in=10)
        provider = ClaudeManagedAgents(bearer_token_file=str(path), base_url=emu.base_url)
        try:
            with pytest.raises(ml.AuthenticationError) as info:
                await ml.run(provider, agent=WEATHER, prompt="x")
        finally:
            await provider.aclose()
        assert info.value.code == "authentication_error"
        assert emu.requests == []  # nothing was dispatched


async def test_bearer_requests_do_not_follow_redirects(tmp_path: Path) -> None:
    from aiohttp import web

    path = tmp_path / "token.json"
    _write_token(path, "tok-redirect")
    hits: list[dict[str, str]] = []

    async def target(request: web.Request) -> web.Response:
        hits.append(dict(request.headers))
        return web.json_response({"data": [], "next_page": None})

    with ClaudeEmulator() as other:  # a second loopback host to redirect to

        async def redirect(request: web.Request) -> web.Response:
            raise web.HTTPTemporaryRedirect(f"{other.base_url}/v1/files")

        app = web.Application()
        app.router.add_get("/v1/files", redirect)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        provider = ClaudeManagedAgents(
            bearer_token_file=str(path), base_url=f"http://127.0.0.1:{port}", max_retries=0
        )
        try:
            with pytest.raises(ml.APIStatusError) as info:
                await provider.list_files()
            assert info.value.status == 307
        finally:
            await provider.aclose()
            await runner.cleanup()
        assert other.requests == []  # the token never left for the other host


async def test_api_key_never_leaks(caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-ant-very-secret-000000000000"
    with ClaudeEmulator(api_key=secret) as emu:
        caplog.set_level(logging.DEBUG)
        provider = ClaudeManagedAgents(api_key=secret, base_url=emu.base_url, reconnect_backoff=0)
        try:
            with emitted() as got:
                result = await ml.run(provider, agent=WEATHER, prompt="x")
                with pytest.raises(ml.APIStatusError) as info:
                    await provider.download_file("file_missing")
        finally:
            await provider.aclose()
        blobs = [repr(provider), repr(got), caplog.text, str(info.value), repr(info.value.context)]
        blobs.append(json.dumps(result.to_dict()))
        blobs.append(repr([r.headers for r in emu.requests]))
        assert not any(secret in b for b in blobs)
