"""Redirects are never followed on either plane (hostile review, finding 1)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

import managedloop as ml

from ._peer import SECRET, TOKEN, Peer, provider_for

# ------------------------------------------------------------------ 1. redirects


async def _refuse(request: web.Request) -> web.StreamResponse:
    return web.json_response({}, status=400)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_an_invoke_and_its_token_are_never_replayed_to_another_origin(status: int) -> None:
    with Peer(_refuse) as other:

        async def redirect(request: web.Request) -> web.StreamResponse:
            return web.Response(status=status, headers={"Location": other.url + request.path})

        with Peer(redirect) as api:
            provider = provider_for(api.url)
            with pytest.raises(ml.APIStatusError) as info:
                ml.run_sync(provider, agent=ml.AgentSpec(name="a"), prompt="private words")
    assert other.requests == []
    assert len(api.requests) == 1  # refused, not retried
    error = info.value
    assert error.code == "redirect_refused"
    assert error.context["status"] == status
    assert error.context["location_origin"] == other.url
    assert TOKEN not in str(error)
    assert SECRET not in str(error)


def test_a_same_origin_redirect_of_an_invoke_is_refused_too() -> None:
    # A SigV4 signature covers the path: a redirected invoke could never be valid anyway.
    async def redirect(request: web.Request) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": "/elsewhere"})

    with Peer(redirect) as api:
        provider = provider_for(api.url)
        with pytest.raises(ml.APIStatusError) as info:
            ml.run_sync(provider, agent=ml.AgentSpec(name="a"), prompt="x")
    assert [path for path, _, _ in api.requests] == ["/harnesses/invoke"]
    assert info.value.code == "redirect_refused"
    assert info.value.context["location_origin"] == api.url


@pytest.mark.parametrize(
    ("operation", "params"),
    [
        ("create_harness", {"harnessName": "h1", "executionRoleArn": "arn:aws:iam::1:role/r"}),
        ("get_harness", {"harnessId": "h1"}),
    ],
)
def test_the_control_plane_never_follows_a_redirect(operation: str, params: dict[str, Any]) -> None:
    with Peer(_refuse) as other:

        async def redirect(request: web.Request) -> web.StreamResponse:
            return web.Response(status=307, headers={"Location": other.url + request.path})

        with Peer(redirect) as api:
            provider = provider_for(api.url)
            with pytest.raises(ml.APIStatusError) as info:
                asyncio.run(provider.control_call(operation, **params))
            provider.close()
    assert other.requests == []
    assert len(api.requests) == 1
    assert info.value.code == "redirect_refused"
    assert info.value.context["status"] == 307
    assert info.value.context["location_origin"] == other.url
    assert TOKEN not in str(info.value)
