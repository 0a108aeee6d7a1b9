"""One streamed data-plane call: botocore prepares, signs and decodes; aiohttp carries.

botocore does the AWS work: the service model and request serialization, endpoint
resolution, the AWS credential chain, SigV4 signing, event-stream decoding and error
parsing. It is synchronous, so the control plane (provisioning, ``GetHarness``) runs its
calls in a worker thread. The data plane (``InvokeHarness``, ``InvokeAgentRuntimeCommand``)
does not: botocore's own client pipeline prepares and signs each request on the event loop
(:mod:`._signing`), and only the HTTP I/O is aiohttp's (already a core dependency,
:mod:`._http`): the response bytes are fed, as they arrive, to botocore's
``EventStreamBuffer`` and event parser (:mod:`._decoding`). No worker thread, no thread
switch per turn; cancelling the reader closes the connection itself.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import aiohttp
import yarl

from managedloop import telemetry
from managedloop.errors import ManagedLoopError, TransportError
from managedloop.providers.agentcore._clients import Clients
from managedloop.providers.agentcore._decoding import EventDecoder, client_error
from managedloop.providers.agentcore._errors import map_error, raise_mapped, redirect_refused
from managedloop.providers.agentcore._redact import scrubbed
from managedloop.providers.agentcore._signing import prepare_request, refresh_credentials
from managedloop.providers.agentcore._trace import trace_params

__all__ = ["stream_call"]


def _map_stream_error(
    exc: Exception,
    *,
    operation: str,
    stream_code: str,
    idle_timeout: float,
    secrets: tuple[str, ...],
) -> ManagedLoopError:
    if isinstance(exc, aiohttp.SocketTimeoutError) or (
        isinstance(exc, aiohttp.ServerTimeoutError)
        and not isinstance(exc, aiohttp.ConnectionTimeoutError)
    ):
        return TransportError(
            f"{operation}: no bytes for {idle_timeout}s (idle_timeout)",
            code="stream_idle_timeout",
            operation=operation,
            idle_timeout=idle_timeout,
        )
    if isinstance(exc, aiohttp.ClientError):
        # A dropped or refused connection (``ClientPayloadError``, ``ServerDisconnectedError``,
        # ...): most are not ``OSError``s, and ``map_error`` only knows botocore and urllib3.
        return scrubbed(
            TransportError(
                f"{operation}: connection failed ({type(exc).__name__}: {exc})",
                code="transport_error",
                operation=operation,
            ),
            secrets,
        )
    return map_error(exc, operation=operation, stream_code=stream_code, secrets=secrets)


async def stream_call(
    clients: Clients,
    operation: str,
    params: Mapping[str, Any],
    *,
    idle_timeout: float,
    stream_code: str = "harness_stream_error",
    span_meta: dict[str, Any] | None = None,
    inflight: set[Callable[[], None]] | None = None,
    trace: bool = False,
) -> AsyncGenerator[dict[str, Any], None]:
    """One streamed data-plane call (``operation`` is the client method name); yields its
    events live, decoded as their bytes arrive.

    botocore prepares and signs the request (:func:`prepare_request`); aiohttp sends it on
    the session of the running loop (:meth:`Clients.http`, acquired by the caller) and
    reads the body; :class:`EventDecoder` decodes it. Raises the mapped error;
    ``TransportError(code="stream_idle_timeout")`` when no bytes arrive for
    ``idle_timeout`` seconds (headers included). Stopping early (cancellation, a ``run``
    timeout, ``aclose``) closes the connection, and so does calling the abort function
    registered in ``inflight`` while it runs (a connection's ``aclose`` uses it when the
    consumer was torn down between events). ``trace``: add the current span's trace
    context (:func:`._trace.trace_params`, read inside this call's own span).
    """
    secrets = clients.secrets()
    failure: tuple[ManagedLoopError, Exception] | None = None
    with telemetry.span("agent_core.request", span_meta or {"operation": operation}) as extra:
        try:
            wire = clients.wire()
            await refresh_credentials(wire.credentials)
            if trace:
                params = {**params, **trace_params()}
            request = prepare_request(wire.client, operation, params)
            headers = {
                k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()
            }
            response = await clients.http.session().request(
                request.method,
                yarl.URL(request.url, encoded=True),  # as signed: never re-quoted
                data=request.body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=wire.connect_timeout, sock_read=idle_timeout
                ),
                ssl=wire.ssl if wire.ssl is not None else True,
                proxy=wire.proxy,
                # Never followed: aiohttp would re-send the conversation and the signed
                # headers (the session token) to wherever the server points.
                allow_redirects=False,
            )
        except Exception as exc:
            mapped = _map_stream_error(
                exc,
                operation=operation,
                stream_code=stream_code,
                idle_timeout=idle_timeout,
                secrets=secrets,
            )
            extra["status"] = mapped.context.get("status")
            failure = (mapped, exc)
        if failure is not None:  # raised outside the except: no __context__ to leak through
            raise_mapped(*failure, secrets)
        finished = False
        if inflight is not None:
            inflight.add(response.close)
        try:
            op_model = wire.operation_model(operation)
            if 300 <= response.status < 400:
                finished = True  # nothing to read: the connection can be reused
                raise redirect_refused(
                    operation,
                    response.status,
                    response.headers.get("Location"),
                    endpoint=request.url,
                )
            if response.status >= 300:
                body = await response.read()
                finished = True
                raise client_error(wire.client, op_model, response.status, response.headers, body)
            decoder = EventDecoder(op_model)
            content = response.content
            while chunk := await content.readany():
                for event in decoder.feed(chunk):
                    yield event
            finished = True
            extra["status"] = 200
        except Exception as exc:
            mapped = _map_stream_error(
                exc,
                operation=operation,
                stream_code=stream_code,
                idle_timeout=idle_timeout,
                secrets=secrets,
            )
            extra["status"] = mapped.context.get("status", response.status)
            failure = (mapped, exc)
        finally:
            if inflight is not None:
                inflight.discard(response.close)
            if finished:
                response.release()
            else:  # ended early: drop the connection, so the server sees us go
                response.close()
        if failure is not None:
            raise_mapped(*failure, secrets)
