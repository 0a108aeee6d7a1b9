"""Local's HTTP/1.1 transport (``providers/local/_wire.py``) against hostile servers.

Each test serves scripted bytes from a raw asyncio server on 127.0.0.1 (no HTTP library
on the server side, so it can send what no well-behaved server would) and checks that a
malformed, oversized, truncated or silent answer is a named error on time, that a
connection is reused only when its last answer ended cleanly, and the wire rules of
``_http.py``'s docstring (no Accept-Encoding, no proxy, Basic credentials from userinfo,
TLS with hostname checks and SNI).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
from collections.abc import Callable
from typing import Any

import pytest
import trustme

import managedloop as ml
from managedloop.providers.local import Local, _wire
from managedloop.testing import ChatEmulator, say

pytestmark = pytest.mark.anyio

AGENT = ml.AgentSpec()
KEY = "sk-wire-secret-123"


def completion(text: str = "hi") -> bytes:
    message = {"role": "assistant", "content": text}
    return json.dumps({"choices": [{"message": message, "finish_reason": "stop"}]}).encode()


def ok(body: bytes | None = None, *, headers: str = "", status: str = "200 OK") -> bytes:
    body = completion() if body is None else body
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{headers}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class Close:
    """Send these bytes (maybe none), then close the connection."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = data


