"""Which proxy, if any, a Local request goes through: ``proxy=`` or the environment.

The rules are the ones httpx, requests and aiohttp users expect (and the standard
library's :func:`urllib.request.getproxies` / :func:`urllib.request.proxy_bypass`):

* ``Local(proxy="http://user:pass@host:port")`` sends every request through that proxy
  (``NO_PROXY`` still applies unless ``trust_env=False``); ``proxy=None`` (the default)
  reads the environment unless ``trust_env=False``.
* The environment: ``HTTPS_PROXY`` for ``https://`` targets, ``HTTP_PROXY`` for
  ``http://`` ones, ``ALL_PROXY`` for either when the scheme's own is unset; lower-case
  names win over upper-case ones (curl's and urllib's order). ``REQUEST_METHOD`` set (a CGI
  script) makes ``HTTP_PROXY`` unread, as urllib does (httpoxy).
* ``NO_PROXY`` (either case): comma- or space-separated entries; ``*`` bypasses every
  host; ``host`` matches it and its subdomains, ``.domain`` its subdomains and itself;
  ``host:port`` only that port; an IP address itself only (no suffix match); a CIDR
  block (``10.0.0.0/8``,
  ``fd00::/8``) any address in it (urllib does not read CIDR; httpx, requests and curl
  do).
* A proxy URL is ``http://`` (a forwarding proxy for ``http://`` targets, a ``CONNECT``
  tunnel for ``https://`` ones); ``https://`` and ``socks`` proxies are refused by name
  (:class:`~managedloop.InvalidOptionsError`) rather than ignored: ``proxy=`` at once, one
  from the environment when a request would use it (``Local`` checks its ``base_url`` at
  construction), so an ``ALL_PROXY=socks5://...`` meant for other programs stops only
  the targets it covers, and ``trust_env=False`` (or ``NO_PROXY``) lifts it. A proxy URL without a
  scheme is read as ``http://`` (as curl and requests do).
* Its ``user:password@`` are proxy credentials: kept as a
  :class:`~managedloop.config.Secret` (the ``Proxy-Authorization`` header value), shown
  nowhere (:attr:`Proxy.shown` masks them) and sent only to the proxy, never to the target.
"""

from __future__ import annotations

import base64
import ipaddress
import os
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from managedloop._urls import redact_url
from managedloop.config import Secret
from managedloop.errors import InvalidOptionsError

__all__ = ["Proxy", "ProxyRules", "bypassed"]


class Proxy:
    """One proxy: where to connect, and the ``Proxy-Authorization`` to send it (if any)."""

    __slots__ = ("authorization", "host", "port", "shown")

    def __init__(self, url: str, option: str) -> None:
        text = url.strip()
        if "://" not in text:
            text = "http://" + text
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError:
            raise InvalidOptionsError(
                f"{option} is not a proxy URL: {redact_url(text)!r}", option=option
            ) from None
        self.shown = redact_url(text)
        scheme = parts.scheme.lower()
        if scheme != "http":
            raise InvalidOptionsError(
                f"{option}: {scheme}:// proxies are not supported by the Local host's "
                f"transports (an http:// proxy is: it tunnels https:// with CONNECT); got "
                f"{self.shown!r}",
                option=option,
            )
        if not parts.hostname or any(c.isspace() or ord(c) < 32 for c in text):
            raise InvalidOptionsError(
                f"{option} is not a proxy URL with a host: {self.shown!r}", option=option
            )
        self.host = parts.hostname
        self.port = port or 80
        self.authorization: Secret | None = None
        if parts.username is not None or parts.password is not None:
            pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
            token = base64.b64encode(pair.encode("utf-8")).decode("ascii")
            self.authorization = Secret("Basic " + token)

    def __repr__(self) -> str:
        return f"Proxy({self.shown!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Proxy)
            and (self.host, self.port) == (other.host, other.port)
            and _revealed(self.authorization) == _revealed(other.authorization)
        )

    def __hash__(self) -> int:
        return hash((self.host, self.port))


def _revealed(secret: Secret | None) -> str | None:
    return secret.reveal() if secret is not None else None


