"""Claude Managed Agents ids, checked before they reach a URL path.

Why: an id is interpolated into request paths (``/v1/sessions/{id}/events``,
``/v1/files/{id}/content``) and into telemetry span paths. ``session_id='../../v1/agents'``
was sent as is. The API's ids are a short type prefix, ``_`` and a base62 body
(``sesn_011CZkZAtmR3yMPDzynEDxsB``, ``agent_…``, ``env_…``, ``file_…``; cma-wire.md §0), and
the docs call them opaque, so the check is on the *alphabet*, not on the prefix (a
compatible host may mint other prefixes): ASCII letters and digits, then letters, digits,
``_`` and ``-``, at most :data:`MAX_ID_LENGTH` characters, matched with
:func:`re.fullmatch` (``$`` would accept a trailing newline). That alphabet cannot express
a path separator, a dot segment, a percent escape, a query or a fragment. A bad id raises
``InvalidOptionsError`` with the kind's code (``invalid_session_id``, ``invalid_agent_id``,
``invalid_environment_id``, ``invalid_file_id``) before any request is made.
"""

from __future__ import annotations

import re
from typing import Any

from managedloop import _validate

__all__ = ["ID_PATTERN", "MAX_ID_LENGTH", "check_id"]

MAX_ID_LENGTH = 255  # real ids are ~30 characters; this only bounds what reaches a URL
ID_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_ID_LENGTH - 1}}}")

_WHAT = {
    "session": "a Claude session id (e.g. 'sesn_011CZkZAtmR3yMPDzynEDxsB')",
    "agent": "a Claude agent id (e.g. 'agent_011CZkZAtmR3yMPDzynEDxsB')",
    "environment": "a Claude environment id (e.g. 'env_011CZkZAtmR3yMPDzynEDxsB')",
    "file": "a Claude file id (e.g. 'file_011CZkZAtmR3yMPDzynEDxsB')",
}


def check_id(kind: str, value: Any, *, option: str | None = None) -> str:
    """``value`` if it is a well-formed id of ``kind`` (``session``, ``agent``,
    ``environment``, ``file``), else ``InvalidOptionsError(code="invalid_<kind>_id")``."""
    return _validate.matches(
        option or f"{kind}_id",
        value,
        ID_PATTERN,
        _WHAT[kind] + " (letters, digits, '_' and '-')",
        code=f"invalid_{kind}_id",
    )
