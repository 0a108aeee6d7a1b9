"""Proxies, against a real forwarding proxy (proxy.py from PyPI, ``tests/realproxy.py``).

``http://`` targets are forwarded, ``https://`` targets tunnelled with ``CONNECT``; the
proxy comes from ``proxy=`` or the environment (``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY``,
either case) unless ``NO_PROXY`` matches (host, domain, host:port, CIDR) or
``trust_env=False``. The proxy's own access log shows each request that went through it;
the target's recorded bytes show what reached it. Both transports, the same behaviour.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from test_local_wire import AGENT, RawServer, ok

import managedloop as ml
from managedloop.providers.local import AiohttpTransport, Local
from managedloop.providers.local._proxy import ProxyRules, bypassed
from realproxy import RealProxy

pytestmark = pytest.mark.anyio

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD")
USER, PASSWORD = "proxyuser", "pxLEAKpass4321"
TOKEN = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealProxy]:
    with RealProxy(tmp_path_factory.mktemp("proxy")) as running:
        yield running


@pytest.fixture(scope="module")
def auth_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealProxy]:
    with RealProxy(tmp_path_factory.mktemp("authproxy"), auth=f"{USER}:{PASSWORD}") as running:
        yield running


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


def server_tls(ca: trustme.CA) -> Any:
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    return context


def make(base_url: str, transport: str, **options: Any) -> Local:
    """A Local on the named transport with these network options."""
    if transport == "aiohttp":
        return Local(
            model="m",
            base_url=base_url,
            api_key="sk-target-key",
            max_retries=0,
            transport=AiohttpTransport(**options),
        )
    return Local(model="m", base_url=base_url, api_key="sk-target-key", max_retries=0, **options)


async def run(provider: Local) -> ml.SessionResult:
    async with provider:
        return await ml.run(provider, agent=AGENT, prompt="q")


TRANSPORTS = pytest.mark.parametrize("transport", ["default", "aiohttp"])


def no_proxy_credentials(request: bytes) -> None:
    assert b"proxy-authorization" not in request.lower()
    assert PASSWORD.encode() not in request
    assert TOKEN.encode() not in request


@TRANSPORTS
@pytest.mark.parametrize("how", ["option", "HTTP_PROXY", "http_proxy", "ALL_PROXY"])
async def test_an_http_target_is_forwarded(
    proxy: RealProxy, transport: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with RawServer([ok()]) as srv:
        options: dict[str, Any] = {}
        if how == "option":
            options["proxy"] = proxy.url
        else:
            monkeypatch.setenv(how, proxy.url)
        assert (await run(make(srv.base_url, transport, **options))).text == "hi"
        assert proxy.wait_for(f"POST 127.0.0.1:{srv.port}/v1/chat/completions")
    assert len(srv.requests) == 1
    assert srv.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")


@TRANSPORTS
@pytest.mark.parametrize("how", ["option", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"])
async def test_an_https_target_goes_through_a_connect_tunnel(
    proxy: RealProxy,
    ca: trustme.CA,
    ca_file: str,
    transport: str,
    how: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with RawServer([ok()], ssl_context=server_tls(ca)) as srv:
        options: dict[str, Any] = {"verify": ca_file}
        if how == "option":
            options["proxy"] = proxy.url
        else:
            monkeypatch.setenv(how, proxy.url)
        url = f"https://127.0.0.1:{srv.port}/v1"
        assert (await run(make(url, transport, **options))).text == "hi"
        assert proxy.wait_for(f"CONNECT 127.0.0.1:{srv.port}")
    assert len(srv.requests) == 1  # TLS end to end: the proxy saw only the tunnel
    assert b"Authorization: Bearer sk-target-key" in srv.requests[0]


@TRANSPORTS
@pytest.mark.parametrize(
    "no_proxy",
    [
        "127.0.0.1",
        "localhost,127.0.0.1",
        "127.0.0.0/8",
        "{port_entry}",
        "*",
        " other.test , 127.0.0.1 ",
    ],
)
async def test_no_proxy_sends_matching_targets_direct(
    proxy: RealProxy, transport: str, no_proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with RawServer([ok()]) as srv:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("no_proxy", no_proxy.replace("{port_entry}", f"127.0.0.1:{srv.port}"))
        assert (await run(make(srv.base_url, transport))).text == "hi"
    assert len(srv.requests) == 1
    # a request that went through the proxy would be in its log by now: the target answered
    assert not proxy.wait_for(f"127.0.0.1:{srv.port}", budget=0)


@TRANSPORTS
@pytest.mark.parametrize("no_proxy", ["example.test", "127.0.0.1:1", "10.0.0.0/8", ".0.0.1"])
async def test_no_proxy_that_does_not_match_still_proxies(
    proxy: RealProxy, transport: str, no_proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with RawServer([ok()]) as srv:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", no_proxy)
        assert (await run(make(srv.base_url, transport))).text == "hi"
        assert proxy.wait_for(f"POST 127.0.0.1:{srv.port}/")


@TRANSPORTS
async def test_trust_env_false_ignores_the_environment(
    proxy: RealProxy, transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with RawServer([ok()]) as srv:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
        monkeypatch.setenv("ALL_PROXY", "socks5://127.0.0.1:9")  # would be refused if read
        assert (await run(make(srv.base_url, transport, trust_env=False))).text == "hi"
    assert len(srv.requests) == 1


@TRANSPORTS
@pytest.mark.parametrize("target", ["http", "https"])
@pytest.mark.parametrize("how", ["option", "env"])
async def test_proxy_credentials_reach_the_proxy_and_never_the_target(
    auth_proxy: RealProxy,
    ca: trustme.CA,
    ca_file: str,
    transport: str,
    target: str,
    how: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url_with_credentials = f"http://{USER}:{PASSWORD}@127.0.0.1:{auth_proxy.port}"
    tls = server_tls(ca) if target == "https" else None
    async with RawServer([ok()], ssl_context=tls) as srv:
        options: dict[str, Any] = {"verify": ca_file} if target == "https" else {}
        if how == "option":
            options["proxy"] = url_with_credentials
        else:
            monkeypatch.setenv(f"{target.upper()}_PROXY", url_with_credentials)
        provider = make(f"{target}://127.0.0.1:{srv.port}/v1", transport, **options)
        assert PASSWORD not in repr(provider)
        assert (await run(provider)).text == "hi"
        verb = "CONNECT" if target == "https" else "POST"
        assert auth_proxy.wait_for(f"{verb} 127.0.0.1:{srv.port}")
    (request,) = srv.requests
    no_proxy_credentials(request)


async def _never_sleep(seconds: float) -> None:
    raise AssertionError(f"a backoff of {seconds}s: a 407 must not be retried")


@TRANSPORTS
@pytest.mark.parametrize("target", ["http", "https"])
@pytest.mark.parametrize("credentials", ["", f"{USER}:wrong@"])
async def test_a_proxy_407_is_a_named_error_on_the_first_attempt(
    auth_proxy: RealProxy, ca_file: str, transport: str, target: str, credentials: str
) -> None:
    proxy_url = f"http://{credentials}127.0.0.1:{auth_proxy.port}"
    async with RawServer([ok()]) as srv:
        options: dict[str, Any] = {"proxy": proxy_url}
        if target == "https":
            options["verify"] = ca_file
        base = f"{target}://127.0.0.1:{srv.port}/v1"
        if transport == "aiohttp":
            provider = Local(
                model="m",
                base_url=base,
                api_key="k",
                max_retries=3,
                sleep=_never_sleep,
                transport=AiohttpTransport(**options),
            )
        else:
            provider = Local(
                model="m",
                base_url=base,
                api_key="k",
                max_retries=3,
                sleep=_never_sleep,
                **options,
            )
        with pytest.raises(ml.APIStatusError) as failed:
            await run(provider)
    assert failed.value.code == "proxy_auth_required"
    assert failed.value.status == 407
    assert "wrong" not in str(failed.value)
    assert "wrong" not in repr(failed.value.context)
    assert srv.requests == []  # the target never saw it
    # one request at the proxy: proxy.py logs an unauthenticated one as "None:None"
    assert len(auth_proxy.wait_for("None:None", count=1)) >= 1


# -- NO_PROXY and the environment, as rules ------------------------------------------------


@pytest.mark.parametrize(
    ("host", "port", "entries", "direct"),
    [
        ("api.example.com", 443, "example.com", True),
        ("example.com", 443, ".example.com", True),
        ("notexample.com", 443, "example.com", False),
        ("api.example.com", 443, "*.example.com", True),
        ("api.example.com", 8443, "api.example.com:443", False),
        ("api.example.com", 443, "API.EXAMPLE.COM:443", True),
        ("10.1.2.3", 80, "10.0.0.0/8", True),
        ("11.1.2.3", 80, "10.0.0.0/8", False),
        ("::1", 80, "::1", True),
        ("::1", 80, "[::1]:80", True),
        ("fd00::5", 80, "fd00::/8", True),
        ("10.1.2.3", 80, "fd00::/8", False),
        ("anything", 1, "*", True),
        ("host", 1, "", False),
        ("host.", 1, "host", True),
    ],
)
def test_no_proxy_forms(host: str, port: int, entries: str, direct: bool) -> None:
    rules = ProxyRules(environ={"HTTP_PROXY": "http://p:1", "NO_PROXY": entries})
    assert (rules.for_url("http", host, port) is None) is direct
    assert bypassed(host, port, rules._no_proxy) is direct


def test_the_scheme_picks_the_variable_and_lower_case_wins() -> None:
    env = {
        "http_proxy": "http://lower:1",
        "HTTP_PROXY": "http://upper:1",
        "HTTPS_PROXY": "upper-no-scheme:2",
        "ALL_PROXY": "http://all:3",
    }
    rules = ProxyRules(environ=env)
    assert rules.for_url("http", "h", 80).host == "lower"  # type: ignore[union-attr]
    https = rules.for_url("https", "h", 443)
    assert https is not None
    assert (https.host, https.port) == ("upper-no-scheme", 2)
    assert ProxyRules(environ={"ALL_PROXY": "http://all:3"}).for_url("https", "h", 1) is not None
    cgi = ProxyRules(environ={"HTTP_PROXY": "http://x:1", "REQUEST_METHOD": "GET"})
    assert cgi.for_url("http", "h", 80) is None  # httpoxy: a CGI request's Proxy header


@pytest.mark.parametrize(
    ("value", "option"),
    [
        ("socks5://127.0.0.1:1080", "ALL_PROXY"),
        ("https://p:1", "HTTPS_PROXY"),
        ("http://", "HTTPS_PROXY"),
    ],
)
def test_a_proxy_the_transports_cannot_use_is_refused_by_name(value: str, option: str) -> None:
    rules = ProxyRules(environ={option: value, "NO_PROXY": "direct.test"})
    assert rules.for_url("https", "direct.test", 443) is None  # a bypassed target goes direct
    with pytest.raises(ml.InvalidOptionsError) as failed:
        rules.for_url("https", "api.test", 443)
    assert failed.value.context["option"] == option
    assert "trust_env=False" in str(failed.value)


def test_local_refuses_an_unusable_environment_proxy_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ALL_PROXY", "socks5://127.0.0.1:1080")
    with pytest.raises(ml.InvalidOptionsError) as failed:
        Local(model="m", base_url="http://api.test/v1")
    assert failed.value.context["option"] == "ALL_PROXY"
    Local(model="m", base_url="http://api.test/v1", trust_env=False)
    monkeypatch.setenv("NO_PROXY", "api.test")
    Local(model="m", base_url="http://api.test/v1")


def test_proxy_credentials_never_show() -> None:
    rules = ProxyRules(f"http://{USER}:{PASSWORD}@proxy.test:3128")
    shown = repr(rules) + repr(rules.for_url("http", "h", 80))
    assert PASSWORD not in shown
    assert TOKEN not in shown
    assert "***@proxy.test:3128" in shown
    provider = Local(model="m", base_url="http://h/v1", proxy=f"http://{USER}:{PASSWORD}@p:1")
    assert PASSWORD not in repr(provider) + repr(provider._pool.transport)  # type: ignore[union-attr]
    with pytest.raises(ml.InvalidOptionsError) as failed:
        Local(model="m", base_url="http://h/v1", proxy=f"socks5://{USER}:{PASSWORD}@p:1")
    assert PASSWORD not in str(failed.value)


def test_network_options_are_refused_where_nothing_uses_them() -> None:
    transport = AiohttpTransport()
    with pytest.raises(ml.InvalidOptionsError) as failed:
        Local(model="m", base_url="http://h/v1", transport=transport, proxy="http://p:1")
    assert failed.value.context["option"] == "proxy"
    with pytest.raises(ml.InvalidOptionsError):
        Local(model="m", chat=lambda request: None, verify=False)  # type: ignore[arg-type,return-value]
    with pytest.raises(ml.InvalidOptionsError):
        Local(model="m", transport="aiohttp")  # type: ignore[arg-type]


def test_a_bad_proxy_option_fails_before_any_request(tmp_path: Path) -> None:
    with pytest.raises(ml.InvalidOptionsError):
        Local(model="m", base_url="http://h/v1", proxy="http://[::1")
    with pytest.raises(ml.InvalidOptionsError):
        Local(model="m", base_url="http://h/v1", proxy=123)  # type: ignore[arg-type]
