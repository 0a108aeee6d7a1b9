"""Loading botocore, its shared session, and the one place that reads its private attributes.

``import managedloop.providers.agentcore`` does not import botocore: :func:`load` does, on
first use, and installs the log redaction (:mod:`._redact`) before any botocore logger
can print a credential. A missing extra raises ``ConfigError(code="missing_dependency")``.
"""

from __future__ import annotations

import threading
from typing import Any

from managedloop.errors import ConfigError
from managedloop.providers.agentcore._redact import install_redaction

__all__ = ["client_internals", "default_session", "load"]

_INSTALL_HINT = "Bedrock AgentCore needs botocore: pip install 'managedloop[agentcore]'"


def load() -> Any:
    """The ``botocore`` package, imported now (with log redaction installed)."""
    try:
        import botocore.session
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ConfigError(_INSTALL_HINT, code="missing_dependency", package="botocore") from exc
    install_redaction()
    return botocore


_shared_lock = threading.Lock()
_shared_session: Any = None


def default_session() -> Any:
    """One botocore session per process: it caches the loaded service models (~100 ms)."""
    global _shared_session
    with _shared_lock:
        if _shared_session is None:
            _shared_session = load().session.get_session()
        return _shared_session


def client_internals(client: Any) -> tuple[Any, Any]:
    """The credentials object and the TLS ``verify`` setting of a botocore client.

    botocore has no public accessor for either, and a caller's ``client=`` carries its own
    (a profile, a role, a CA bundle): this is the one place that reads private attributes
    (``client._request_signer._credentials``, ``client._endpoint.http_session._verify``).
    ``tests/agentcore/test_transport.py`` fails loudly if botocore moves them; at run time
    a missing attribute degrades to ``None`` (no credentials to lend the control plane, no
    refresh ahead of signing) and ``True`` (verify with botocore's default CA bundle).
    """
    signer = getattr(client, "_request_signer", None)
    credentials = getattr(signer, "_credentials", None)
    http_session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    verify = getattr(http_session, "_verify", True)
    return credentials, verify