class Hang:
    """Send these bytes (maybe none), then nothing more, the connection held open."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = data


HANG = Hang()

Answer = bytes | Close | Hang | Callable[[bytes], bytes]


class RawServer:
    """Answers each request (over all connections, in order) with the next scripted
    answer; records every request's bytes and counts connections."""

    def __init__(self, answers: list[Answer], *, ssl_context: ssl.SSLContext | None = None):
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self._ssl = ssl_context
        self._writers: list[asyncio.StreamWriter] = []
        self._stop = asyncio.Event()

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", 0, ssl=self._ssl, backlog=64
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()
        await asyncio.sleep(0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        self._writers.append(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.answers.pop(0)
                if callable(answer):
                    answer = answer(request)
                if isinstance(answer, Hang):
                    writer.write(answer.data)
                    await self._stop.wait()
                    return
                if isinstance(answer, Close):
                    writer.write(answer.data)
                    await writer.drain()
                    return
                assert isinstance(answer, bytes)
                writer.write(answer)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self.open_now -= 1
            writer.close()


async def _no_sleep(seconds: float) -> None:
    raise AssertionError(f"a retry backoff of {seconds}s: this failure must not be retried")


def local(base_url: str, **kwargs: Any) -> Local:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("api_key", KEY)
    return Local(model="m", base_url=base_url, **kwargs)


async def run(provider: Local) -> ml.SessionResult:
    async with provider:
        return await ml.run(provider, agent=AGENT, prompt="q")


def no_secret(exc: BaseException) -> None:
    for text in (str(exc), repr(exc), repr(getattr(exc, "context", ""))):
        assert KEY not in text


# -- keep-alive --------------------------------------------------------------------------


async def test_sequential_requests_reuse_one_connection() -> None:
    async with RawServer([ok(), ok(), ok()]) as srv, local(srv.base_url) as provider:
        for _ in range(3):
            assert (await ml.run(provider, agent=AGENT, prompt="q")).text == "hi"
    assert srv.connections == 1
    assert len(srv.requests) == 3


async def test_the_request_is_http_1_1_with_accept_encoding_gzip_and_the_key_once() -> None:
    async with RawServer([ok()]) as srv:
        await run(local(srv.base_url, headers={"X-Trace": "t1"}))
    head = srv.requests[0].split(b"\r\n\r\n")[0].decode()
    lines = head.split("\r\n")
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    names = [line.partition(":")[0].lower() for line in lines[1:]]
    assert names.count("accept-encoding") == 1
    assert "Accept-Encoding: gzip" in lines
    assert names.count("authorization") == 1
    assert f"Authorization: Bearer {KEY}" in lines
    assert f"Host: 127.0.0.1:{srv.port}" in lines
    assert "X-Trace: t1" in lines
    assert "Content-Type: application/json" in lines


async def test_a_connection_close_answer_is_not_reused() -> None:
    async with (
        RawServer([ok(headers="Connection: close\r\n"), ok()]) as srv,
        local(srv.base_url) as provider,
    ):
        await ml.run(provider, agent=AGENT, prompt="q")
        await ml.run(provider, agent=AGENT, prompt="q")
    assert srv.connections == 2


async def test_a_body_until_the_connection_ends_is_read_whole() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
    async with (
        RawServer([Close(head + completion("to the end")), ok()]) as srv,
        local(srv.base_url) as provider,
    ):
        first = await ml.run(provider, agent=AGENT, prompt="q")
        second = await ml.run(provider, agent=AGENT, prompt="q")
    assert (first.text, second.text) == ("to the end", "hi")
    assert srv.connections == 2


async def test_an_interim_1xx_answer_is_skipped() -> None:
    early = b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"
    async with RawServer([early + ok()]) as srv:
        assert (await run(local(srv.base_url))).text == "hi"


# -- the idle connection the server closed -----------------------------------------------


async def test_a_pooled_connection_closed_before_answering_is_resent_once() -> None:
    """The server takes the second request on the kept-alive connection and closes it
    without a byte back (the race with an idle timeout). With no retries allowed, the run
    still succeeds: the transport re-sent it once on a new connection."""
    async with (
        RawServer([ok(), Close(), ok(completion("again"))]) as srv,
        local(srv.base_url) as provider,
    ):
        await ml.run(provider, agent=AGENT, prompt="q")
        result = await ml.run(provider, agent=AGENT, prompt="q")
    assert result.text == "again"
    assert srv.connections == 2
    assert len(srv.requests) == 3


async def test_a_pooled_connection_closed_mid_answer_is_not_resent() -> None:
    partial = ok()[:40]
    async with RawServer([ok(), Close(partial), ok()]) as srv, local(srv.base_url) as provider:
        await ml.run(provider, agent=AGENT, prompt="q")
        with pytest.raises(ml.TransportError) as failed:
            await ml.run(provider, agent=AGENT, prompt="q")
    assert failed.value.context["cause"] == "ServerDisconnected"
    assert len(srv.requests) == 2
    no_secret(failed.value)


async def test_a_fresh_connection_closed_before_answering_is_a_transport_error() -> None:
    async with RawServer([Close()]) as srv:
        with pytest.raises(ml.TransportError) as failed:
            await run(local(srv.base_url))
    assert failed.value.context["cause"] == "ServerDisconnected"
    assert len(srv.requests) == 1  # a new connection is never re-sent by the transport


async def test_a_server_that_closes_mid_body_is_retried_by_the_connection() -> None:
    cut = Close(ok(completion("a long answer that is cut"))[:-10])
    async with RawServer([cut, ok(completion("whole"))]) as srv:
        provider = local(srv.base_url, max_retries=1, retry_backoff=0.0)
        assert (await run(provider)).text == "whole"
    assert len(srv.requests) == 2


async def test_bytes_from_an_idle_connection_retire_it() -> None:
    """A server that sends more than one answer per request (the start of a second
    answer right after the first) never gets that connection reused."""
    async with (
        RawServer([ok() + b"HTTP/1.1 200 OK\r\n", ok()]) as srv,
        local(srv.base_url) as provider,
    ):
        assert (await ml.run(provider, agent=AGENT, prompt="q")).text == "hi"
        assert (await ml.run(provider, agent=AGENT, prompt="q")).text == "hi"
    assert srv.connections == 2


async def test_a_body_longer_than_its_content_length_is_cut_and_not_reused() -> None:
    body = completion("exact")
    longer = ok(body)[: -len(body)] + body + b"trailing garbage the server should not send"
    async with RawServer([longer, ok()]) as srv, local(srv.base_url) as provider:
        assert (await ml.run(provider, agent=AGENT, prompt="q")).text == "exact"
        assert (await ml.run(provider, agent=AGENT, prompt="q")).text == "hi"
    assert srv.connections == 2


# -- malformed answers --------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(b"garbage\r\n\r\n", id="garbage-status-line"),
        pytest.param(b"HTTP/1.1 abc OK\r\n\r\n", id="non-numeric-status"),
        pytest.param(b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", id="header-without-colon"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
            id="bad-chunk-size",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n",
            id="chunk-longer-than-its-size",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nabcde",
            id="two-content-lengths",
        ),
        pytest.param(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade"
            b"\r\n\r\n",
            id="upgrade",
        ),
    ],
)
async def test_an_answer_that_is_not_http_is_a_transport_error(answer: bytes) -> None:
    async with RawServer([answer]) as srv:
        with pytest.raises(ml.TransportError) as failed:
            await run(local(srv.base_url))
    assert failed.value.context["cause"] == "BadHttpResponse"
    no_secret(failed.value)


