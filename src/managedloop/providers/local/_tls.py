"""The TLS settings of Local's transports: one :class:`ssl.SSLContext` from ``verify`` and
``client_cert``, named as the AgentCore host (botocore) names them.

* ``verify=True`` (the default): the system trust store, hostname checks and SNI. OpenSSL
  reads ``SSL_CERT_FILE`` (a PEM bundle) and ``SSL_CERT_DIR`` (a hashed directory) for
  that store, so either environment variable trusts a private certificate authority
  without a code change.
* ``verify="/path/ca.pem"`` (or a directory of hashed certificates): trust that bundle
  instead of the system store (botocore's ``verify=`` path; httpx's ``verify=`` string).
* ``verify=ssl.SSLContext(...)``: the context as it is, for full control.
* ``verify=False``: no certificate or hostname check at all, behind a loud
  :class:`InsecureTLSWarning` (and a WARNING log record) at construction.
* ``client_cert="/path/cert-and-key.pem"`` or ``("/path/cert.pem", "/path/key.pem")``:
  a client certificate for servers that require one (botocore's ``client_cert``).

Every file is read at construction, so a missing or unreadable one is an
:class:`~managedloop.InvalidOptionsError` before any request.
"""

from __future__ import annotations

import logging
import os
import ssl
import warnings
from typing import Any

from managedloop.errors import InvalidOptionsError

__all__ = ["InsecureTLSWarning", "default_context", "ssl_context"]

logger = logging.getLogger("managedloop.local")


class InsecureTLSWarning(UserWarning):
    """``verify=False``: TLS certificates and host names are not checked."""


_defaults: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def default_context() -> ssl.SSLContext:
    """The system trust store's context, made on first use (loading the store takes
    milliseconds) and again when ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` changed, so a
    variable set by a program (or a test) before its first request is honoured."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _defaults.get(key)
    if context is None:
        context = _defaults[key] = ssl.create_default_context()
    return context


def ssl_context(verify: Any = True, client_cert: Any = None) -> ssl.SSLContext | None:
    """The context for ``https`` (``None``: :func:`default_context`, at connect time)."""
    if isinstance(verify, ssl.SSLContext):
        if client_cert is not None:
            raise InvalidOptionsError(
                "client_cert cannot be combined with an ssl.SSLContext: load the "
                "certificate into the context (context.load_cert_chain)",
                option="client_cert",
            )
        return verify
    if verify is True and client_cert is None:
        return None
    if verify is True:
        context = ssl.create_default_context()
    elif verify is False:
        message = (
            "Local(verify=False): TLS certificates and host names are NOT checked; anyone "
            "on the network path can read and change the conversation and the API key"
        )
        warnings.warn(message, InsecureTLSWarning, stacklevel=4)
        logger.warning(message)
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif isinstance(verify, str | os.PathLike):
        path = os.fspath(verify)
        try:
            if os.path.isdir(path):
                context = ssl.create_default_context(capath=path)
            else:
                context = ssl.create_default_context(cafile=path)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidOptionsError(
                f"verify: cannot load the CA bundle {path!r}: {exc}", option="verify"
            ) from None
    else:
        raise InvalidOptionsError(
            "verify must be True, False, a CA bundle path or an ssl.SSLContext",
            option="verify",
        )
    if client_cert is not None:
        if isinstance(client_cert, str | os.PathLike):
            files: tuple[Any, ...] = (os.fspath(client_cert),)
        elif (
            isinstance(client_cert, tuple)
            and len(client_cert) == 2
            and all(isinstance(p, str | os.PathLike) for p in client_cert)
        ):
            files = tuple(os.fspath(p) for p in client_cert)
        else:
            raise InvalidOptionsError(
                "client_cert must be a path (certificate and key in one PEM) or a "
                "(certificate, key) pair of paths",
                option="client_cert",
            )
        try:
            context.load_cert_chain(*files)
        except (OSError, ssl.SSLError) as exc:
            # the key file's path is shown, never its content
            raise InvalidOptionsError(
                f"client_cert: cannot load {files!r}: {exc}", option="client_cert"
            ) from None
    return context
