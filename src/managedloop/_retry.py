"""One retry policy for every host: which failures are retried, how long to wait, the loop.

**Classification** (:func:`classify`, :func:`retryable`). A failed call is retried only when
trying again can succeed and cannot do harm the host's own rules do not already guard:

============================  ==========================================  ========
situation                     what it is                                  retried?
============================  ==========================================  ========
``transport``                 :class:`~managedloop.TransportError`:       yes
                              connect/reset/read timeout/dropped stream
``unhealable``                a ``TransportError`` marked                 **never**
                              ``permanent=True``: a TLS certificate or
                              host-name failure, a handshake the peer
                              refused (a missing client certificate):
                              the same connect fails the same way
``damaged``                   a :class:`~managedloop.MalformedResponseError` yes
                              whose bytes broke in transit (``bad_frame``,
                              ``duplicate_frame``: a checksum mismatch, a
                              frame cut short or delivered twice)
``malformed``                 any other ``MalformedResponseError``: the   no
                              answer arrived whole but breaks the
                              protocol (not JSON, no ``choices``...), so
                              asking again gets the same answer
``throttled``                 HTTP 408 or 429                             yes
``server``                    HTTP >= 500                                 yes
``invalid_request``           any status whose body says the request      **never**
                              was invalid (``invalid_request_error``, a
                              pydantic "Input should be..." 500,
                              ``ValidationException``...), or an error
                              marked ``invalid_request=True``: the same
                              body would fail again
``client``                    any other status (4xx: 400, 404, 409,       no
                              424...)
``auth``                      :class:`~managedloop.AuthenticationError`   no
``no_status``                 an ``APIStatusError`` without a status:     no
                              nothing says it was transient
``host``                      :class:`~managedloop.HostStreamError`: the  no
                              host itself failed the turn (one the host
                              marks ``transient``, e.g. Local's
                              overloaded error object, is ``server``)
``other``                     anything else                               no
============================  ==========================================  ========

Before this module the hosts disagreed: AgentCore retried every malformed response and
Local none (now: damaged bytes are retried, a whole but wrong answer is not); Claude retried
a status error without a status and the others did not (now none does); AgentCore did not
retry 408 (now every host does). Nothing retried a body the server rejected as invalid
except by accident of its status (a 500 was retried; now it is not).

**Waits** (:class:`Policy`). The server's ``Retry-After`` wins when it sent one (delta-seconds
or an HTTP-date; capped at ``retry_after_cap``; never negative; garbage, NaN and infinity
are ignored, see :func:`parse_retry_after`); otherwise capped exponential backoff with
equal jitter: retry ``n`` (0-based) waits a uniform draw from ``[c x (1 - jitter), c]``
where ``c = min(cap, base x 2^n)``. So a wait never exceeds its cap, is never negative,
and a herd of clients that failed together does not come back together.

**Each host's deliberate differences**, one table (``tests/test_retry.py::TABLE`` holds a
row for each line and ``test_host_retry_table`` runs it through the host's real code):

=========  ====================================  ========  ================================
host       situation                             retried?  wait before the retry
=========  ====================================  ========  ================================
every      transport, damaged, 408, 429, 5xx     yes       Retry-After (capped), else
                                                           the backoff below
every      invalid request, malformed, other     no        --
           4xx, auth, no status, host error
Local      a model call (``max_retries`` 3)      yes       base ``retry_backoff`` 1 s, cap
                                                           60 s; Retry-After cap
                                                           ``max_retry_after`` 60 s
Local      a streamed call failing part-way      yes       as above; that attempt's deltas
                                                           were delivered (at-least-once)
AgentCore  ``InvokeHarness``, even after events  yes       base ``retry_backoff`` 0.5 s,
           were yielded (``invoke_retries`` 2)   (turn)    cap 4 s; the loop drops the
                                                           yielded events (``RESTART``)
AgentCore  a stream without ``messageStop``      yes       as above; when retries run out,
                                                           ``early_termination``
AgentCore  an exception frame                    no        --
Claude     an event send refused with 429        yes       Retry-After (cap 60 s), else
                                                           backoff; re-sent as is
Claude     an event send failing otherwise (it   yes       base ``reconnect_backoff``
           may have landed): transport, 408,               0.5 s, cap base x 2^7; the
           5xx; 5 attempts                                 history decides what is re-sent
Claude     a dropped stream (``max_reconnects``  yes       backoff before each reconnect,
           10)                                             counted until a terminal
=========  ====================================  ========  ================================

Outside this module's loop, and so outside the table: the anthropic SDK retries Claude's
other API calls itself (its ``max_retries``; its rule also retries 409), and AgentCore's
provisioning retries its control-plane reads at once within its wait budget, classified by
:func:`retryable` (``_waits.call``), while ``CreateHarness`` gets one attempt (a retry
could create twice).

**The loop** (:class:`Attempts`): ``await attempts.failed(exc)`` inside a call's ``except``
re-raises ``exc`` unless it is retryable and retries remain, else waits. It is a plain
object, not a decorator, because two of the loops are async generators that yield between
attempts (AgentCore's turn, Local's streamed call) and Claude's send reconciles with the
history between attempts.

**Why not stamina.** DESIGN.md asks for ``stamina`` where its model fits; it does not fit
here (checked against stamina 26.1.0): (1) every host takes an injected ``sleep`` and its
tests read the waits, but stamina sleeps through its own ``asyncio.sleep``/``trio.sleep``
with no sleep parameter; (2) its ``retry_context`` attempts are tenacity ``AttemptManager``
blocks, which record *any* exception raised inside them, ``GeneratorExit`` and cancellation
included, and re-raise it only at the next iteration: wrong for the async generators above,
which yield inside an attempt; (3) Claude's send and reconnect carry state between attempts
(what landed, a counter reset at a terminal) that its loop has no place for; (4) a custom
backoff returned by its hook (how it would honour Retry-After) is not capped by
``wait_max``. What it would give us is the ten lines of :meth:`Policy.backoff`, at the cost
of two dependencies (stamina and tenacity). Its testing switch is copied instead:
:func:`set_testing`.

**Testing.** :func:`set_testing` (or the :func:`testing` context manager) makes the default
:func:`sleep` return at once for every host that did not inject its own ``sleep``, and
records the waits asked for. An injected ``sleep`` always gets the real wait.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import logging
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import anyio
import anyio.lowlevel

from managedloop._log import fields
from managedloop.errors import (
    APIStatusError,
    AuthenticationError,
    HostStreamError,
    InvalidOptionsError,
    MalformedResponseError,
    TransportError,
)

__all__ = [
    "JITTER",
    "RETRY_AFTER_CAP",
    "Attempts",
    "Policy",
    "Situation",
    "classify",
    "parse_retry_after",
    "rejected_as_invalid",
    "retry_after",
    "retryable",
    "says_invalid",
    "set_testing",
    "sleep",
    "testing",
    "testing_waits",
]

Sleep = Callable[[float], Awaitable[None]]

RETRY_AFTER_CAP = 60.0  # seconds; a server may ask for longer, but a turn parked longer than
# a minute on one answer is an outage, not a blip: fail and let the caller decide
JITTER = 0.5  # "equal jitter": keeps at least half of each backoff, spreads the rest
_MAX_SCAN = 64 * 1024  # characters of an error body searched for "invalid request" markers
_MAX_RETRY_AFTER_TEXT = 64  # an HTTP-date is 29 characters; longer is not a Retry-After


class Situation(StrEnum):
    """What a failure was, as far as retrying is concerned (see the module docstring)."""

    TRANSPORT = "transport"
    UNHEALABLE = "unhealable"
    DAMAGED = "damaged"
    MALFORMED = "malformed"
    THROTTLED = "throttled"
    SERVER = "server"
    INVALID_REQUEST = "invalid_request"
    CLIENT = "client"
    AUTH = "auth"
    NO_STATUS = "no_status"
    HOST = "host"
    OTHER = "other"


RETRIED = frozenset({Situation.TRANSPORT, Situation.DAMAGED, Situation.THROTTLED, Situation.SERVER})
# MalformedResponseError codes of bytes broken in transit: a frame whose CRC or length
# fails, and a frame delivered twice (AgentCore's StreamCheck); the same call may succeed.
_DAMAGED_CODES = frozenset({"bad_frame", "duplicate_frame"})

# Markers of "your request was invalid" in an error body, whatever its status: OpenAI and
# Anthropic error types, pydantic v1/v2 messages (llama.cpp's server answers a schema
# violation with a 500 carrying one), AWS's ValidationException. Specific phrases only: a
# real server fault must not read as the caller's.
_INVALID_BODY = re.compile(
    r"invalid[ _-]request|validation[ _]?errors?\b|validationexception|input should be"
    r"|field required",
    re.IGNORECASE,
)
_INVALID_CODES = frozenset({"ValidationException", "invalid_request_error"})


def says_invalid(body: object) -> bool:
    """Whether an error body (text, or the JSON a client decoded) says the request itself
    was invalid (see ``_INVALID_BODY``); only its first 64 KiB are read."""
    if body is None:
        return False
    if isinstance(body, str):
        text = body
    else:
        try:
            text = json.dumps(body, default=str, ensure_ascii=False)
        except (TypeError, ValueError):  # a cycle, or a key json cannot write
            text = str(body)
    return _INVALID_BODY.search(text[:_MAX_SCAN]) is not None


def rejected_as_invalid(exc: APIStatusError) -> bool:
    """Whether the server said the request itself was invalid (so resending it is futile)."""
    context = exc.context
    if context.get("invalid_request") is True or context.get("error_code") in _INVALID_CODES:
        return True
    return says_invalid(context.get("body"))


def classify(exc: BaseException) -> Situation:
    """The :class:`Situation` of one failure."""
    if isinstance(exc, AuthenticationError):
        return Situation.AUTH  # before the status: a bearer-file failure has none
    context = getattr(exc, "context", None)
    if isinstance(context, Mapping) and context.get("invalid_request") is True:
        return Situation.INVALID_REQUEST  # a host marked it (e.g. an error inside a stream)
    if isinstance(exc, APIStatusError):
        if rejected_as_invalid(exc):
            return Situation.INVALID_REQUEST
        status = exc.status
        if status is None:
            return Situation.NO_STATUS
        if status in (408, 429):
            return Situation.THROTTLED
        if status >= 500:
            return Situation.SERVER
        return Situation.CLIENT
    if isinstance(exc, TransportError):
        if isinstance(context, Mapping) and context.get("permanent") is True:
            return Situation.UNHEALABLE  # e.g. a certificate the peer will present again
        return Situation.TRANSPORT
    if isinstance(exc, MalformedResponseError):
        return Situation.DAMAGED if exc.code in _DAMAGED_CODES else Situation.MALFORMED
    if isinstance(exc, HostStreamError):
        # An error object a host reports in its stream fails the turn, unless the host read
        # it as transient (Local: an OpenAI-style error whose type/code says overloaded,
        # rate-limited or server-side; context["transient"]).
        if isinstance(context, Mapping) and context.get("transient") is True:
            return Situation.SERVER
        return Situation.HOST
    return Situation.OTHER


def retryable(exc: BaseException) -> bool:
    """Whether trying the same call again may succeed (see the module docstring)."""
    return classify(exc) in RETRIED


# ---------------------------------------------------------------------------- waits


def parse_retry_after(value: object, *, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds to wait: delta-seconds (decimals accepted) or an HTTP-date
    (relative to ``now``, default the wall clock). ``None`` when absent or unusable
    (garbage, NaN, infinity, an unparseable date); never negative; never raises."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
        return max(0.0, seconds) if math.isfinite(seconds) else None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or len(text) > _MAX_RETRY_AFTER_TEXT:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(text)
        stamp = when.timestamp()  # a date without a zone (-0000) is taken as UTC by email
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None
    delta = stamp - (time.time() if now is None else now)
    return max(0.0, delta) if math.isfinite(delta) else None


def retry_after(exc: BaseException, *, now: float | None = None) -> float | None:
    """The ``Retry-After`` a failed call carried, in seconds (``None`` if none).

    Looked up where the hosts keep it: the error's ``retry_after`` context (Local), else the
    HTTP response of the client exception it was raised from: an httpx response's headers
    (the anthropic SDK) or a botocore ``ClientError``'s ``ResponseMetadata.HTTPHeaders``.
    """
    context = getattr(exc, "context", None)
    if isinstance(context, Mapping) and context.get("retry_after") is not None:
        return parse_retry_after(context["retry_after"], now=now)
    response = getattr(exc.__cause__, "response", None)
    headers: Any = getattr(response, "headers", None)
    if headers is None and isinstance(response, Mapping):
        meta = response.get("ResponseMetadata")
        headers = meta.get("HTTPHeaders") if isinstance(meta, Mapping) else None
    if not isinstance(headers, Mapping):
        return None
    value = headers.get("retry-after")
    if value is None:
        value = headers.get("Retry-After")
    return parse_retry_after(value, now=now)


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidOptionsError(f"{name} must be a finite number of seconds", option=name)
    if value < 0:
        raise InvalidOptionsError(f"{name} must not be negative", option=name)
    return float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """How one kind of call is retried: how many times and how long to wait before each."""

    retries: int
    """Retries after the first attempt (0: one attempt)."""
    base: float
    """Seconds before the first retry (before jitter); doubled per retry."""
    cap: float
    """Most seconds any one backoff waits."""
    retry_after_cap: float = RETRY_AFTER_CAP
    """Most seconds a server's ``Retry-After`` is honoured for."""
    jitter: float = JITTER
    """Fraction of each backoff that is random (0: none; 1: anywhere in ``[0, c]``)."""

    def __post_init__(self) -> None:
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise InvalidOptionsError("retries must be an integer >= 0", option="retries")
        for name in ("base", "cap", "retry_after_cap", "jitter"):
            object.__setattr__(self, name, _seconds(name, getattr(self, name)))
        if self.jitter > 1:
            raise InvalidOptionsError("jitter must be between 0 and 1", option="jitter")

    def ceiling(self, retry: int) -> float:
        """The wait before retry ``retry`` (0-based) without jitter: ``min(cap, base x 2^n)``."""
        try:
            # ldexp is exact; past 2100 doublings even the smallest float overflows anyway.
            return min(self.cap, math.ldexp(self.base, min(max(retry, 0), 2100)))
        except OverflowError:
            return self.cap

    def backoff(self, retry: int, *, rand: Callable[[], float] = random.random) -> float:
        """The jittered wait before retry ``retry``: in ``[ceiling x (1 - jitter), ceiling]``."""
        top = self.ceiling(retry)
        draw = min(max(rand(), 0.0), 1.0)
        return max(0.0, top * (1.0 - self.jitter * draw))

    def wait(self, exc: BaseException, retry: int) -> float:
        """Seconds before retry ``retry`` of a call that failed with ``exc``: the server's
        ``Retry-After`` (capped) if it sent one, else :meth:`backoff`."""
        hint = retry_after(exc)
        if hint is not None:
            return min(hint, self.retry_after_cap)
        return self.backoff(retry)


