"""A tiny loopback peer for the AgentCore tests: answers every request with one handler.

Used where the emulator cannot misbehave the way a test needs (redirects, echoed
credentials). It records each request (path, headers, body) it received.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from managedloop.providers.agentcore import BedrockAgentCore
from managedloop.testing._loopback import LoopbackServer

TOKEN = "FwoGZXIvYXdzEJr//////////wEaDMySecretTok+en/abc=="
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/h1"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Peer(LoopbackServer):
    """A loopback peer answering every request with ``handler``; records what it got."""

    def __init__(self, handler: Handler) -> None:
        super().__init__()
        self.handler = handler
        self.requests: list[tuple[str, dict[str, str], bytes]] = []

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        return app

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append((request.path, dict(request.headers), body))
        return await self.handler(request)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def provider_for(url: str, **options: Any) -> BedrockAgentCore:
    return BedrockAgentCore(
        harness_arn=ARN,
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="AKIAEXAMPLE",
        aws_secret_access_key=SECRET,
        aws_session_token=TOKEN,
        harness_tools=[],
        invoke_retries=0,
        retry_backoff=0.0,
        **options,
    )
