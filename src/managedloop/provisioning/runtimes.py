"""Declared runtimes: the bootstrap script and system-prompt block (reference §5.8).

An environment spec may declare ``runtimes=[Runtime(lang="python", version="3.12.7")]``.
The host image does not have them; the agent installs them once, on first need, by running
:func:`bootstrap_script` (mise). :class:`Bootstrap` carries the script and the
system-prompt block that tells the agent to do so; the environment handle's ``bootstrap``
is recomputed from the spec on every path (create, 409 recovery, store hit) and never
stored, so a store can never hand out a stale or tampered script.

Everything here is a pure function of the runtimes (deterministic text): the versions
were validated (``[0-9A-Za-z.+-]+``) before they reach the script.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from managedloop.provisioning.specs import Runtime

__all__ = [
    "MISE_HOSTS",
    "Bootstrap",
    "bootstrap_for",
    "bootstrap_script",
    "required_hosts",
    "system_prompt_block",
]

MISE_HOSTS = (
    "builds.hex.pm",
    "github.com",
    "mise-versions.jdx.dev",
    "mise.jdx.dev",
    "objects.githubusercontent.com",
    "repo.hex.pm",
)
"""Hosts the mise installer and its downloads reach (merged into a limited allow-list)."""

_PATH = 'export PATH="$HOME/.local/bin:$HOME/.local/share/mise/shims:$PATH"'
_LOCALE = "export LC_ALL=C.UTF-8 LANG=C.UTF-8"
_MARKER = "# mise activate-managedloop"


@dataclass(frozen=True, kw_only=True, slots=True)
class Bootstrap:
    """What installs an environment's declared runtimes."""

    script: str
    """A bash script, idempotent, to run once before the first command needing a runtime."""
    instructions: str
    """A system-prompt block telling the agent to run ``script`` exactly once."""


def _specs(runtimes: Sequence[Runtime]) -> list[str]:
    """``mise use`` targets: erlang first, then elixir (pinned to erlang's OTP major when
    both are declared), then the rest in declared order."""
    erlang = [r for r in runtimes if r.lang == "erlang"]
    elixir = [r for r in runtimes if r.lang == "elixir"]
    others = [r for r in runtimes if r.lang not in ("erlang", "elixir")]
    out = [f"erlang@{r.version}" for r in erlang]
    otp = erlang[0].version.split(".", 1)[0] if erlang else None
    out += [f"elixir@{r.version}-otp-{otp}" if otp else f"elixir@{r.version}" for r in elixir]
    out += [f"{r.lang}@{r.version}" for r in others]
    return out


def bootstrap_script(runtimes: Sequence[Runtime]) -> str:
    """The install script (deterministic)."""
    lines = [
        "#!/usr/bin/env bash",
        "set -euo pipefail",
        _LOCALE,
        "command -v mise >/dev/null 2>&1 || curl -fsSL https://mise.jdx.dev/install.sh | sh",
        _PATH,
        *(f"mise use --global {spec}" for spec in _specs(runtimes)),
        "mise install",
        f"if ! grep -q '{_MARKER}' ~/.bashrc 2>/dev/null; then",
        f"  {{ echo '{_MARKER}'; echo '{_PATH}'; echo '{_LOCALE}'; }} >> ~/.bashrc",
        "fi",
    ]
    return "\n".join(lines) + "\n"


def system_prompt_block(runtimes: Sequence[Runtime]) -> str:
    """The ``## Runtime bootstrap`` block for the agent's system prompt (deterministic)."""
    names = ", ".join(f"{r.lang} {r.version}" for r in runtimes)
    return (
        "## Runtime bootstrap\n\n"
        f"This environment declares these runtimes: {names}. They are NOT preinstalled. "
        "Before the first command that needs one of them, run the script below EXACTLY ONCE "
        "via bash (it is idempotent: running it again is harmless, but unnecessary).\n\n"
        f"```bash\n{bootstrap_script(runtimes)}```\n"
    )


def required_hosts(runtimes: Sequence[Runtime]) -> list[str]:
    """Hosts the script reaches (sorted, deduplicated); ``[]`` with no runtimes."""
    return sorted(set(MISE_HOSTS)) if any(r.via == "mise" for r in runtimes) else []


def bootstrap_for(runtimes: Sequence[Runtime]) -> Bootstrap | None:
    """The :class:`Bootstrap` of ``runtimes``, or ``None`` when none are declared."""
    if not runtimes:
        return None
    return Bootstrap(script=bootstrap_script(runtimes), instructions=system_prompt_block(runtimes))
