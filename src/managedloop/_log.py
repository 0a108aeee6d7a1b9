"""Structured log records: one per notable event, under the ``managedloop`` logger.

Every logger of the library is a child of ``managedloop`` (``managedloop.local``,
``managedloop.providers.claude``, ``managedloop.agentcore``, ``managedloop.retry``,
``managedloop.session``...), so one handler on ``logging.getLogger("managedloop")`` sees
them all. A notable record carries, besides its readable message, ``extra`` fields a JSON
formatter can emit as they are (``python-json-logger`` and the like put every non-standard
attribute of the record into the JSON object):

* ``event`` -- what happened: ``retry``, ``give_up``, ``reconnect``, ``provision_poll``,
  ``provision_stop`` (the end of one AgentCore provisioning wait, its ``result`` ``ok``,
  ``error`` or ``cancelled``), ``skipped_frame`` (a Claude stream frame that is not a
  JSON object: WARNING for the first of a stream, DEBUG after), ``guard`` (a loop guard
  stepped in: a re-prompt, a duplicate call answered), ``stopped`` (the library ended a
  request: ``max_turns``, a turn guard, a token budget...);
* the event's own fields, flat: ``host``, ``operation``, ``session_id``, ``attempt``,
  ``max_retries``, ``wait_s`` (the wait before the retry, in seconds), ``code``,
  ``status``, ``reason``...

Levels: WARNING for retries, reconnects, give-ups and provisioning waits that failed; INFO
for guard interventions, library stops and provisioning waits that succeeded; DEBUG for
provisioning polls. Nothing is logged at INFO or above on a
per-token or per-event path: a normal session logs nothing at INFO
(``tests/telemetry/test_logging.py``). Secrets are never fields (the leak test checks).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["fields"]

# Attributes every LogRecord has: an ``extra`` key among them makes logging raise KeyError.
_RESERVED = frozenset(
    set(vars(logging.LogRecord("x", logging.INFO, "x", 0, "", None, None))) | {"message", "asctime"}
)


def fields(event: str, **values: Any) -> dict[str, Any]:
    """``extra=`` for one notable record: ``event`` and ``values`` (a key that a LogRecord
    reserves, such as ``name`` or ``module``, is renamed ``ml_<key>``)."""
    out: dict[str, Any] = {"event": event}
    for key, value in values.items():
        out["ml_" + key if key in _RESERVED else key] = value
    return out
