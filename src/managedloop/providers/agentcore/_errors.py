"""botocore and urllib3 failures mapped into the managedloop error tree, credentials masked.

Every mapped error's text and context go through :func:`._redact.scrubbed`, and
:func:`raise_mapped` never chains an original exception that itself holds a credential.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NoReturn
from urllib.parse import urljoin

from managedloop import _retry
from managedloop._urls import origin
from managedloop.errors import (
    APIStatusError,
    AuthenticationError,
    ConfigError,
    HostStreamError,
    InvalidOptionsError,
    MalformedResponseError,
    ManagedLoopError,
    TransportError,
)
from managedloop.providers.agentcore._redact import leaks, scrubbed

__all__ = ["map_error", "raise_mapped", "redirect_refused", "retryable"]


def map_error(
    exc: BaseException,
    *,
    operation: str,
    stream_code: str = "harness_stream_error",
    secrets: Iterable[str] = (),
    endpoint: str | None = None,
) -> ManagedLoopError:
    """Translate a botocore/urllib3 failure into the managedloop tree.

    Its text and context are redacted (:func:`redact`, plus the literal ``secrets``): a
    403 echoes the canonical request, session token included. The caller must not chain
    ``exc`` when :func:`leaks` says it holds a credential (see :func:`raise_mapped`).
    A 3xx answer (botocore never follows one outside S3) is :func:`redirect_refused`;
    ``endpoint`` (the URL called) resolves a relative ``Location``.
    """
    if isinstance(exc, ManagedLoopError):
        return exc
    mapped = _map_error(exc, operation=operation, stream_code=stream_code, endpoint=endpoint)
    return scrubbed(mapped, secrets)


def redirect_refused(
    operation: str, status: int, location: str | None, *, endpoint: str | None = None
) -> APIStatusError:
    """The error for a 3xx answer: never followed, on either plane.

    Following it would re-send the conversation and the signed headers (the session token
    included) to wherever the server points, another origin included; and a SigV4
    signature covers the host and path, so a redirected AWS request could never be valid.
    Only the target's origin is shown (its path or query may carry anything).
    """
    target = origin(urljoin(endpoint or "", location)) if location else None
    return APIStatusError(
        f"{operation}: the endpoint redirected (HTTP {status}) to "
        f"{target or 'an unreadable location'}; redirects are never followed: the request "
        "carries the conversation and the signed credentials",
        code="redirect_refused",
        status=status,
        location_origin=target,
        operation=operation,
    )


def _location(response: Mapping[str, Any]) -> str | None:
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    location = headers.get("location")
    return location if isinstance(location, str) else None


def raise_mapped(mapped: ManagedLoopError, exc: BaseException, secrets: Iterable[str]) -> NoReturn:
    """Raise ``mapped``, chained to ``exc`` unless ``exc`` itself holds a credential.

    Must be called *outside* the ``except`` block that caught ``exc``: inside it, Python
    would still attach ``exc`` as ``__context__`` (printed in tracebacks as "During
    handling of the above exception...").
    """
    if mapped is exc:
        raise mapped
    if leaks(exc, secrets):
        mapped.context["cause_redacted"] = type(exc).__name__
        raise mapped
    raise mapped from exc


def _map_error(
    exc: BaseException, *, operation: str, stream_code: str, endpoint: str | None
) -> ManagedLoopError:
    from botocore import exceptions as be
    from botocore.eventstream import ParserError as FrameError
    from botocore.parsers import ResponseParserError

    try:
        from urllib3.exceptions import ProtocolError, ReadTimeoutError
    except ImportError:  # pragma: no cover
        ProtocolError = ReadTimeoutError = OSError  # type: ignore[misc,assignment] # noqa: N806

    if isinstance(exc, be.EventStreamError):
        err = exc.response.get("Error", {})
        kind, message = err.get("Code"), err.get("Message", "")
        error = HostStreamError(
            f"{operation}: the host reported {kind}: {message}",
            code=stream_code,
            type=kind,
            operation=operation,
        )
        error.context["message"] = message  # the host's own text (``message`` is positional)
        return error
    if isinstance(exc, be.ClientError):
        meta = exc.response.get("ResponseMetadata", {})
        err = exc.response.get("Error", {})
        status = meta.get("HTTPStatusCode")
        if isinstance(status, int) and 300 <= status < 400:
            return redirect_refused(operation, status, _location(exc.response), endpoint=endpoint)
        cls = AuthenticationError if status in (401, 403) else APIStatusError
        return cls(
            f"{operation} failed with HTTP {status} {err.get('Code')}: {err.get('Message', '')}",
            status=status,
            error_code=err.get("Code"),
            body={"message": err.get("Message", "")},
            operation=operation,
        )
    if isinstance(exc, FrameError | ResponseParserError):
        return MalformedResponseError(
            f"{operation}: undecodable event-stream frame ({type(exc).__name__}: {exc})",
            code="bad_frame",
            operation=operation,
        )
    if isinstance(exc, ReadTimeoutError | be.ReadTimeoutError):
        return TransportError(
            f"{operation}: no bytes within the read timeout",
            code="stream_idle_timeout",
            operation=operation,
        )
    if isinstance(exc, be.NoCredentialsError | be.PartialCredentialsError):
        return AuthenticationError(
            f"{operation}: no AWS credentials found (explicit, managedloop.configure, "
            "AWS_* env, or botocore's chain)",
            operation=operation,
        )
    if isinstance(exc, be.NoRegionError):
        return ConfigError(f"{operation}: no AWS region configured", key="aws_region")
    if isinstance(exc, be.ParamValidationError):
        return InvalidOptionsError(f"{operation}: {exc}", operation=operation)
    if isinstance(exc, ProtocolError | be.HTTPClientError | OSError):
        return TransportError(
            f"{operation}: connection failed ({type(exc).__name__}: {exc})",
            code="transport_error",
            operation=operation,
        )
    return TransportError(
        f"{operation}: unexpected failure ({type(exc).__name__}: {exc})",
        code="transport_error",
        operation=operation,
    )


def retryable(exc: ManagedLoopError) -> bool:
    """Whether a failed call may be tried again: :func:`managedloop._retry.retryable`
    (transport failures, damaged frames, 408, 429 and 5xx; never 424 or another 4xx)."""
    return _retry.retryable(exc)