def _env(environ: Mapping[str, str], name: str) -> str | None:
    for key in (name.lower(), name.upper()):
        value = environ.get(key)
        if value is not None and value.strip():
            return value
    return None


class ProxyRules:
    """The proxy settings of one transport, read once (at construction: an error in them
    is an :class:`~managedloop.InvalidOptionsError` before any request)."""

    __slots__ = ("_by_scheme", "_no_proxy", "explicit")

    def __init__(
        self,
        proxy: str | None = None,
        *,
        trust_env: bool = True,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.explicit = proxy is not None
        self._by_scheme: dict[str, Proxy | InvalidOptionsError | None] = {}
        if proxy is not None:
            if not isinstance(proxy, str):
                raise InvalidOptionsError("proxy must be a URL string or None", option="proxy")
            one = Proxy(proxy, "proxy")
            self._by_scheme = {"http": one, "https": one}
        elif trust_env:
            fallback = _env(env, "all_proxy")
            http = None if env.get("REQUEST_METHOD") else _env(env, "http_proxy")
            for scheme, value, name in (
                ("http", http, "HTTP_PROXY"),
                ("https", _env(env, "https_proxy"), "HTTPS_PROXY"),
            ):
                chosen, option = (value, name) if value is not None else (fallback, "ALL_PROXY")
                try:
                    self._by_scheme[scheme] = Proxy(chosen, option) if chosen is not None else None
                except InvalidOptionsError as exc:  # raised when a request would use it
                    self._by_scheme[scheme] = exc
        no_proxy = _env(env, "no_proxy") if trust_env else None
        self._no_proxy = _entries(no_proxy or "")

    def __repr__(self) -> str:
        shown = {k: v.shown for k, v in self._by_scheme.items() if isinstance(v, Proxy)}
        return f"ProxyRules({shown!r})"

    def __bool__(self) -> bool:
        return any(v is not None for v in self._by_scheme.values())

    def for_url(self, scheme: str, host: str, port: int) -> Proxy | None:
        """The proxy for a request to ``scheme://host:port``, or ``None`` (go direct).

        Raises :class:`~managedloop.InvalidOptionsError` when that is an environment
        proxy the transports cannot use."""
        proxy = self._by_scheme.get(scheme)
        if proxy is None or bypassed(host, port, self._no_proxy):
            return None
        if isinstance(proxy, InvalidOptionsError):
            raise InvalidOptionsError(
                f"{proxy.message}; unset it, list the host in NO_PROXY or pass trust_env=False",
                option=proxy.context.get("option"),
            )
        return proxy


_Entry = tuple[str, int | None] | ipaddress.IPv4Network | ipaddress.IPv6Network | None


def _entries(value: str) -> list[_Entry]:
    """``NO_PROXY``'s entries: ``None`` for ``*``, a network, or (host suffix, port)."""
    entries: list[_Entry] = []
    for raw in value.replace(",", " ").split():
        item = raw.strip().lower()
        if item == "*":
            entries.append(None)
            continue
        try:
            entries.append(ipaddress.ip_network(item.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        host, port = item, None
        if item.startswith("["):  # [v6]:port
            inner, _, tail = item[1:].partition("]")
            host = inner
            port = int(tail[1:]) if tail.startswith(":") and tail[1:].isdigit() else None
        elif item.count(":") == 1:
            name, _, digits = item.partition(":")
            if digits.isdigit():
                host, port = name, int(digits)
        host = host.lstrip("*").lstrip(".").rstrip(".")  # "*.example.com", ".example.com"
        if host:
            entries.append((host, port))
    return entries


def bypassed(host: str, port: int, entries: list[_Entry]) -> bool:
    """Whether ``NO_PROXY``'s ``entries`` send ``host:port`` direct."""
    if not entries:
        return False
    name = host.lower().strip("[]").rstrip(".")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(name)
    except ValueError:
        address = None
    for entry in entries:
        if entry is None:
            return True
        if isinstance(entry, tuple):
            suffix, only_port = entry
            if only_port is not None and only_port != port:
                continue
            # an IP address matches itself only (requests' and curl's rule), a name its
            # subdomains too
            if name == suffix or (address is None and name.endswith("." + suffix)):
                return True
        elif address is not None and address.version == entry.version and address in entry:
            return True
    return False
