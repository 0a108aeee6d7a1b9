"""The managedloop console: a web page over the session record (extra ``console``).

``managedloop console`` serves it (see :mod:`managedloop.cli.console`); :func:`app` is the
same application to mount in your own ASGI server::

    from managedloop import console
    from managedloop.stores import SQLiteStore

    web = console.app(SQLiteStore("ml.sqlite3"), resume_with=lambda parked: (provider, agent))
    print(web.state.token)          # the access token (random unless given)

Pages: the sessions of the record (filter, search, paged), a session's timeline (live
over server-sent events while it runs), the approvals waiting on a person (Approve, Deny
with a reason: through ``ml.run(resume=..., approvals=...)``, exactly once), the
provisioning index and the webhook deliveries of the same store, and, with ``temporal=``
(a ``temporalio.client.Client``), the durable sessions' pending decisions
(``mlt.pending`` / ``mlt.decide``). Security: :mod:`managedloop.console._app`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from managedloop.console._app import ResumeWith

__all__ = ["app"]


def app(
    store: Any,
    *,
    token: str | None = None,
    read_only: bool = False,
    resume_with: ResumeWith | None = None,
    temporal: Any = None,
    poll_interval: float = 0.5,
    user_header: str | None = None,
    run_options: Mapping[str, Any] | None = None,
    list_ttl: float = 2.0,
) -> Starlette:
    """The console as an ASGI application.

    ``store``: the record's :class:`~managedloop.stores.Store` (or an
    ``ml.SessionRecord``); its provisioning index and webhook deliveries are shown too.
    ``token``: the access token (at least 16 characters; default: a random one, in
    ``app.state.token``). ``read_only``: no decision buttons, and decisions are refused.
    ``resume_with(parked) -> (provider, agent)`` (sync or async): what resumes a parked
    session once decided (without it the record's approvals are shown, not decided).
    ``temporal``: a Temporal client, for durable sessions (or a zero-argument function,
    sync or async, returning one: called on first use, on the server's event loop).
    ``poll_interval``: seconds between two reads of the record by a live page.
    ``user_header``: a request header naming who decides (set by your reverse proxy),
    else decisions are by ``"console"``.
    ``run_options``: more ``ml.run`` options for a resume (``timeout``, ``max_turns``...).
    ``list_ttl``: seconds the session list's read of the store is reused for paging,
    filtering and searching (``0``: read on every page).
    """
    try:
        from managedloop.console._app import build
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "managedloop.console needs the console extra: pip install 'managedloop[console]'"
        ) from exc
    return build(
        store,
        token=token,
        read_only=read_only,
        resume_with=resume_with,
        temporal=temporal,
        poll_interval=poll_interval,
        user_header=user_header,
        run_options=run_options,
        list_ttl=list_ttl,
    )
