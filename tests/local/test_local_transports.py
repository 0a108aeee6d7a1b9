"""The transport seam: both real transports behave the same on what the layer above
relies on (gzip, headers, redirects, streams, a new event loop per ``run_sync``), and the
mock transport is enough to unit-test Local with no socket."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from test_local_wire import AGENT, RawServer, completion, ok

import managedloop as ml
from managedloop.providers.local import (
    AiohttpTransport,
    AsyncTransport,
    HttpRequest,
    HttpTransport,
    Local,
)
from managedloop.testing import ChatEmulator, MockResponse, MockTransport, call, say

pytestmark = pytest.mark.anyio

TRANSPORTS = pytest.mark.parametrize("kind", ["default", "aiohttp"])


def transport(kind: str) -> AsyncTransport:
    return (
        HttpTransport(trust_env=False) if kind == "default" else AiohttpTransport(trust_env=False)
    )


def make(base_url: str, kind: str, **kwargs: Any) -> Local:
    return Local(
        model="m",
        base_url=base_url,
        api_key="k",
        max_retries=0,
        transport=transport(kind),
        **kwargs,
    )


async def run(provider: Local) -> ml.SessionResult:
    async with provider:
        return await ml.run(provider, agent=AGENT, prompt="q")


def gzipped(body: bytes, content_type: str = "application/json") -> bytes:
    packed = gzip.compress(body)
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Encoding: gzip\r\n"
        f"Content-Length: {len(packed)}\r\n\r\n"
    ).encode() + packed


@TRANSPORTS
async def test_accept_encoding_gzip_is_sent_once_and_a_gzip_answer_decoded(kind: str) -> None:
    async with RawServer([gzipped(completion("unzipped"))]) as srv:
        assert (await run(make(srv.base_url, kind))).text == "unzipped"
    head = srv.requests[0].split(b"\r\n\r\n")[0].lower()
    assert head.count(b"\r\naccept-encoding: gzip") == 1
    assert head.count(b"\r\nhost: ") == 1
    assert head.count(b"\r\nauthorization: bearer k") == 1


@TRANSPORTS
async def test_a_gzip_event_stream_is_decoded(kind: str) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "zipped stream"}}]}
    events = f"data: {json.dumps(chunk)}\r\n\r\ndata: [DONE]\r\n\r\n".encode()
    async with RawServer([gzipped(events, "text/event-stream")]) as srv:
        assert (await run(make(srv.base_url, kind, stream=True))).text == "zipped stream"


@TRANSPORTS
async def test_a_same_origin_307_is_followed_through_the_seam(kind: str) -> None:
    moved = ok(b"", status="307 Temporary Redirect", headers="Location: /v2/chat/completions\r\n")
    async with RawServer([moved, ok()]) as srv:
        assert (await run(make(srv.base_url, kind))).text == "hi"
    assert srv.requests[1].startswith(b"POST /v2/chat/completions HTTP/1.1\r\n")


@TRANSPORTS
async def test_a_header_host_replaces_the_urls_once(kind: str) -> None:
    async with RawServer([ok()]) as srv:
        await run(make(srv.base_url, kind, headers={"Host": "virtual.test"}))
    head = srv.requests[0].split(b"\r\n\r\n")[0]
    assert head.lower().count(b"\r\nhost: ") == 1
    assert b"\r\nHost: virtual.test" in head


@TRANSPORTS
def test_run_sync_twice_reuses_one_transport_on_two_event_loops(kind: str) -> None:
    with ChatEmulator([say("one")]) as emu:  # each session plays the script anew
        provider = Local(
            model="m", base_url=emu.base_url, api_key=emu.api_key, transport=transport(kind)
        )
        assert ml.run_sync(provider, agent=AGENT, prompt="a").text == "one"
        assert ml.run_sync(provider, agent=AGENT, prompt="b").text == "one"


@TRANSPORTS
def test_a_tool_conversation_streams_on_both_transports(kind: str) -> None:
    @ml.tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return f"found {city}"

    agent = ml.AgentSpec(tools=[lookup])
    script = [call("lookup", {"city": "Paris"}), say("done")]
    with ChatEmulator(script, chunk_size=3) as emu:
        provider = Local(
            model="m",
            base_url=emu.base_url,
            api_key=emu.api_key,
            stream=True,
            transport=transport(kind),
        )
        result = ml.run_sync(provider, agent=agent, prompt="q")
    assert result.text == "done"
    assert result.custom_tool_uses[0].input == {"city": "Paris"}


def test_the_mock_transport_takes_an_async_handler_and_its_errors() -> None:
    seen: list[HttpRequest] = []

    async def answer(request: HttpRequest) -> MockResponse:
        seen.append(request)
        if len(seen) == 1:
            raise ml.TransportError("blip")  # retried, like a real transport's
        body = {"choices": [{"message": {"role": "assistant", "content": "ok"}}]}
        return MockResponse(200, json=body)

    provider = Local(
        model="m", base_url="http://m.test/v1", transport=MockTransport(answer), retry_backoff=0
    )
    assert ml.run_sync(provider, agent=AGENT, prompt="q").text == "ok"
    assert len(seen) == 2


def test_a_permanent_transport_error_from_any_transport_is_not_retried() -> None:
    def answer(request: HttpRequest) -> MockResponse:
        raise ml.TransportError("pinned certificate changed", code="tls_error", permanent=True)

    mock = MockTransport(answer)
    provider = Local(model="m", base_url="http://m.test/v1", transport=mock, retry_backoff=0)
    with pytest.raises(ml.TransportError, match="pinned"):
        ml.run_sync(provider, agent=AGENT, prompt="q")
    assert len(mock.requests) == 1


def test_a_mock_error_status_maps_as_a_real_one() -> None:
    mock = MockTransport(lambda request: MockResponse(401, json={"error": {"message": "no key"}}))
    provider = Local(model="m", base_url="http://m.test/v1", transport=mock)
    with pytest.raises(ml.AuthenticationError, match="no key"):
        ml.run_sync(provider, agent=AGENT, prompt="q")


def test_aiohttp_failures_map_to_the_same_kinds_as_the_default_transports() -> None:
    import aiohttp
    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL

    from managedloop.providers.local import _wire
    from managedloop.providers.local._transports import _aiohttp_error

    url = URL("http://h/v1")
    info = aiohttp.RequestInfo(url, "POST", CIMultiDictProxy(CIMultiDict()), url)
    cases: list[tuple[Exception, type[Exception]]] = [
        (aiohttp.ClientHttpProxyError(info, (), status=407), _wire.ProxyAuthError),
        (aiohttp.ClientHttpProxyError(info, (), status=502), _wire.ProxyStatusError),
        (aiohttp.ConnectionTimeoutError(), _wire.ConnectTimeoutError),
        (aiohttp.SocketTimeoutError(), _wire.ReadTimeoutError),
        (aiohttp.ServerDisconnectedError(), _wire.DisconnectedError),
        (aiohttp.ClientPayloadError("cut"), _wire.DisconnectedError),
        (
            aiohttp.ClientResponseError(info, (), message="Got more than 8190 bytes"),
            _wire.HeadTooLargeError,
        ),
        (aiohttp.ClientResponseError(info, (), message="Bad status line"), _wire.BadResponseError),
        (
            aiohttp.ClientOSError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] alert"),
            _wire.TLSError,
        ),
    ]
    for exc, kind in cases:
        assert type(_aiohttp_error(exc, aiohttp)) is kind, exc
    other = ValueError("not aiohttp's")
    assert _aiohttp_error(other, aiohttp) is other
    assert _aiohttp_error(aiohttp.ClientHttpProxyError(info, (), status=502), aiohttp).status == 502  # type: ignore[attr-defined]