async def test_garbage_echoing_the_request_never_shows_the_key() -> None:
    async with RawServer([lambda request: b"NOPE " + request]) as srv:
        with pytest.raises(ml.TransportError) as failed:
            await run(local(srv.base_url))
    no_secret(failed.value)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_endless_head_is_refused_not_buffered(stream: bool) -> None:
    """A server sending header lines forever: refused once the head passes MAX_HEAD."""
    endless = b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"a" * (_wire.MAX_HEAD + 10)
    async with RawServer([endless + b"\r\n", HANG]) as srv:
        with pytest.raises(ml.MalformedResponseError) as failed:
            await run(local(srv.base_url, stream=stream, max_retries=3, sleep=_no_sleep))
    assert "head is over" in str(failed.value)
    assert failed.value.code == "response_head_too_large"
    assert len(srv.requests) == 1  # never retried: the same server sends the same head


async def test_many_small_headers_over_the_limit_are_refused() -> None:
    lines = b"".join(b"X-H%d: v\r\n" % i for i in range(_wire.MAX_HEAD // 8))
    async with RawServer([b"HTTP/1.1 200 OK\r\n" + lines + b"\r\n"]) as srv:
        with pytest.raises(ml.MalformedResponseError, match="head is over"):
            await run(local(srv.base_url))
    assert len(srv.requests) == 1


async def test_header_names_are_read_case_blind_and_the_name_cache_stays_bounded() -> None:
    # The pool shares each header name's lower-case str between answers; a server that
    # invents names must neither grow that cache without bound nor lose a header.
    many = b"".join(b"X-Invented-%d: v%d\r\n" % (i, i) for i in range(_wire._MAX_NAMES + 50))
    first = (
        b"HTTP/1.1 200 OK\r\nX-Twice: a\r\nx-twice: b\r\n" + many + b"Content-Length: 2\r\n\r\nok"
    )
    second = b"HTTP/1.1 200 OK\r\nX-TWICE: c\r\nContent-Length: 2\r\n\r\nok"
    async with RawServer([first, second]) as srv:
        pool = _wire.Pool(read_timeout=5, connect_timeout=5)
        try:
            head = b"POST /v1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
            key = ("http", "127.0.0.1", srv.port)
            answers = []
            for _ in range(2):
                resp = await pool.request(key, head)
                assert await resp.read() == b"ok"
                answers.append(dict(resp.headers))
                resp.release()
        finally:
            await pool.aclose()
    assert answers[0]["x-twice"] == "a, b"
    assert answers[0][f"x-invented-{_wire._MAX_NAMES + 49}"] == f"v{_wire._MAX_NAMES + 49}"
    assert answers[1] == {"x-twice": "c", "content-length": "2"}
    assert len(_wire._NAMES) <= _wire._MAX_NAMES


async def test_a_streamed_line_over_the_limit_is_a_malformed_response(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from managedloop.providers.local import _http

    monkeypatch.setattr(_http, "_MAX_SSE_LINE", 16)
    body = b"data: " + b"x" * 34
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    ) + body
    async with RawServer([answer]) as srv:
        with pytest.raises(ml.MalformedResponseError, match="over 16 bytes") as failed:
            await run(local(srv.base_url, stream=True, max_retries=3, sleep=_no_sleep))
    assert failed.value.code == "malformed_chat_response"


# -- content encodings --------------------------------------------------------------------


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_a_compressed_body_the_client_did_not_ask_for_is_decoded(coding: str) -> None:
    import zlib

    raw = completion("unzipped")
    body = gzip.compress(raw) if coding == "gzip" else zlib.compress(raw)
    async with RawServer([ok(body, headers=f"Content-Encoding: {coding}\r\n")]) as srv:
        assert (await run(local(srv.base_url))).text == "unzipped"


async def test_an_unknown_content_encoding_is_a_malformed_response_not_retried() -> None:
    async with RawServer([ok(b"\x00\x01", headers="Content-Encoding: br\r\n"), ok()]) as srv:
        with pytest.raises(ml.MalformedResponseError) as failed:
            await run(local(srv.base_url, max_retries=2, retry_backoff=0.0))
    assert failed.value.code == "malformed_chat_response"
    assert "'br'" in str(failed.value)
    assert len(srv.requests) == 1


async def test_a_damaged_gzip_body_is_a_transport_error() -> None:
    async with RawServer([ok(b"not gzip at all", headers="Content-Encoding: gzip\r\n")]) as srv:
        with pytest.raises(ml.TransportError, match="compressed body is damaged"):
            await run(local(srv.base_url))


# -- timeouts -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_server_that_never_answers_is_a_read_timeout(stream: bool) -> None:
    async with RawServer([HANG]) as srv:
        with pytest.raises(ml.TransportError) as failed:
            await run(local(srv.base_url, timeout=0.05, stream=stream))
    assert failed.value.context["cause"] == "ReadTimeout"


async def test_a_stream_that_goes_silent_after_its_head_is_a_read_timeout() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    async with RawServer([Hang(head + b"\r\n8\r\ndata: {}\r\n")]) as srv:
        with pytest.raises(ml.TransportError) as failed:
            await run(local(srv.base_url, timeout=0.05, stream=True))
    assert failed.value.context["cause"] == "ReadTimeout"


async def test_the_read_timeout_counts_from_the_last_byte_not_the_request() -> None:
    """The timer is pushed forward by every byte: when it fires within ``read_timeout`` of
    the last byte it re-arms for the rest; only a full silent window fails the exchange.
    Driven by hand (the timer callback called directly), so no wall-clock margin."""
    async with RawServer([HANG]) as srv:
        pool = _wire.Pool(read_timeout=1000.0, connect_timeout=30)
        conn = await pool._connect(("http", "127.0.0.1", srv.port), pooled=True)
        waiter = conn.start(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", b"", False)
        loop = asyncio.get_running_loop()
        conn.last_io = loop.time() - 999.0  # a byte 999 s ago: 1 s of the window left
        conn._on_timer()
        assert not waiter.done()
        assert conn.timer is not None
        assert conn.timer.when() == pytest.approx(conn.last_io + 1000.0)
        conn.last_io = loop.time() - 1000.5  # the window passed in silence
        conn._on_timer()
        with pytest.raises(_wire.ReadTimeoutError):
            await waiter
        await pool.aclose()


async def test_a_connect_that_never_completes_is_a_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()

    async def never(*args: Any, **kwargs: Any) -> Any:
        await asyncio.Event().wait()

    monkeypatch.setattr(loop, "create_connection", never)
    with pytest.raises(ml.TransportError) as failed:
        await run(local("http://127.0.0.1:9/v1", connect_timeout=0.01))
    assert failed.value.context["cause"] == "ConnectTimeout"


async def test_a_refused_connect_is_a_transport_error() -> None:
    async with RawServer([]) as srv:
        port = srv.port
    with pytest.raises(ml.TransportError) as failed:
        await run(local(f"http://127.0.0.1:{port}/v1"))
    assert failed.value.context["cause"] == "ConnectError"


# -- the pool -----------------------------------------------------------------------------


async def test_a_bounded_pool_never_holds_more_connections() -> None:
    async with RawServer([ok()] * 6) as srv, local(srv.base_url, max_connections=2) as provider:
        results = await asyncio.gather(
            *(ml.run(provider, agent=AGENT, prompt="q") for _ in range(6))
        )
    assert [r.text for r in results] == ["hi"] * 6
    assert srv.connections <= 2
    assert srv.most_open <= 2


async def test_a_cancelled_request_closes_its_connection() -> None:
    async with RawServer([HANG, ok()]) as srv, local(srv.base_url) as provider:
        task = asyncio.ensure_future(ml.run(provider, agent=AGENT, prompt="q"))
        while not srv.requests:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await ml.run(provider, agent=AGENT, prompt="q")).text == "hi"
    assert srv.connections == 2


async def test_closing_the_pool_fails_an_answer_in_flight_and_refuses_new_requests() -> None:
    async with RawServer([HANG]) as srv:
        pool = _wire.Pool(read_timeout=30, connect_timeout=30)
        head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        task = asyncio.ensure_future(pool.request(("http", "127.0.0.1", srv.port), head))
        while not srv.requests:
            await asyncio.sleep(0)
        await pool.aclose()
        with pytest.raises(_wire.DisconnectedError):
            await task
        with pytest.raises(_wire.WireError, match="closed"):
            await pool.request(("http", "127.0.0.1", srv.port), head)


# -- credentials, headers, proxies --------------------------------------------------------


async def test_userinfo_is_sent_as_basic_credentials_and_never_shown() -> None:
    async with RawServer([ok(), b"garbage\r\n\r\n"]) as srv:
        url = f"http://us%20er:p%40ss-secret@127.0.0.1:{srv.port}/v1"
        provider = Local(model="m", base_url=url, max_retries=0)
        async with provider:
            await ml.run(provider, agent=AGENT, prompt="q")
            with pytest.raises(ml.TransportError) as failed:
                await ml.run(provider, agent=AGENT, prompt="q")
    assert b"Authorization: Basic dXMgZXI6cEBzcy1zZWNyZXQ=\r\n" in srv.requests[0]  # us er:p@ss
    for text in (str(failed.value), repr(failed.value), repr(provider)):
        assert "p%40ss-secret" not in text
        assert "p@ss-secret" not in text


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"headers": {"Content-Length": "5"}}, "headers"),
        ({"headers": {"transfer-encoding": "chunked"}}, "headers"),
        ({"api_key": "sk-a\r\nX-Injected: 1"}, "api_key"),
        ({"api_key": "sk-a\nb"}, "api_key"),
    ],
)
def test_framing_headers_and_a_key_that_could_inject_a_header_are_refused(
    kwargs: dict[str, Any], option: str
) -> None:
    with pytest.raises(ml.InvalidOptionsError) as refused:
        Local(model="m", base_url="http://127.0.0.1:9/v1", **kwargs)
    assert refused.value.context["option"] == option
    assert "sk-a" not in str(refused.value)


