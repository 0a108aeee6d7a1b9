"""How bytes reach the data plane: one aiohttp session per event loop, and the TLS, proxy
and connect-timeout settings read from a botocore client (:class:`Wire`)."""

from __future__ import annotations

import asyncio
import os
import ssl
from typing import Any

import aiohttp
import anyio

from managedloop.providers.agentcore._botocore import client_internals

__all__ = ["HttpSessions", "Wire"]


class Wire:
    """How to reach the data plane from a botocore client: its endpoint's TLS and proxy
    settings and its connect timeout, read once (botocore resolves them per client)."""

    __slots__ = ("_ops", "client", "connect_timeout", "credentials", "proxy", "ssl")

    def __init__(self, client: Any) -> None:
        from botocore.utils import get_environ_proxies

        self.client = client
        self.credentials, verify = client_internals(client)
        config = client.meta.config
        url = client.meta.endpoint_url
        scheme = url.split(":", 1)[0]
        proxies = config.proxies or get_environ_proxies(url)
        self.proxy: str | None = proxies.get(scheme)
        self.connect_timeout: float | None = config.connect_timeout
        self.ssl: ssl.SSLContext | bool | None = None
        if scheme == "https":
            self.ssl = _ssl_context(verify, config.client_cert)
        self._ops: dict[str, Any] = {}

    def operation_model(self, operation: str) -> Any:
        model = self._ops.get(operation)
        if model is None:
            meta = self.client.meta
            model = meta.service_model.operation_model(meta.method_to_api_mapping[operation])
            self._ops[operation] = model
        return model


def _ssl_context(verify: Any, client_cert: Any) -> ssl.SSLContext | bool:
    if verify is False:
        return False
    from botocore.httpsession import get_cert_path

    path: Any = get_cert_path(verify)
    if not isinstance(path, str):
        context = ssl.create_default_context()
    elif os.path.isdir(path):
        context = ssl.create_default_context(capath=path)
    else:
        context = ssl.create_default_context(cafile=path)
    if isinstance(client_cert, str):
        context.load_cert_chain(client_cert)
    elif isinstance(client_cert, tuple):
        context.load_cert_chain(*client_cert)
    return context


class HttpSessions:
    """One aiohttp ``ClientSession`` per running event loop, open while something uses it.

    A connection (or a command, or ``async with provider``) acquires it on its loop and
    releases it when done; the last release closes it. Per loop, so ``run_sync`` (a fresh
    loop per call) and ``run_sync`` from several threads at once never share sockets
    across loops or leave a session behind on a dead loop.
    """

    __slots__ = ("_by_loop",)

    def __init__(self) -> None:
        self._by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}  # loop: [session, users]

    def __repr__(self) -> str:
        return f"HttpSessions(loops={len(self._by_loop)})"

    def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        entry = self._by_loop.get(loop)
        if entry is None or entry[0].closed:
            connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=False)
            session = aiohttp.ClientSession(
                connector=connector,
                # botocore's request carries its own User-Agent; it sends no Accept headers
                # and reads the event stream as is.
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
                auto_decompress=False,
            )
            entry = self._by_loop[loop] = [session, 0]
        entry[1] += 1

    def session(self) -> aiohttp.ClientSession:
        session: aiohttp.ClientSession = self._by_loop[asyncio.get_running_loop()][0]
        return session

    async def release(self) -> None:
        loop = asyncio.get_running_loop()
        entry = self._by_loop.get(loop)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del self._by_loop[loop]
            with anyio.CancelScope(shield=True):  # a cancelled caller still closes it
                await entry[0].close()