# ---------------------------------------------------------------------------- sleeping

_testing: list[float] | None = None


def set_testing(on: bool = True) -> None:
    """Make :func:`sleep` (every host's default) return at once, recording the waits asked
    for (see :func:`testing_waits`); ``set_testing(False)`` restores real sleeps."""
    global _testing
    _testing = [] if on else None


def testing_waits() -> list[float]:
    """The waits :func:`sleep` was asked for since :func:`set_testing` (empty when off)."""
    return list(_testing) if _testing is not None else []


@contextlib.contextmanager
def testing() -> Iterator[list[float]]:
    """:func:`set_testing` for a block; yields the list the waits are recorded in."""
    global _testing
    previous, _testing = _testing, []
    try:
        yield _testing
    finally:
        _testing = previous


async def sleep(seconds: float) -> None:
    """The default sleep of every host's retries (zero under :func:`set_testing`)."""
    recorded = _testing
    if recorded is not None:
        recorded.append(seconds)
        await anyio.lowlevel.checkpoint()  # cancellation and other tasks still get a turn
        return
    await anyio.sleep(seconds)


# ---------------------------------------------------------------------------- the loop


class Attempts:
    """The retries of one call under ``policy``.

    Use it in the call's ``except``: ``await attempts.failed(exc)`` re-raises ``exc`` when it
    is not retryable or no retry is left, else waits (``Retry-After`` or backoff, through
    ``sleep``) and returns the wait, and the caller tries again. ``on_retry(exc, n, wait)``
    is called before each wait (for a log line); ``n`` is the 1-based retry number. Without
    an ``on_retry``, each retry is one structured WARNING record on ``managedloop.retry``
    (:mod:`managedloop._log`), naming ``what``; so is giving up after the last retry.
    """

    __slots__ = ("_on_retry", "_retryable", "_sleep", "policy", "retries", "what")

    def __init__(
        self,
        policy: Policy,
        *,
        sleep: Sleep | None = None,
        retryable: Callable[[BaseException], bool] = retryable,
        on_retry: Callable[[BaseException, int, float], None] | None = None,
        what: str = "call",
    ) -> None:
        self.policy = policy
        self.what = what
        self.retries = 0
        """Retries made so far."""
        self._sleep = sleep
        self._retryable = retryable
        self._on_retry = on_retry

    async def failed(self, exc: BaseException) -> float:
        if not self._retryable(exc):
            raise exc
        if self.retries >= self.policy.retries:
            if self.retries:
                _logger.warning(
                    "%s failed after %d retries (%s); giving up",
                    self.what,
                    self.retries,
                    type(exc).__name__,
                    extra=fields("give_up", operation=self.what, retries=self.retries)
                    | _failure(exc),
                )
            raise exc
        wait = self.policy.wait(exc, self.retries)
        self.retries += 1
        if self._on_retry is not None:
            self._on_retry(exc, self.retries, wait)
        else:
            _logger.warning(
                "%s failed (%s); retry %d/%d in %.3gs",
                self.what,
                type(exc).__name__,
                self.retries,
                self.policy.retries,
                wait,
                extra=fields(
                    "retry",
                    operation=self.what,
                    attempt=self.retries,
                    max_retries=self.policy.retries,
                    wait_s=wait,
                )
                | _failure(exc),
            )
        await (self._sleep or sleep)(wait)
        return wait


_logger = logging.getLogger("managedloop.retry")


def _failure(exc: BaseException) -> dict[str, Any]:
    """The loggable facts of a failure: its type, code and HTTP status (never its text)."""
    context = getattr(exc, "context", None)
    status = context.get("status") if isinstance(context, Mapping) else None
    code = getattr(exc, "code", None)
    return {
        "error_type": type(exc).__name__,
        "code": code if isinstance(code, str) else None,
        "status": status if isinstance(status, int) else None,
    }