def test_userinfo_with_an_authorization_header_is_refused() -> None:
    with pytest.raises(ml.InvalidOptionsError) as refused:
        Local(
            model="m",
            base_url="http://u:p@127.0.0.1:9/v1",
            api_key=None,
            headers={"authorization": "Bearer x"},
        )
    assert refused.value.context["option"] == "base_url"


async def test_a_content_type_header_of_the_callers_own_replaces_the_default() -> None:
    async with RawServer([ok()]) as srv:
        await run(local(srv.base_url, headers={"content-type": "application/json; x=1"}))
    head = srv.requests[0].split(b"\r\n\r\n")[0].lower()
    assert head.count(b"content-type:") == 1
    assert b"content-type: application/json; x=1" in head


async def test_a_host_header_of_the_callers_own_replaces_the_default() -> None:
    async with RawServer([ok()]) as srv:
        await run(local(srv.base_url, headers={"host": "virtual.example"}))
    head = srv.requests[0].split(b"\r\n\r\n")[0]
    assert head.lower().count(b"\r\nhost:") == 1
    assert b"\r\nhost: virtual.example" in head


async def test_the_api_key_wins_over_an_authorization_header() -> None:
    async with RawServer([ok()]) as srv:
        await run(local(srv.base_url, headers={"Authorization": "Bearer other"}))
    assert srv.requests[0].count(b"uthorization:") == 1
    assert f"Authorization: Bearer {KEY}".encode() in srv.requests[0]


