"""Issue 21 item 4: ``event_deltas=True`` streams a message's text as it is written.

The stream is opened with ``event_deltas[]=agent.message``; the emulator sends
``event_start`` / ``event_delta`` previews (only to such streams; never in the history),
which the SDK's own types and ``accumulate_managed_agents_event`` accept; the connection
turns each delta into a text delta and the buffered ``agent.message`` adds only what the
previews missed, so the streamed text is the message's text exactly once.
"""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.lib.sessions import accumulate_managed_agents_event

import managedloop as ml
from managedloop.testing import ClaudeEmulator, say

from .conftest import WEATHER, provisioned

pytestmark = pytest.mark.anyio

TEXT = "Sunny in Paris all day."


class Texts:
    def __init__(self) -> None:
        self.deltas: list[str] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], info: ml.SessionInfo) -> Any:
        return "ok"

    def handle_event(self, event: dict[str, Any], info: ml.SessionInfo) -> None:
        if event.get("type") == "managedloop.text_delta":
            self.deltas.append(event["text"])


@pytest.mark.parametrize("deltas", [True, False])
async def test_text_streams_as_written_when_asked(
    emu: ClaudeEmulator, client: Any, deltas: bool
) -> None:
    emu.agent.script = [say(TEXT)]
    texts = Texts()
    provider = await provisioned(client, event_deltas=deltas)
    result = await ml.run(provider, agent=WEATHER, prompt="Weather?", handler=texts)
    assert result.text == TEXT
    assert "".join(texts.deltas) == TEXT  # exactly once, previews or not
    assert len(texts.deltas) == (5 if deltas else 1)  # word by word, or the whole message
    (stream,) = [r for r in emu.requests if r.path.endswith("/events/stream")]
    assert stream.query.get("event_deltas[]") == (["agent.message"] if deltas else None)
    kinds = {e["type"] for e in result.events}
    assert not kinds & {"event_start", "event_delta"}  # previews are not history


async def test_previews_meet_the_sdk(emu: ClaudeEmulator, client: Any) -> None:
    emu.agent.script = [say(TEXT)]
    agent = await client.beta.agents.create(name="a", model="claude-haiku-4-5")
    env = await client.beta.environments.create(name="e")
    session = await client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    stream = await client.beta.sessions.events.stream(session.id, event_deltas=["agent.message"])
    await client.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
    )
    snapshot = None
    texts: list[str] = []
    async with stream:
        async for event in stream:
            snapshot = accumulate_managed_agents_event(snapshot, event)
            if event.type == "event_delta" and snapshot is not None:
                texts.append(snapshot.content[0].text)  # type: ignore[union-attr]
            if event.type == "session.status_idle":
                break
    assert texts[-1] == TEXT  # the previews alone built the whole message
    assert snapshot is not None
    assert snapshot.content[0].text == TEXT  # type: ignore[union-attr]
    assert "event_delta" not in {e["type"] for e in emu.events(session.id)}


async def test_a_bad_delta_type_is_refused(emu: ClaudeEmulator, client: Any) -> None:
    agent = await client.beta.agents.create(name="a", model="claude-haiku-4-5")
    env = await client.beta.environments.create(name="e")
    session = await client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    with pytest.raises(Exception) as info:
        await client.beta.sessions.events.stream(session.id, event_deltas=["agent.tool_use"])  # type: ignore[list-item]
    assert getattr(info.value, "status_code", None) == 400
