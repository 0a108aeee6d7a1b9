"""The weather tools most host tests declare (DESIGN.md's example): one definition.

``from weather import get_weather, get_time`` (``tests/`` is on ``sys.path``, as for
``fakes``). A test whose tool must record its calls or answer otherwise declares its own.
"""

from __future__ import annotations

import managedloop as ml


@ml.tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


@ml.tool
def get_time(city: str) -> str:
    """Local time in a city."""
    return f"Noon in {city}"
