"""botocore prepares and signs each data-plane request; we take it instead of sending it.

botocore's own client pipeline runs on the event loop (CPU only): parameter validation,
serialization, endpoint resolution, user agent, the client's SigV4 signer. Its
``before-send`` hook hands us the final, signed ``AWSPreparedRequest`` and answers for the
send (documented event semantics: a ``before-send`` handler that returns a response
replaces the send), so the bytes go out through aiohttp (:mod:`._stream`).
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

import anyio

from managedloop.errors import ConfigError

__all__ = ["install_capture", "prepare_request", "refresh_credentials"]

_CAPTURE: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "managedloop_agentcore_capture", default=None
)
_CAPTURE_ID = "managedloop-agentcore-capture"


def _capture(request: Any, **_: Any) -> Any:
    """``before-send`` hook: take the serialized, signed request instead of sending it.

    Inert outside :func:`prepare_request` (a caller's own calls on a shared client are sent
    by botocore as usual). The stand-in answer is an empty ``200``: botocore neither retries
    nor reads it.
    """
    box = _CAPTURE.get()
    if box is None:
        return None
    box.append(request)
    from botocore.awsrequest import AWSResponse
    from botocore.compat import HTTPHeaders

    return AWSResponse(request.url, 200, HTTPHeaders(), None)


def install_capture(client: Any) -> None:
    """Register :func:`_capture` last on ``client``'s ``before-send`` (idempotent).

    Last, so a caller's own ``before-send`` hooks (e.g. a bearer token) still apply.
    """
    service_id = client.meta.service_model.service_id.hyphenize()
    client.meta.events.register_last(f"before-send.{service_id}", _capture, unique_id=_CAPTURE_ID)


def prepare_request(client: Any, operation: str, params: Mapping[str, Any]) -> Any:
    """The ``AWSPreparedRequest`` botocore would send for ``client.<operation>(**params)``.

    botocore's own pipeline runs (parameter validation, serialization, endpoint resolution,
    user agent, the client's signer with its credentials and region); only the send is
    skipped (:func:`_capture`). CPU only, unless the credentials are due for a refresh:
    :func:`refresh_credentials` does that in a thread first.
    """
    box: list[Any] = []
    token = _CAPTURE.set(box)
    try:
        getattr(client, operation)(**params)
    finally:
        _CAPTURE.reset(token)
    if not box:
        raise ConfigError(
            f"{operation}: the botocore client answered without sending a request (a stub or "
            "a before-send hook returning a response?); the data plane needs the request",
            code="unsupported_client",
        )
    return box[-1]


async def refresh_credentials(credentials: Any) -> None:
    """Refresh expiring credentials in a worker thread, so signing never blocks the loop.

    botocore's chain is synchronous (STS, SSO, IMDS...); a refresh that is due would
    otherwise run inside :func:`prepare_request` on the event loop.
    """
    due = getattr(credentials, "refresh_needed", None)
    if due is not None and due():
        await anyio.to_thread.run_sync(credentials.get_frozen_credentials)
