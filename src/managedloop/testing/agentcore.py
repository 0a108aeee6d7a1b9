"""A loopback emulator of Bedrock AgentCore: the harness control plane and the data plane.

:class:`AgentCoreEmulator` is a real HTTP server on ``127.0.0.1`` (a free port, its own
thread and event loop) that speaks the AgentCore REST API as botocore sends it, so the
production client (botocore, SigV4, its event-stream decoder) is what gets exercised:

>>> import managedloop as ml
>>> from managedloop.providers import BedrockAgentCore
>>> from managedloop.testing import AgentCoreEmulator
>>> @ml.tool
... def get_weather(city: str) -> str:
...     '''Current weather for a city.'''
...     return f"Sunny in {city}"
>>> agent = ml.AgentSpec(name="weather", tools=[get_weather])
>>> with AgentCoreEmulator() as emu:
...     provider = BedrockAgentCore(harness_arn=emu.harness_arn, **emu.client_kwargs)
...     result = ml.run_sync(provider, agent=agent, prompt="Weather in Paris?")
>>> [use.name for use in result.custom_tool_uses]
['get_weather']

Both planes share one ``endpoint_url`` and are routed by path, exactly as botocore builds
them (``bedrock-agentcore-control``: ``/harnesses...``; ``bedrock-agentcore``:
``POST /harnesses/invoke`` and ``POST /runtimes/{arn}/commands``). Every request must carry
a valid SigV4 signature for the emulator's own random keys (``emu.client_kwargs``),
checked with botocore's signer; a bad one gets a 403.

Wire invariants reproduced (``agentcore-wire.md``):

* ``InvokeHarness`` answers ``200`` + ``application/vnd.amazon.eventstream``, one frame per
  HTTP chunk: ``messageStart``, text deltas (no ``contentBlockStart`` for text), each tool
  as ``contentBlockStart.toolUse`` + two string input fragments (``AgentCoreEmulator(
  tool_input_chunk=n)``: fragments of n characters) + ``contentBlockStop``,
  ``messageStop{stopReason}``, then ``metadata{usage, metrics}``;
* a resume must hold the assistant ``toolUse`` message and the user ``toolResult`` message
  with exactly the pending ids (no duplicates), else ``400 ValidationException`` with the
  service's texts; a new user text while tools are pending drops them;
* the runtime session id header is checked (33-100 chars, ``[a-zA-Z0-9][a-zA-Z0-9-_]*``);
* a per-invoke ``tools`` list replaces the harness's tools; ``qualifier`` picks an endpoint
  that must exist and be READY;
* harness and endpoint statuses progress over (configurable, fast) time:
  ``CREATING`` → ``READY`` (or the configured outcome), ``DELETING`` → gone; a same-name
  create is a ``409 ConflictException``; ``ListHarnesses`` pages with ``nextToken``.

A retried invoke whose previous attempt on the same session was cut short (truncated,
dropped, corrupted, stalled past the client) with the *same* body is served the same turn
again (same tool ids) rather than the next script step: the emulator models a harness that
re-runs the interrupted turn, so a script stays aligned under retries.

Shell commands (``InvokeAgentRuntimeCommand``) run, by default, as real ``/bin/sh``
commands **on this machine, as this user**, in a scratch directory per runtime session,
with every ``/mnt/<name>`` path rewritten into that directory (the session-storage mount).
The server only listens on loopback and only accepts requests signed with its per-instance
random keys. Pass ``commands=`` a function to script them instead, or ``None`` to refuse.

The frames are produced by :mod:`managedloop.testing._agentcore.eventstream` (botocore has
no encoder); every kind of frame is tested to decode with botocore.
"""

from managedloop.testing._agentcore import (
    ROUTES,
    AgentCoreEmulator,
    AgentCoreFaults,
    ManualClock,
    RecordedRequest,
)

__all__ = ["ROUTES", "AgentCoreEmulator", "AgentCoreFaults", "ManualClock", "RecordedRequest"]
