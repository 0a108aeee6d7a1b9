"""Claude model ids the service serves.

The emulator answers a request naming any other id, retired or unknown (a typo such as
``claude-sonet-4-6``), as the service answers it: ``404 not_found_error`` with the message
``model: <id>``. The retired ids live with the tests (``tests/retired_models.py``), so that
no file users read or ship names one; ``tests/test_model_ids.py`` fails on any of them found
in ``src/``, ``examples/``, ``docs/`` or ``README.md``.

Source, as of 2026-12-02 (``reference/host-surface-2026-12.md`` §4): the ``Literal`` of
``anthropic.types.beta.BetaManagedAgentsModelParam`` in ``anthropic`` 2.16.0 (the ids the
Managed Agents API documents), with the statuses the Anthropic model pages give where they
give one. When Anthropic's models overview or model-deprecations page changes, a retired id
leaves :data:`CURRENT` for ``tests/retired_models.py`` with its date.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CURRENT",
    "ModelStatus",
    "model_problem",
    "models_in",
]

_SDK_LIST = "anthropic 2.16.0 types/beta/beta_managed_agents_model_param.py"


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelStatus:
    """A model id the service serves."""

    status: str
    """``active``, ``legacy`` (no more updates, no retirement date) or ``deprecated``
    (still served, retirement date set)."""
    source: str
    retires_on: dt.date | None = None


def _active(*ids: str) -> dict[str, ModelStatus]:
    return {i: ModelStatus(status="active", source=_SDK_LIST) for i in ids}


CURRENT: Mapping[str, ModelStatus] = {
    **_active(
        "claude-opus-5-5",
        "claude-sonnet-5-5",
        "claude-haiku-5-5",
        "claude-fable-5-2",
        "claude-fable-5-1",
        "claude-fable-5",
        "claude-sonnet-5",
        "claude-opus-5",
        "claude-opus-4-8",
        "claude-opus-4-7",
        "claude-opus-4-6",
        "claude-haiku-4-5",
        "claude-haiku-4-5-20251001",
    ),
    "claude-sonnet-4-6": ModelStatus(
        status="legacy",
        source="platform.claude.com docs, models: Claude Sonnet 4.6 overview (Legacy: "
        "still served, no retirement date; Claude Sonnet 5.5 recommended)",
    ),
    "claude-opus-4-5": ModelStatus(
        status="deprecated",
        source="anthropic 2.16.0 _data/deprecated_models.py",
        retires_on=dt.date(2027, 1, 22),
    ),
    "claude-opus-4-5-20251101": ModelStatus(
        status="deprecated",
        source="anthropic 2.16.0 _data/deprecated_models.py",
        retires_on=dt.date(2027, 1, 22),
    ),
}
"""Ids the service serves (a deprecated one until its date)."""


def model_problem(model: str, *, today: dt.date | None = None) -> str | None:
    """The service's ``not_found_error`` message for a model id it does not serve on
    ``today`` (default: the current UTC date): a retired, unknown or misspelled id, or a
    deprecated one past its retirement date. ``None`` for an id it serves."""
    status = CURRENT.get(model)
    if status is None:
        return f"model: {model}"
    day = today or dt.datetime.now(dt.UTC).date()
    if status.retires_on is not None and day >= status.retires_on:
        return f"model: {model}"
    return None


def _model_id(value: Any) -> Any:
    return value.get("id") if isinstance(value, Mapping) else value


def models_in(method: str, route: str, body: Any) -> Iterator[str]:
    """The model ids a request body names (agent create/update, session overrides, an
    enabled multiagent advisor)."""
    if method != "POST" or not isinstance(body, Mapping):
        return
    candidates: list[Any] = []
    if route in ("/v1/agents", "/v1/agents/{id}"):
        candidates.append(_model_id(body.get("model")))
        multiagent = body.get("multiagent")
        advisor = multiagent.get("advisor") if isinstance(multiagent, Mapping) else None
        if isinstance(advisor, Mapping):
            candidates.append(advisor.get("model"))
    elif route == "/v1/sessions":
        agent = body.get("agent")
        if isinstance(agent, Mapping) and agent.get("type") == "agent_with_overrides":
            candidates.append(_model_id(agent.get("model")))
    yield from (c for c in candidates if isinstance(c, str))
