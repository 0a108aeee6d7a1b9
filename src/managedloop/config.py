"""Configuration: one resolver, one precedence, every key in one table.

Every configuration or credential value the library reads goes through :func:`resolve`, in
one fixed order: an explicit argument, then :func:`configure` (process-wide), then an
environment variable, then a default. Resolution is *presence-based*: the first layer that
has the key wins even when its value is ``None`` or ``False`` (this is how
``api_key=None`` selects a bearer-token file although ``ANTHROPIC_API_KEY`` is set).

Secrets are wrapped in :class:`Secret`, whose ``repr`` and ``str`` never show the value.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from managedloop.errors import ConfigError, InvalidOptionsError

__all__ = ["KEYS", "MISSING", "ConfigKey", "Secret", "configure", "resolve", "resolve_required"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final[Any] = _Missing()
"""Sentinel meaning "not given" (distinct from ``None``, which is a value)."""


class Secret:
    """A secret string that never shows itself in a ``repr``, ``str``, log or traceback."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret value. Call it only where the value leaves for the wire."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> Any:
        raise TypeError("a Secret cannot be pickled")


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigKey:
    name: str
    env: tuple[str, ...] = ()
    default: Any = None
    secret: bool = False
    required: bool = False


KEYS: Final[Mapping[str, ConfigKey]] = {
    k.name: k
    for k in (
        # Claude Managed Agents
        ConfigKey(name="api_key", env=("ANTHROPIC_API_KEY",), secret=True),
        ConfigKey(name="bearer_token_file", env=("ANTHROPIC_BEARER_TOKEN_FILE",)),
        ConfigKey(name="base_url", default="https://api.anthropic.com"),
        ConfigKey(name="beta", default="managed-agents-2026-04-01"),
        ConfigKey(name="files_beta", default="files-api-2025-04-14"),
        ConfigKey(name="anthropic_version", default="2023-06-01"),
        ConfigKey(name="receive_timeout", default=60.0),  # seconds
        ConfigKey(name="profile", default="anthropic"),
        # Bedrock AgentCore (None defers to botocore's credential chain)
        ConfigKey(name="aws_access_key_id", env=("AWS_ACCESS_KEY_ID",)),
        ConfigKey(name="aws_secret_access_key", env=("AWS_SECRET_ACCESS_KEY",), secret=True),
        ConfigKey(name="aws_region", env=("AWS_REGION", "AWS_DEFAULT_REGION"), default="us-east-1"),
        ConfigKey(name="aws_session_token", env=("AWS_SESSION_TOKEN",), secret=True),
        # Local (any OpenAI-compatible endpoint)
        ConfigKey(name="openai_base_url", env=("OPENAI_BASE_URL",)),
        ConfigKey(name="openai_api_key", env=("OPENAI_API_KEY",), secret=True),
        # The session record every run and live session writes to (a Store or an
        # ml.SessionRecord; managedloop.session.record), unless given record=
        ConfigKey(name="record"),
    )
}

_lock = threading.Lock()
_configured: dict[str, Any] = {}


def configure(**values: Any) -> None:
    """Set process-wide values (the second layer). ``configure()`` with no values resets.

    Unknown keys raise :class:`InvalidOptionsError` at once.
    """
    unknown = sorted(set(values) - set(KEYS))
    if unknown:
        raise InvalidOptionsError(
            f"unknown configuration key(s): {', '.join(unknown)}; known: {', '.join(KEYS)}",
            option=unknown[0],
        )
    # Secret keys are held wrapped, so no dump of this module's globals (a debugger, a
    # crash reporter's locals) shows them.
    held = {
        name: Secret(value) if KEYS[name].secret and isinstance(value, str) else value
        for name, value in values.items()
    }
    with _lock:
        if not values:
            _configured.clear()
        _configured.update(held)


def resolve(name: str, explicit: Any = MISSING) -> Any:
    """Resolve one key: explicit, then :func:`configure`, then the environment, then default.

    Secret keys come back wrapped in :class:`Secret` (``None`` stays ``None``).
    """
    key = KEYS[name]
    if explicit is not MISSING:
        value = explicit
    elif name in _configured:
        value = _configured[name]
    else:
        value = key.default
        for env in key.env:  # the first variable set wins, even when it is ""
            found = _getenv(env)
            if found is not None:
                value = found
                break
    if key.secret and isinstance(value, str):
        return Secret(value)
    return value


_ENCODED: dict[str, Any] = {}  # variable name -> os.environ's key for it


def _getenv(name: str) -> str | None:
    """``os.environ.get(name)``, without the two ``KeyError`` s ``os._Environ`` raises
    and catches for every unset name (~8k instructions; Local resolves two per instance).

    Reads CPython's ``os._Environ`` mapping (``_data``, keyed by ``encodekey(name)``),
    which ``os.environ[...] = ...``, ``putenv`` through it and ``monkeypatch.setenv`` all
    keep current; anything else standing in for ``os.environ`` is asked the usual way.
    """
    environ: Any = os.environ
    try:
        key = _ENCODED.get(name)
        if key is None:
            key = _ENCODED[name] = environ.encodekey(name)
        raw = environ._data.get(key)
    except AttributeError:  # pragma: no cover - an os.environ that is not os._Environ
        return os.environ.get(name)
    value: str | None = None if raw is None else environ.decodevalue(raw)
    return value


def resolve_required(name: str, explicit: Any = MISSING) -> Any:
    """Like :func:`resolve`, but a missing (``None``) value raises :class:`ConfigError`."""
    value = resolve(name, explicit)
    if value is None:
        key = KEYS[name]
        env = f", or env {' / '.join(key.env)}" if key.env else ""
        raise ConfigError(
            f"missing required configuration: set argument {name}=..., "
            f"managedloop.configure({name}=...){env}",
            key=name,
        )
    return value


def reveal(value: Secret | str | None) -> str | None:
    """The plain value of a possibly-wrapped secret (at the wire edge only)."""
    return value.reveal() if isinstance(value, Secret) else value
