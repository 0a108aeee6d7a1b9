"""The Claude model ids the service has retired, with the date and where that is written.

Kept with the tests, not in ``src/``: the emulator refuses every id that is not in
``managedloop.testing._claude.models.CURRENT``, so it needs no list of retired ones, and
this is the one file in the repository that may name them (``tests/test_model_ids.py``
scans everything users read for them).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Retired:
    """A model id the service no longer serves (requests naming it fail)."""

    retired_on: dt.date
    replacement: str
    source: str


RETIRED: Mapping[str, Retired] = {
    "claude-sonnet-4-5": Retired(
        retired_on=dt.date(2026, 11, 30),
        replacement="claude-sonnet-5-5",
        source="platform.claude.com docs, models: Claude Sonnet 4.5 overview (deprecated, "
        "retired on Anthropic-operated platforms on 2026-11-30)",
    ),
    "claude-sonnet-4-5-20250929": Retired(
        retired_on=dt.date(2026, 11, 30),
        replacement="claude-sonnet-5-5",
        source="platform.claude.com docs, models: Claude Sonnet 4.5 overview (the dated id "
        "of the claude-sonnet-4-5 alias)",
    ),
    "claude-mythos-preview": Retired(
        retired_on=dt.date(2026, 6, 30),
        replacement="claude-opus-5-5",
        source="anthropic 2.16.0 _data/deprecated_models.py (retirement 'June 30th, 2026')",
    ),
}
"""Ids the service has retired, with the date and where that is written."""
