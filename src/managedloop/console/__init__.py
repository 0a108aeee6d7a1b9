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

from typing import TYPE_CHECKING, Any

__all__ = ["app"]

if TYPE_CHECKING:
    from managedloop.console._app import app
else:

    def __getattr__(name: str) -> Any:
        # ``app`` loads on first use: starlette is the console extra's, and importing this
        # package must not need it.
        if name != "app":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        try:
            from managedloop.console._app import app
        except ImportError as exc:  # pragma: no cover - exercised only without the extra
            raise ImportError(
                "managedloop.console needs the console extra: pip install 'managedloop[console]'"
            ) from exc
        globals()["app"] = app
        return app
