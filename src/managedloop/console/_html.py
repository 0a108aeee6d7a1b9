"""The console's HTML: server-rendered, every value escaped here, no inline script.

Nothing the console shows is trusted: tool inputs and results, model text, raw host
events, agent names and session ids all come from models, hosts or stores. Every value
reaches the page through :func:`e` (``html.escape``, quotes included), or :func:`pre`
(pretty JSON, then escaped); markup is only ever built from literals in this module. The
pages link one script and one stylesheet from ``/static/`` (the content security policy
forbids inline script and inline style).
"""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from managedloop.session.record import clip

__all__ = ["e", "entry", "layout", "pre", "when"]

MAX_SHOWN = 20_000  # characters of one value on a page: a huge tool result stays readable


def e(value: Any) -> str:
    """``value`` as escaped text."""
    return html.escape("" if value is None else str(value), quote=True)


def pre(value: Any) -> str:
    """``value`` as escaped, pretty JSON in a ``<pre>`` (secret-looking keys redacted)."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(clip(value, MAX_SHOWN), indent=2, ensure_ascii=False, default=str)
    if len(text) > MAX_SHOWN:
        text = text[:MAX_SHOWN] + f"… [{len(text) - MAX_SHOWN} more characters]"
    return f'<pre class="json">{e(text)}</pre>'


def when(ts: Any) -> str:
    if not isinstance(ts, int | float):
        return ""
    moment = dt.datetime.fromtimestamp(float(ts), tz=dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def url(root: str, path: str, **query: Any) -> str:
    q = {k: v for k, v in query.items() if v not in (None, "")}
    return root + path + ("?" + urlencode(q) if q else "")


def layout(root: str, title: str, body: str, *, nav: str = "", read_only: bool = False) -> str:
    links = [("sessions", "/", "Sessions"), ("approvals", "/approvals", "Approvals")]
    links += [
        ("provisioning", "/provisioning", "Provisioning"),
        ("webhooks", "/webhooks", "Webhooks"),
    ]
    items = "".join(
        f'<a href="{e(root + href)}"{" class=current" if key == nav else ""}>{e(label)}</a>'
        for key, href, label in links
    )
    mode = '<span class="badge ro">read-only</span>' if read_only else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · managedloop console</title>"
        f'<link rel="stylesheet" href="{e(root)}/static/console.css">'
        f'<script src="{e(root)}/static/console.js" defer></script>'
        "</head><body>"
        f"<header><strong>managedloop console</strong><nav>{items}</nav>{mode}</header>"
        f"<main><h1>{e(title)}</h1>{body}</main></body></html>"
    )


def status_badge(status: Any) -> str:
    s = str(status or "unknown")
    return f'<span class="badge st-{e(s)}" data-status>{e(s)}</span>'


def select(name: str, values: Sequence[str], chosen: str, blank: str) -> str:
    """A ``<select>`` of ``values`` (and a first, empty choice labelled ``blank``)."""
    options = "".join(
        f'<option value="{e(v)}"{" selected" if v == chosen else ""}>{e(v or blank)}</option>'
        for v in ["", *values]
    )
    return f'<select name="{e(name)}">{options}</select>'


def table(head: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "") -> str:
    """``rows`` are already-rendered cells (built with :func:`e`)."""
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{e(cls)}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def tokens(usage: Any) -> str:
    if not isinstance(usage, Mapping):
        return ""
    return f"{e(usage.get('input_tokens', 0))} in / {e(usage.get('output_tokens', 0))} out"


def cost(usage: Any) -> str:
    value = usage.get("cost_usd") if isinstance(usage, Mapping) else None
    return f"${value:.4f}" if isinstance(value, int | float) else ""


def entry(item: Mapping[str, Any]) -> str:
    """One timeline entry as an ``<li>``."""
    kind = str(item.get("kind", "event"))
    head = f'<span class="seq">#{e(item.get("seq"))}</span> <time>{e(when(item.get("at")))}</time>'
    if kind == "prompt":
        body = f"<b>User</b><div class=text>{e(item.get('text'))}</div>"
    elif kind == "turn":
        parts = ["<b>Model turn</b>"]
        if item.get("text"):
            parts.append(f"<div class=text>{e(item.get('text'))}</div>")
        for use in item.get("tool_uses") or []:
            parts.append(
                f'<div class="tool-call">calls <code>{e(use.get("name"))}</code> '
                f'<span class="muted">{e(use.get("id"))}</span>{pre(use.get("input"))}</div>'
            )
        usage = item.get("usage")
        parts.append(
            f'<div class="muted">{e(item.get("terminal"))} · stop_reason '
            f"{e(item.get('stop_reason'))} · {tokens(usage)}</div>"
        )
        body = "".join(parts)
    elif kind == "tool_results":
        rows = [
            f'<div class="tool-result{" error" if r.get("is_error") else ""}">result for '
            f'<span class="muted">{e(r.get("tool_use_id"))}</span>'
            f"{' (error)' if r.get('is_error') else ''}"
            f'<pre class="out">{e(r.get("text"))}</pre></div>'
            for r in item.get("results") or []
        ]
        body = "<b>Tool results</b>" + "".join(rows)
    elif kind == "pending":
        names = ", ".join(f"{a.get('name')} ({a.get('id')})" for a in item.get("approvals") or [])
        body = f"<b>Waiting for a decision</b> on {e(names)}"
    elif kind == "decision":
        verdict = "Approved" if item.get("decision") == "approve" else "Denied"
        why = f": {item.get('message')}" if item.get("message") else ""
        body = f"<b>{verdict}</b> {e(item.get('tool_use_id'))} by {e(item.get('by'))}{e(why)}"
    elif kind == "terminal":
        body = (
            f"<b>Ended</b> {e(item.get('terminal'))}"
            f"{e(' · ' + str(item.get('reason'))) if item.get('reason') else ''}"
            f" · stop_reason {e(item.get('stop_reason'))}"
        )
    elif kind == "error":
        body = f"<b>Error</b> <code>{e(item.get('code'))}</code> {e(item.get('message'))}"
    else:
        body = (
            f"<details><summary>host event <code>{e(item.get('type'))}</code></summary>"
            f"{pre(item.get('data'))}</details>"
        )
    return f'<li class="entry k-{e(kind)}" data-seq="{e(item.get("seq"))}">{head} {body}</li>'