async def test_proxy_variables_in_the_environment_are_ignored_with_trust_env_false(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with RawServer([]) as proxy, RawServer([ok()]) as srv:
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert (await run(local(srv.base_url, trust_env=False))).text == "hi"
    assert proxy.connections == 0
    assert srv.connections == 1


# -- TLS ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _server_context(ca: trustme.CA, seen: list[str | None]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)

    def sni(sock: Any, name: str | None, ctx: Any) -> None:
        seen.append(name)

    context.sni_callback = sni
    return context


async def test_https_with_a_trusted_certificate_sends_sni_and_works(ca: trustme.CA) -> None:
    seen: list[str | None] = []
    async with RawServer([ok()], ssl_context=_server_context(ca, seen)) as srv:
        provider = local(f"https://localhost:{srv.port}/v1")
        client = ssl.create_default_context()
        ca.configure_trust(client)
        provider._pool.transport.ssl_context = client
        assert (await run(provider)).text == "hi"
    assert seen == ["localhost"]
    assert f"Host: localhost:{srv.port}".encode() in srv.requests[0]


async def test_https_refuses_a_certificate_the_system_does_not_trust(ca: trustme.CA) -> None:
    async with RawServer([ok()], ssl_context=_server_context(ca, [])) as srv:
        with pytest.raises(ml.TransportError) as failed:
            await run(local(f"https://localhost:{srv.port}/v1", max_retries=3, sleep=_no_sleep))
    assert failed.value.context["cause"] == "TLSError"
    assert failed.value.code == "tls_error"
    assert failed.value.context["permanent"] is True
    assert "CERTIFICATE_VERIFY_FAILED" in str(failed.value)
    assert srv.requests == []


async def test_https_refuses_a_certificate_for_another_host(ca: trustme.CA) -> None:
    async with RawServer([ok()], ssl_context=_server_context(ca, [])) as srv:
        provider = local(f"https://127.0.0.1:{srv.port}/v1")  # the cert names localhost
        client = ssl.create_default_context()
        ca.configure_trust(client)
        provider._pool.transport.ssl_context = client
        with pytest.raises(ml.TransportError, match="CERTIFICATE_VERIFY_FAILED"):
            await run(provider)
    assert srv.requests == []


# -- against the emulator: many sessions, one pool ---------------------------------------


async def test_many_sessions_share_few_connections_when_run_in_waves() -> None:
    with ChatEmulator([say("hi")]) as emu:
        async with Local(model="m", base_url=emu.base_url, api_key=emu.api_key) as provider:
            for _ in range(3):
                await asyncio.gather(
                    *(ml.run(provider, agent=AGENT, prompt="q") for _ in range(20))
                )
            pool = provider._pool.transport._pool
            assert pool is not None
            assert len(pool._all) <= 20  # the second and third waves reused the first's


async def test_bytes_arriving_at_an_idle_connection_close_it() -> None:
    async with RawServer([ok()]) as srv:
        pool = _wire.Pool(read_timeout=30, connect_timeout=30)
        key = ("http", "127.0.0.1", srv.port)
        head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        resp = await pool.request(key, head)
        await resp.read()
        resp.release()
        (conn,) = pool._idle[key]
        conn.data_received(b"HTTP/1.1 200 OK\r\n")  # unasked for
        await asyncio.sleep(0)
        assert not pool._idle[key]
        assert not pool._all
        await pool.aclose()


async def test_connections_idle_too_long_are_swept_by_one_timer() -> None:
    async with RawServer([ok(), ok()]) as srv:
        pool = _wire.Pool(read_timeout=30, connect_timeout=30)
        key = ("http", "127.0.0.1", srv.port)
        head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        # two at once: two connections, both idle after
        first, second = await asyncio.gather(pool.request(key, head), pool.request(key, head))
        first.release()
        second.release()
        assert pool._sweeper is not None
        old, new = list(pool._idle[key])
        old.idle_since -= _wire._IDLE_FOR + 1  # idle for longer than trusted
        pool._sweeper.cancel()
        pool._sweep()  # the timer firing, called by hand
        await asyncio.sleep(0)
        assert list(pool._idle[key]) == [new]
        assert pool._sweeper is not None  # re-armed: one is still idle
        await pool.aclose()
        assert pool._sweeper is None


async def test_a_connect_finishing_after_the_pool_closed_leaves_no_socket() -> None:
    async with RawServer([]) as srv:
        pool = _wire.Pool(read_timeout=30, connect_timeout=30)
        head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        task = asyncio.ensure_future(pool.request(("http", "127.0.0.1", srv.port), head))
        await asyncio.sleep(0)  # the connect has started
        await pool.aclose()
        with pytest.raises(_wire.WireError, match="closed"):
            await task
        await asyncio.sleep(0)
        assert not pool._all


async def test_a_request_cancelled_while_connecting_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    started = asyncio.Event()

    async def never(*args: Any, **kwargs: Any) -> Any:
        started.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(loop, "create_connection", never)
    pool = _wire.Pool(read_timeout=30, connect_timeout=30)
    task = asyncio.ensure_future(pool.request(("http", "127.0.0.1", 9), b""))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool._count == 0
    assert not pool._all


async def test_a_request_queued_at_the_limit_can_be_cancelled_and_the_queue_moves_on() -> None:
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    async with RawServer([Hang(), ok()]) as srv:
        key = ("http", "127.0.0.1", srv.port)
        pool = _wire.Pool(read_timeout=30, connect_timeout=30, limit=1)
        busy = asyncio.ensure_future(pool.request(key, head))
        while not srv.requests:
            await asyncio.sleep(0)
        queued = asyncio.ensure_future(pool.request(key, head))
        third = asyncio.ensure_future(pool.request(key, head))
        while len(pool._waiters) < 2:
            await asyncio.sleep(0)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert len(pool._waiters) == 1
        busy.cancel()  # frees the one connection: the third gets its turn
        with pytest.raises(asyncio.CancelledError):
            await busy
        resp = await third
        assert resp.status == 200
        resp.release()
        await pool.aclose()
    assert srv.connections == 2


async def test_at_the_limit_an_idle_connection_to_another_origin_makes_room() -> None:
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    async with RawServer([ok()]) as one, RawServer([ok()]) as two:
        pool = _wire.Pool(read_timeout=30, connect_timeout=30, limit=1)
        for srv in (one, two):
            resp = await pool.request(("http", "127.0.0.1", srv.port), head)
            assert resp.status == 200
            resp.release()
        assert pool._count == 1
        assert not pool._idle[("http", "127.0.0.1", one.port)]
        await pool.aclose()


async def test_a_body_over_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_wire, "MAX_BODY", 64)
    async with RawServer([ok(completion("x" * 100))]) as srv:
        with pytest.raises(ml.TransportError, match="body is over 64 bytes"):
            await run(local(srv.base_url))


