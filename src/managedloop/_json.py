"""JSON encoding on the hot path: ``JSONEncoder(**options).encode`` without its per-call
Python frames.

``json.JSONEncoder.encode`` runs two Python functions per call (``encode`` and
``iterencode``, which also defines a closure) before it reaches the C encoder that does the
work; for the small objects of a tool call (arguments, a history message) that wrapper is
most of the cost, and so is building the C encoder (``json.encoder.c_make_encoder``), which
``iterencode`` does on every call. :func:`encoder` returns a function that builds that C
encoder once, with the arguments ``iterencode`` gives it but no circular-reference check,
and calls it directly; a value on which it fails with ``RecursionError`` (a cycle, or
nesting deeper than the interpreter allows) is encoded again by a C encoder with the check
(a fresh ``markers`` dict, as ``iterencode`` builds), so the output and the errors are
those of ``JSONEncoder(**options).encode``: byte for byte the same text, ``ValueError`` for
a cycle, ``TypeError`` (or ``default``'s answer) for an unknown type.

The C encoder's calling convention is CPython's, not a documented API, so :func:`encoder`
checks it at import on a sample and falls back to ``JSONEncoder(**options).encode`` when
it is missing (another interpreter) or behaves differently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from json import encoder as _encoder
from typing import Any

__all__ = ["encoder"]

# Values that exercise what the options change: key order, separators, non-ASCII text,
# floats (repr, and the non-finite spellings), nesting, and the default hook.
_SAMPLE: Any = {
    "b": [1, 2.5, -0.0, 1e16, True, None, "é\u2028\ud800"],
    "a": {"z": [], "y": {}, "x": '\x00\n"'},
    "n": [math.inf, -math.inf],
}


def encoder(
    *,
    ensure_ascii: bool = True,
    sort_keys: bool = False,
    separators: tuple[str, str] = (",", ":"),
    default: Callable[[Any], Any] | None = None,
) -> Callable[[Any], str]:
    """A function equal to ``json.JSONEncoder(**options).encode``, faster (no indent)."""
    slow = json.JSONEncoder(
        ensure_ascii=ensure_ascii, sort_keys=sort_keys, separators=separators, default=default
    )
    make = getattr(_encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - an interpreter without the C accelerator
        return slow.encode
    string = _encoder.encode_basestring_ascii if ensure_ascii else _encoder.encode_basestring
    item_separator, key_separator = separators
    hook = slow.default

    # Built once, without the circular-reference check (``markers=None``): the C encoder
    # keeps no other state between calls. A cycle then recurses until RecursionError, and
    # that (rare) error is answered by the checking encoder, which raises what
    # JSONEncoder.encode raises for the value: "Circular reference detected", or
    # RecursionError again for a value nested too deep to encode at all.
    fast = make(None, hook, string, None, key_separator, item_separator, sort_keys, False, True)

    def checked(value: Any) -> str:
        chunks = make({}, hook, string, None, key_separator, item_separator, sort_keys, False, True)
        return "".join(chunks(value, 0))

    def encode(value: Any) -> str:
        if isinstance(value, str):  # as JSONEncoder.encode: a bare string is quoted directly
            return string(value)
        try:
            return "".join(fast(value, 0))
        except RecursionError:
            return checked(value)

    try:
        same = encode(_SAMPLE) == slow.encode(_SAMPLE)
    except Exception:  # pragma: no cover - a C encoder with another calling convention
        same = False
    return encode if same else slow.encode  # pragma: no branch
