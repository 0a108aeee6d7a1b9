"""Host-side names: ``<base>_<digest8>`` under each host's name policy (reference §5.4).

The name *is* the content address: a live resource called ``support_bot_3f9a1b2c`` is the
spec whose digest starts ``3f9a1b2c`` under base ``support_bot``. Prune reads names back
(strictly ``<base>_<8 lowercase hex>``), so a name must always contain its whole base.

**Chosen rule: a base that cannot fit is refused, never shortened.** A base longer than
``max_length - 9`` (the ``_`` and the 8-hex digest) raises
``InvalidOptionsError(code="agent_base_too_long")`` (``environment_base_too_long`` for an
environment) before any request. Shortening with a hash would keep names unique, but then
``prune_agents(provider, base)`` could never recognise the shortened versions as versions
of ``base``. The digest is never truncated.

A policy also sanitises: on AgentCore every character outside ``[a-zA-Z0-9_]`` becomes
``_`` and a base not starting with a letter gets an ``a`` prefix (the harness name pattern
is ``[a-zA-Z][a-zA-Z0-9_]{0,39}``); on Claude names are kept byte for byte (1-256
characters). The same sanitisation is applied when prune reads names back, so
``billing-support`` finds its ``billing_support_<d8>`` harnesses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from managedloop.errors import InvalidOptionsError

__all__ = ["AGENTCORE_HARNESS", "CLAUDE", "NamePolicy", "compose", "compose_base", "version_of"]

_DIGEST8 = re.compile(r"[0-9a-f]{8}")


@dataclass(frozen=True, kw_only=True, slots=True)
class NamePolicy:
    """What a host accepts as a resource name."""

    host: str
    max_length: int
    """In characters (both hosts count characters)."""
    alnum_underscore: bool = False
    """Replace every character outside ``[a-zA-Z0-9_]`` with ``_``."""
    leading_letter: bool = False
    """Prefix ``a`` when the first character is not an ASCII letter."""

    def host_base(self, base: str) -> str:
        """``base`` as it appears in host-side names."""
        out = re.sub(r"[^A-Za-z0-9_]", "_", base) if self.alnum_underscore else base
        if self.leading_letter and not (out[:1].isascii() and out[:1].isalpha()):
            out = "a" + out
        return out

    @property
    def max_base(self) -> int:
        return self.max_length - 9


AGENTCORE_HARNESS = NamePolicy(
    host="agentcore", max_length=40, alnum_underscore=True, leading_letter=True
)
CLAUDE = NamePolicy(host="claude", max_length=256)


def compose(base: str, digest: str, policy: NamePolicy, *, kind: str = "agent") -> str:
    """``<host base>_<digest[:8]>``, or ``<kind>_base_too_long`` / ``invalid_name``."""
    return f"{_host_base(base, policy, kind, room=policy.max_base)}_{digest[:8]}"


def compose_base(base: str, policy: NamePolicy, *, kind: str = "agent") -> str:
    """``<host base>`` alone: the name of a resource that keeps its versions itself (an
    AgentCore harness under ``ensure_agent(..., update=True)``); the same checks as
    :func:`compose`, with the whole ``max_length`` to fit in."""
    return _host_base(base, policy, kind, room=policy.max_length)


def _host_base(base: str, policy: NamePolicy, kind: str, *, room: int) -> str:
    if not isinstance(base, str) or not base:
        raise InvalidOptionsError(
            f"a {kind} base name must be a non-empty string, got {base!r}",
            code="invalid_name",
            option="name",
        )
    if any(ord(c) < 0x20 or c == "\x7f" for c in base):
        raise InvalidOptionsError(
            f"a {kind} base name has a control character: {base!r}",
            code="invalid_name",
            option="name",
        )
    host_base = policy.host_base(base)
    if len(host_base) > room:
        suffix = " before the _<digest8> suffix" if room < policy.max_length else ""
        raise InvalidOptionsError(
            f"{kind} base {base!r} is {len(host_base)} characters on {policy.host}; at most "
            f"{room} fit{suffix} (names are never shortened, so prune can always read them "
            "back)",
            code=f"{kind}_base_too_long",
            option="name",
            base=base,
            max_base=room,
        )
    return host_base


def version_of(name: str, base: str, policy: NamePolicy) -> str | None:
    """The digest8 when ``name`` is exactly ``<host base>_<8 lowercase hex>``, else ``None``
    (so base ``data`` never matches ``data_analysis_…`` and ``d_d_aaaaaaaa`` is not a
    version of ``d``)."""
    prefix = policy.host_base(base) + "_"
    if not isinstance(name, str) or not name.startswith(prefix):
        return None
    rest = name[len(prefix) :]
    return rest if _DIGEST8.fullmatch(rest) else None
