"""A redirect never carries a request (or its credentials) to another origin.

Found by the hostile review of issue 7: the client the provider builds for an API key used
the SDK's default httpx client, which follows redirects, so a 307 to another origin
re-POSTed the agent definition there. The bearer-file client already refused them.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from aiohttp import web

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents


class _Peer:
    """A tiny aiohttp server on 127.0.0.1 in a thread, recording what reaches it."""

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.requests: list[str] = []

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.requests.append(request.path)
        return await self.handler(request)  # type: ignore[no-any-return]

    def __enter__(self) -> _Peer:
        ready = threading.Event()

        def main() -> None:
            self.loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._serve)
            runner = web.AppRunner(app, access_log=None)
            self.loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            self.loop.run_until_complete(site.start())
            self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            ready.set()
            self.loop.run_forever()
            self.loop.run_until_complete(runner.cleanup())
            self.loop.close()

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()
        assert ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_the_built_client_never_follows_a_redirect_to_another_origin(status: int) -> None:
    async def elsewhere(request: web.Request) -> web.Response:
        return web.json_response(
            {"type": "error", "error": {"type": "x", "message": "x"}}, status=400
        )

    with _Peer(elsewhere) as other:

        async def redirect(request: web.Request) -> web.Response:
            return web.Response(status=status, headers={"Location": other.url + request.path})

        with _Peer(redirect) as api:
            provider = ClaudeManagedAgents(api_key="sk-ant-test-key", base_url=api.url)
            with pytest.raises(ml.ManagedLoopError) as info:
                ml.provision_sync(provider, ml.AgentSpec(name="a", system_prompt="secret plan"))
    assert other.requests == [], "the request was re-sent to another origin"
    assert api.requests  # it did reach the configured origin
    assert "sk-ant-test-key" not in str(info.value)
