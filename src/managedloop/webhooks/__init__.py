"""Sessions the host starts: verify a signed webhook, attach by id, run the pending tools.

Claude Managed Agents deployments (scheduled or manually triggered) start sessions with
nobody attached; a session whose agent calls a custom tool then waits in
``requires_action`` and the host notifies a URL by webhook (thin payloads: ``data: {id,
type, ...}`` names the session, nothing more). This module is the receiving end::

    import managedloop.webhooks as mw

    hooks = mw.app(provider, agent=agent, secret=os.environ["ANTHROPIC_WEBHOOK_SIGNING_KEY"])
    # an ASGI app: mount it (Starlette ``Mount("/hooks", app=hooks)``, FastAPI
    # ``app.mount(...)``) or serve it alone; or from any framework:
    outcome = await hooks.handle(body_bytes, request_headers)

For ``session.requires_action`` and ``session.status_idled`` it attaches to the session by
id (``ml.run(provider, agent=agent, resume=session_id)``: the host's history names the
custom tool uses still waiting), runs them locally with the agent's tools (or
``handler=``), answers each once, follows the session to its next terminal and returns
the :class:`~managedloop.SessionResult` in a :class:`WebhookOutcome`. Other event types are
acknowledged and ignored. A session with nothing pending is ``nothing_pending``.

**Verification** (:func:`verify`) is Standard Webhooks: the signed content is
``"<webhook-id>.<webhook-timestamp>.<body>"``, HMAC-SHA256 with the secret (``whsec_``
prefix, then base64; raw ``bytes`` are used as they are), and ``webhook-signature`` is a
space-separated list of ``v1,<base64>`` entries of which one must match (others, and
other versions, are ignored, so a rotated secret's two signatures both work). The compare
is constant-time (:func:`hmac.compare_digest`). The timestamp must be within
``tolerance`` seconds (300, the standard's five minutes) of ``clock()``. A bad signature,
a stale or future timestamp or a malformed header or body raises
:class:`~managedloop.errors.WebhookVerificationError` (``bad_signature``,
``stale_webhook``, ``malformed_webhook``) *before anything else happens*: nothing is
stored, attached or run.

Why by hand rather than ``client.beta.webhooks.unwrap`` (which calls the
``standardwebhooks`` package): that verifier reads the wall clock with a fixed five-minute
window (no clock to inject, so tests would depend on real time, and no tolerance to set),
and a malformed header makes it raise ``ValueError`` / ``binascii.Error`` /
``UnicodeDecodeError`` instead of one named error; it also needs the ``standardwebhooks``
package for thirty lines of HMAC. The tests check this verifier against that one both
ways (its signatures verify here, ours verify there and through ``unwrap``), so the two
cannot drift apart unnoticed.

**At most once per tool use.** A host redelivers a webhook (same ``webhook-id``) when it
did not get a 2xx in time, and one idle can raise two event types. So:

* each ``webhook-id`` is recorded in the store (``running`` → ``done`` / ``failed``); a
  delivery whose id is ``running`` or ``done`` is a ``duplicate`` and runs nothing (a
  ``failed`` one is processed again: that is the host's retry; so is a ``running`` one
  older than ``running_lease``, :data:`RUNNING_LEASE`, left by a worker that died);
* deliveries for one session are handled one at a time in this process (a lock per
  session id, shared by every receiver on the event loop), so two event types for one
  idle cannot run its tools twice: the second finds them answered in the host's history;
* every result is written to the store, keyed by session and tool-use id, *before* it is
  sent; a later delivery that finds that use still pending on the host (the send failed,
  the process died) sends the stored result and does not run the tool again;
* a tool use is marked ``started`` in the store before it runs; a later delivery that
  finds it still pending with no stored result (the process died mid-tool) answers it
  with an error result saying so rather than running it a second time. After a run that
  returns normally, marks of uses that were never run (a ``max_turns`` stop) are removed.
  Uses answered this way are listed in :attr:`WebhookOutcome.from_store` (and appear in
  the result's ``custom_tool_uses`` with an ``input_error`` saying so: they did not run).

The store is any :class:`managedloop.stores.Store` (default: one process-wide
:class:`~managedloop.stores.MemoryStore`); records older than ``retention``
(:data:`RETENTION`, a week) are swept at most once an hour, so the dedupe stays small.
Each read-decide-write on it is one ``Store.update``, atomic across every process sharing
a persistent store: of two processes receiving the same delivery at the same instant,
exactly one runs it, and a tool use is claimed by one delivery only. The one-at-a-time lock
per session is the process's own, though: two *different* deliveries for one session
handled at once by two processes both attach, and the second answers a tool use the first
is still running with the "did not finish" error rather than run it twice. Route one
session's webhooks to one process to avoid that. A receiver serves one event loop (its
per-session locks are the loop's).

**Answer fast, work after.** The ASGI app verifies and de-duplicates before answering,
then (``background=True``, the default) answers ``202`` at once and does the work after
the response, in the same ASGI call (as Starlette's background tasks do), because tool
runs can take longer than a host waits for an answer. Failures are then logged (error
code and message, never the secret, a key or a tool's input) and the delivery is marked
``failed``; the tool uses it did not answer stay pending on the host, so the next
delivery for that session (or a redelivery, or any ``ml.run(..., resume=session_id)``)
picks them up. With ``background=False`` the app answers after the work: ``200`` with the
outcome, or ``500`` on failure so the host redelivers. :meth:`Webhooks.handle` is always
synchronous: it returns the outcome or raises.

HTTP answers: ``202``/``200`` JSON ``{"status": ...}``; ``400`` malformed, ``401`` bad
signature or stale timestamp (``{"error": code}``), ``405`` not a POST, ``413`` a body
over :data:`MAX_BODY`; ``500`` a failed synchronous run.

Not verified against the real service: the exact headers and payload Anthropic sends
(taken from the SDK's ``BetaWebhookEvent`` types and the Standard Webhooks spec) and
whether its ``webhook-id`` equals the payload's event ``id``.
"""

from __future__ import annotations

from managedloop.webhooks._app import MAX_BODY, Webhooks, app, handle
from managedloop.webhooks._dispatch import HANDLED_EVENTS, RUNNING_LEASE, WebhookOutcome
from managedloop.webhooks._ledger import (
    PRUNE_INTERVAL as PRUNE_INTERVAL,  # not in __all__, as before
)
from managedloop.webhooks._ledger import RETENTION as RETENTION
from managedloop.webhooks._ledger import STORE_PREFIX
from managedloop.webhooks._signing import TOLERANCE, WebhookEvent, sign, verify

__all__ = [
    "HANDLED_EVENTS",
    "MAX_BODY",
    "RUNNING_LEASE",
    "STORE_PREFIX",
    "TOLERANCE",
    "WebhookEvent",
    "WebhookOutcome",
    "Webhooks",
    "app",
    "handle",
    "sign",
    "verify",
]
