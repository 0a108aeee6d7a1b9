"""URLs made safe to show: one masking rule and one origin rule for every host.

A URL reaches reprs and error messages (a ``base_url``, an ``endpoint_url``, a redirect's
``Location``); these never show userinfo (a user name or password), and an unparseable URL
is not shown at all.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["origin", "redact_url"]


def redact_url(url: str) -> str:
    """The URL with any userinfo (user name and password) masked: safe for a repr or an
    error. An unparseable URL is not shown at all."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises on a bad port: the netloc is unreadable then
    except ValueError:
        return "<unparseable url>"
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def origin(url: str) -> str | None:
    """``scheme://host[:port]`` of a URL, without userinfo, path or query (safe to show);
    ``None`` when it has no scheme or host, or does not parse."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return f"{parts.scheme}://{host}" + (f":{port}" if port and port != default else "")
