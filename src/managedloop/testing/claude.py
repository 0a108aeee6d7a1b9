"""A loopback emulator of the Claude Managed Agents API, for offline tests and demos.

>>> import anthropic
>>> from managedloop.testing import ClaudeEmulator, call, say
>>> with ClaudeEmulator([call("get_weather", {"city": "Paris"}), say("Sunny.")]) as emu:
...     client = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key)
...     emu.base_url.startswith("http://127.0.0.1:")
True

The server is a real aiohttp server on ``127.0.0.1`` (a free port) in a background thread,
so the client under test is the production ``anthropic`` SDK over a real socket. With no
script, its agent calls each declared custom tool once, then answers with the results.
Faults (:class:`ClaudeFaults`): dropped streams, stale idles, tool uses referenced from an
earlier batch, 429 with ``retry-after``, 5xx bursts, ambiguous send failures, slow
streams, session termination.
"""

from managedloop.testing._claude import (
    ClaudeEmulator,
    ClaudeFaults,
    RecordedRequest,
    credential_id,
)

__all__ = ["ClaudeEmulator", "ClaudeFaults", "RecordedRequest", "credential_id"]
