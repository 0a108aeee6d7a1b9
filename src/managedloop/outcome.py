"""A graded-session goal: :class:`Outcome` (Claude Managed Agents only).

A kickoff *input*, checked when it is made, so it raises :class:`InvalidOptionsError`; that
is why it lives here and not among the results: ``errors`` carries a
:class:`~managedloop.SessionResult` (``partial_result``), so ``results`` must not need
``errors`` back. Frozen, keyword-only and slotted like the result types, and JSON
round-trippable the same way (``to_dict`` / ``from_dict``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from managedloop.errors import InvalidOptionsError

__all__ = ["Outcome"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """A graded-session goal (Claude Managed Agents only)."""

    description: str
    rubric: str
    max_iterations: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.description, str) or not isinstance(self.rubric, str):
            raise InvalidOptionsError(
                "Outcome needs string description and rubric", option="outcome"
            )
        if self.max_iterations is not None and (
            isinstance(self.max_iterations, bool)
            or not isinstance(self.max_iterations, int)
            or self.max_iterations < 1
        ):
            raise InvalidOptionsError(
                "Outcome.max_iterations must be a positive integer", option="outcome"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
