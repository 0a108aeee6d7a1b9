"""TLS options with a private certificate authority (trustme), on both transports, and
the failures no retry can heal: each fails on its first attempt, with a named code, one
connection counted at the server and no backoff sleep.

The server counts TCP accepts *before* its TLS handshake, so a handshake the client gives
up on is counted too.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest
import trustme
from test_local_wire import AGENT, ok

import managedloop as ml
from managedloop import _retry
from managedloop.providers.local import AiohttpTransport, InsecureTLSWarning, Local

pytestmark = pytest.mark.anyio

TRANSPORTS = pytest.mark.parametrize("transport", ["default", "aiohttp"])


class CountingTLSServer:
    """Counts TCP accepts, then does TLS (``context``; OpenSSL through the blocking ``ssl``
    module, which sends its alerts as a real server does) and answers each request
    ``answer``. One thread; one connection at a time."""

    def __init__(self, context: ssl.SSLContext | None, answer: bytes | None = None) -> None:
        self.context = context
        self.answer = answer if answer is not None else ok()
        self.accepts = 0
        self.requests: list[bytes] = []
        self.peer_certs: list[Any] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    async def __aenter__(self) -> CountingTLSServer:
        self.thread.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        await asyncio.to_thread(self.thread.join, 10)
        self.listener.close()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.accepts += 1
            sock.settimeout(10)
            try:
                if self.context is not None:
                    sock = self.context.wrap_socket(
                        sock, server_side=True, do_handshake_on_connect=False
                    )
                    try:
                        sock.do_handshake()
                    except (OSError, ssl.SSLError):
                        self._linger(sock)  # as nginx does: the alert reaches the client
                        continue
                    self.peer_certs.append(sock.getpeercert())
                self._answer(sock)
            except (OSError, ssl.SSLError):
                pass
            finally:
                sock.close()

    @staticmethod
    def _linger(sock: socket.socket) -> None:
        """Close after the peer stops sending (so no reset destroys the alert we sent)."""
        try:
            sock.shutdown(socket.SHUT_WR)
            while socket.socket.recv(sock, 65536):
                pass
        except OSError:
            pass

    def _answer(self, sock: socket.socket) -> None:
        data = b""
        while not self.stop.is_set():
            while b"\r\n\r\n" not in data:
                piece = sock.recv(65536)
                if not piece:
                    return
                data += piece
            head, _, rest = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(rest) < length:
                piece = sock.recv(65536)
                if not piece:
                    return
                rest += piece
            self.requests.append(head + b"\r\n\r\n" + rest[:length])
            data = rest[length:]
            sock.sendall(self.answer)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def server_context(ca: trustme.CA, *names: str, client_ca: trustme.CA | None = None) -> Any:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*(names or ("127.0.0.1",))).configure_cert(context)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        client_ca.configure_trust(context)
    return context


async def never_sleep(seconds: float) -> None:
    raise AssertionError(f"a retry backoff of {seconds}s: this failure cannot heal")


def make(port: int, transport: str, scheme: str = "https", **options: Any) -> Local:
    base = f"{scheme}://127.0.0.1:{port}/v1"
    common: dict[str, Any] = {"model": "m", "base_url": base, "api_key": "k"}
    common |= {"max_retries": 3, "sleep": never_sleep, "trust_env": False}
    if transport == "aiohttp":
        del common["trust_env"]
        return Local(**common, transport=AiohttpTransport(trust_env=False, **options))
    return Local(**common, **options)


async def run(provider: Local) -> ml.SessionResult:
    async with provider:
        return await ml.run(provider, agent=AGENT, prompt="q")


# -- trusted --------------------------------------------------------------------------------


@TRANSPORTS
async def test_a_private_ca_is_trusted_by_a_bundle_path(
    ca: trustme.CA, ca_file: str, transport: str
) -> None:
    async with CountingTLSServer(server_context(ca)) as srv:
        assert (await run(make(srv.port, transport, verify=ca_file))).text == "hi"
    assert len(srv.requests) == 1


@TRANSPORTS
async def test_a_private_ca_is_trusted_by_an_ssl_context(ca: trustme.CA, transport: str) -> None:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    async with CountingTLSServer(server_context(ca)) as srv:
        assert (await run(make(srv.port, transport, verify=context))).text == "hi"


@TRANSPORTS
async def test_a_private_ca_is_trusted_by_ssl_cert_file(
    ca: trustme.CA, ca_file: str, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)
    async with CountingTLSServer(server_context(ca)) as srv:
        assert (await run(make(srv.port, transport))).text == "hi"


@TRANSPORTS
async def test_verify_false_warns_loudly_and_checks_nothing(ca: trustme.CA, transport: str) -> None:
    async with CountingTLSServer(server_context(ca, "elsewhere.test")) as srv:
        with pytest.warns(InsecureTLSWarning, match="NOT checked"):
            provider = make(srv.port, transport, verify=False)
        assert (await run(provider)).text == "hi"


@TRANSPORTS
async def test_a_client_certificate_the_server_requires_is_supplied(
    ca: trustme.CA, ca_file: str, transport: str, tmp_path: Path
) -> None:
    client_ca = trustme.CA()
    issued = client_ca.issue_cert("client@example.test")
    cert, key, both = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "both.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    issued.private_key_and_cert_chain_pem.write_to_path(str(both))
    for client_cert in ((str(cert), str(key)), str(both)):
        async with CountingTLSServer(server_context(ca, client_ca=client_ca)) as srv:
            provider = make(srv.port, transport, verify=ca_file, client_cert=client_cert)
            assert (await run(provider)).text == "hi"
        assert srv.peer_certs
        assert srv.peer_certs[0]["subject"]  # the server saw ours


# -- refused, once ----------------------------------------------------------------------------


def assert_tls_failure(exc: BaseException) -> None:
    assert isinstance(exc, ml.TransportError)
    assert exc.code == "tls_error"
    assert exc.context["permanent"] is True
    assert _retry.classify(exc) is _retry.Situation.UNHEALABLE


@TRANSPORTS
async def test_a_private_ca_is_rejected_by_default_on_the_first_attempt(
    ca: trustme.CA, transport: str
) -> None:
    async with CountingTLSServer(server_context(ca)) as srv:
        with pytest.raises(ml.TransportError) as failed:
            await run(make(srv.port, transport))
    assert_tls_failure(failed.value)
    assert "CERTIFICATE_VERIFY_FAILED" in str(failed.value)
    assert srv.accepts == 1
    assert srv.requests == []


@TRANSPORTS
async def test_a_certificate_for_another_host_fails_on_the_first_attempt(
    ca: trustme.CA, ca_file: str, transport: str
) -> None:
    async with CountingTLSServer(server_context(ca, "localhost")) as srv:
        with pytest.raises(ml.TransportError) as failed:
            await run(make(srv.port, transport, verify=ca_file))  # 127.0.0.1: not its name
    assert_tls_failure(failed.value)
    assert srv.accepts == 1


@TRANSPORTS
async def test_a_missing_client_certificate_fails_on_the_first_attempt(
    ca: trustme.CA, ca_file: str, transport: str
) -> None:
    async with CountingTLSServer(server_context(ca, client_ca=trustme.CA())) as srv:
        with pytest.raises(ml.TransportError) as failed:
            await run(make(srv.port, transport, verify=ca_file))
    assert_tls_failure(failed.value)
    assert srv.accepts == 1


@TRANSPORTS
async def test_an_over_size_head_fails_on_the_first_attempt(transport: str) -> None:
    head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 60) for i in range(2000))
    async with CountingTLSServer(None, answer=head + b"Content-Length: 0\r\n\r\n") as srv:
        with pytest.raises(ml.MalformedResponseError) as failed:
            await run(make(srv.port, transport, scheme="http"))
    assert failed.value.code == "response_head_too_large"
    assert srv.accepts == 1
    assert len(srv.requests) == 1


@pytest.mark.parametrize(
    "url",
    [
        "http//127.0.0.1/v1",
        "ftp://127.0.0.1/v1",
        "http://127.0.0.1:99999/v1",
        "http://[::1/v1",
        "http://exa mple.com/v1",
        "http:///v1",
    ],
)
def test_a_malformed_url_fails_before_any_request(url: str) -> None:
    with pytest.raises(ml.InvalidOptionsError) as failed:
        Local(model="m", base_url=url)
    assert failed.value.code == "invalid_opts"


def test_bad_tls_options_fail_at_construction(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    for options in (
        {"verify": missing},
        {"verify": 3},
        {"client_cert": missing},
        {"client_cert": (missing,)},
        {"verify": ssl.create_default_context(), "client_cert": missing},
    ):
        with pytest.raises(ml.InvalidOptionsError):
            Local(model="m", base_url="https://h/v1", **options)  # type: ignore[arg-type]


def test_a_transport_error_marked_permanent_is_never_retried() -> None:
    assert not _retry.retryable(ml.TransportError("x", permanent=True))
    assert _retry.retryable(ml.TransportError("x"))
