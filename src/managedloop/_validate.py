"""Option checks shared by the loop and every host: one wording, one error, one code.

Every check raises :class:`~managedloop.errors.InvalidOptionsError` (code ``invalid_opts``
unless told otherwise) with ``option=<name>`` in its context, *before* any request is sent.
Rules the hosts rely on:

* a duration is a real, finite number of seconds (``bool``, NaN and infinity are refused:
  ``anyio.fail_after(nan)`` never fires, and ``inf`` silently means "no bound");
* a pattern check matches the *whole* string (:func:`re.fullmatch`): ``re.match`` with
  ``$`` accepts a trailing newline, which then reaches a URL or a header;
* unknown keywords are refused with the list of accepted ones, instead of a bare
  ``TypeError`` (or, worse, an error at run time).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from managedloop.errors import InvalidOptionsError

__all__ = ["duration", "integer", "matches", "no_unknown_keywords", "text"]


def duration(
    name: str, value: Any, *, allow_none: bool = True, allow_zero: bool = False
) -> float | None:
    """``value`` as seconds: a finite number > 0 (``>= 0`` with ``allow_zero``), or ``None``."""
    if value is None:
        if allow_none:
            return None
        raise InvalidOptionsError(f"{name} is required (seconds)", option=name)
    # A tuple, not ``int | float``: a union in an expression is built on every call.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidOptionsError(
            f"{name} must be a finite number of seconds, got {value!r}", option=name
        )
    if value < 0 or (value == 0 and not allow_zero):
        kind = ">= 0" if allow_zero else "> 0"
        raise InvalidOptionsError(f"{name} must be {kind} seconds, got {value!r}", option=name)
    return float(value)


def integer(name: str, value: Any, *, minimum: int = 0, allow_none: bool = False) -> int | None:
    """``value`` as an ``int >= minimum`` (``bool`` is refused), or ``None`` if allowed."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidOptionsError(
            f"{name} must be an integer >= {minimum}, got {value!r}", option=name
        )
    return value


def text(name: str, value: Any, *, allow_empty: bool = False) -> str:
    """``value`` as a string (non-empty unless ``allow_empty``)."""
    if not isinstance(value, str) or (not value and not allow_empty):
        raise InvalidOptionsError(f"{name} must be a non-empty string, got {value!r}", option=name)
    return value


def matches(
    name: str, value: Any, pattern: re.Pattern[str], what: str, *, code: str | None = None
) -> str:
    """``value`` if it is a string that ``pattern`` matches *entirely*, else a named error.

    ``what`` says in words what was expected (e.g. "an AgentCore harness ARN").
    """
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        raise InvalidOptionsError(f"{name} must be {what}, got {value!r}", code=code, option=name)
    return value


def no_unknown_keywords(owner: str, given: Mapping[str, Any], accepted: Iterable[str]) -> None:
    """Refuse keywords ``owner`` does not take, naming the accepted ones."""
    if given:
        names = ", ".join(sorted(given))
        raise InvalidOptionsError(
            f"{owner} got unknown keyword(s): {names}; accepted: {', '.join(sorted(accepted))}",
            option=sorted(given)[0],
        )