@pytest.mark.parametrize(
    ("url", "key", "head"),
    [
        ("http://[::1]:8080/v1", ("http", "::1", 8080), b"POST /v1 HTTP/1.1\r\nHost: [::1]:8080"),
        (
            "https://b\u00fccher.example/v1",
            ("https", "b\u00fccher.example", 443),
            b"POST /v1 HTTP/1.1\r\nHost: xn--bcher-kva.example",
        ),
        (
            "http://h:80/a b/\u00e9?x=1 2",
            ("http", "h", 80),
            b"POST /a%20b/%C3%A9?x=1%202 HTTP/1.1\r\nHost: h",
        ),
        ("http://h/p%2Fq", ("http", "h", 80), b"POST /p%2Fq HTTP/1.1\r\nHost: h"),
    ],
)
def test_the_request_target_and_host_are_ascii_and_escaped(
    url: str, key: tuple[str, str, int], head: bytes
) -> None:
    from managedloop.providers.local._proxy import ProxyRules
    from managedloop.providers.local._transports import _Route

    target = _Route("POST", url, ProxyRules(trust_env=False))
    assert target.key == key
    assert target.line + target.host == head + b"\r\n"


@pytest.mark.parametrize(
    ("content_type", "body", "text"),
    [
        ("text/plain; charset=latin-1", "caf\u00e9".encode("latin-1"), "caf\u00e9"),
        ('text/plain; charset="utf-8"', "caf\u00e9".encode(), "caf\u00e9"),
        ("text/plain; charset=no-such-codec", "caf\u00e9".encode(), "caf\u00e9"),
        ("text/plain", b"\xff ok", "\ufffd ok"),
    ],
)
async def test_an_error_body_is_read_in_its_charset(
    content_type: str, body: bytes, text: str
) -> None:
    answer = (
        f"HTTP/1.1 404 Not Found\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    async with RawServer([answer]) as srv:
        with pytest.raises(ml.APIStatusError) as failed:
            await run(local(srv.base_url))
    assert failed.value.context["body"] == text
