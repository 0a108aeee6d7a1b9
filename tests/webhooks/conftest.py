"""Fixtures for webhook-driven sessions: the Claude emulator, a deployment whose sessions
park on a custom tool, and real HTTP receivers on 127.0.0.1 (aiohttp serving
``managedloop.webhooks``, plainly or through a minimal ASGI bridge)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anthropic
import anyio
import pytest
from aiohttp import web

import claude_fixtures
import managedloop as ml
from claude_fixtures import make_provider
from managedloop.testing import ClaudeEmulator, call, say

# The shared Claude fixtures (tests/claude_fixtures.py), served to this folder.
client = claude_fixtures.client
sdk_max_retries = claude_fixtures.sdk_max_retries


@dataclass
class Calls:
    """How often each tool really ran."""

    log: list[str] = field(default_factory=list)


def weather_spec(calls: Calls) -> ml.AgentSpec:
    @ml.tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.log.append(city)
        return f"Sunny in {city}"

    return ml.AgentSpec(name="weather", system_prompt="Use tools.", tools=[get_weather])


def held_weather_spec(calls: Calls, release: anyio.Event) -> ml.AgentSpec:
    """As :func:`weather_spec`, but the tool, once its call is logged, waits for
    ``release``: still running while a test delivers something else."""

    @ml.tool
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.log.append(city)
        await release.wait()
        return f"Sunny in {city}"

    return ml.AgentSpec(name="weather", system_prompt="Use tools.", tools=[get_weather])


async def until(check: Callable[[], bool]) -> None:
    """Poll ``check`` until it holds."""
    with anyio.fail_after(30):  # a bound against a hang, not a timing assumption
        while not check():
            await anyio.sleep(0.005)


async def run_deployment(client: anthropic.AsyncAnthropic, deployment_id: str) -> str:
    """Run a deployment now (``POST /v1/deployments/{id}/run``); the session it started."""
    run = await client.beta.deployments.run(deployment_id)
    assert run.session_id is not None
    return run.session_id


async def parked(emu: ClaudeEmulator, session_id: str) -> None:
    """Wait until the session idles on its custom tool call."""
    await until(lambda: emu.call(lambda: bool(emu.session(session_id).open_calls)))


@pytest.fixture
def emu() -> Iterator[ClaudeEmulator]:
    # Every session plays this script: one custom tool call, then the answer.
    with ClaudeEmulator([call("get_weather", {"city": "Paris"}), say("Sunny in Paris.")]) as e:
        yield e


async def deployment(
    client: anthropic.AsyncAnthropic, spec: ml.AgentSpec, **kwargs: Any
) -> tuple[str, ml.AgentSpec]:
    """A deployment of ``spec``'s provisioned agent; returns its id."""
    handle = await ml.provision(make_provider(client), spec)
    dep = await client.beta.deployments.create(
        agent=handle.agent_id,
        environment_id=handle.environment_id,
        initial_events=[
            {"type": "user.message", "content": [{"type": "text", "text": "Weather in Paris?"}]}
        ],
        name="nightly-weather",
        **kwargs,
    )
    return dep.id, spec


Handle = Callable[[bytes, dict[str, str]], Awaitable[tuple[int, bytes]]]


@asynccontextmanager
async def serve(handle: Handle) -> AsyncIterator[str]:
    """A real HTTP server on 127.0.0.1 whose POST / calls ``handle(body, headers)``."""

    async def route(request: web.Request) -> web.Response:
        status, body = await handle(await request.read(), dict(request.headers))
        return web.Response(status=status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/{tail:.*}", route)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def asgi_bridge(asgi: Any, path: str = "/") -> Handle:
    """Call an ASGI app for one request; answer as soon as its response is complete (the app
    may go on working afterwards, as under uvicorn)."""

    async def handle(body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        done: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        status: list[int] = []
        chunks: list[bytes] = []
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                await asyncio.Event().wait()  # no disconnect while the app works
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body") and not done.done():
                    done.set_result((status[0], b"".join(chunks)))

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        task = asyncio.get_running_loop().create_task(asgi(scope, receive, send))
        BACKGROUND.add(task)
        task.add_done_callback(BACKGROUND.discard)
        return await done

    return handle


BACKGROUND: set[asyncio.Task[Any]] = set()
"""ASGI calls still running after their response (kept referenced until done)."""


def tool_results(emu: ClaudeEmulator, session_id: str) -> list[str]:
    """``custom_tool_use_id`` of every tool result the session applied, in order."""
    return [
        e["custom_tool_use_id"]
        for e in emu.sent_events(session_id)
        if e.get("type") == "user.custom_tool_result"
    ]


def tool_uses(emu: ClaudeEmulator, session_id: str) -> list[str]:
    return [e["id"] for e in emu.events(session_id) if e["type"] == "agent.custom_tool_use"]
