"""Client-held history and reattach (reference §9 ``local_transcript_test``, §4.7).

Deliberate change: a seeded transcript whose last assistant message has unanswered tool
calls (a session stopped at ``max_turns`` while tools were wanted) reattaches with those
calls pending, so the loop runs them first: Chat Completions rejects a user message after
unanswered tool calls.
"""

from __future__ import annotations

import pytest
from tests_local_helpers import RecordingChat, completion, open_conn

import managedloop as ml
from managedloop.providers.local import Local
from managedloop.testing import ScriptedChatModel, call, say

pytestmark = pytest.mark.anyio


@ml.tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


SPEC = ml.AgentSpec(system_prompt="sys", tools=[lookup])


def test_fresh_run_returns_a_transcript_with_the_prompt() -> None:
    model = ScriptedChatModel([say("hi")])
    result = ml.run_sync(Local(model="m", chat=model), agent=SPEC, prompt="hello")
    assert result.transcript == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
    ]


async def test_empty_history_is_fresh() -> None:
    conn = await open_conn(Local(model="m", chat=RecordingChat([])), SPEC, transcript=[])
    assert not conn.resumed
    assert conn.transcript() == [{"role": "system", "content": "sys"}]


async def test_non_empty_history_is_seeded_verbatim() -> None:
    prior = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    conn = await open_conn(Local(model="m", chat=RecordingChat([])), SPEC, transcript=prior)
    assert conn.resumed
    assert conn.transcript() == prior
    assert conn.pending_tool_uses == []


def test_reattach_round_trip() -> None:
    model = ScriptedChatModel([call("lookup", {"q": "x"}), say("one"), say("two")])
    provider = Local(model="m", chat=model)
    t1 = ml.run_sync(provider, agent=SPEC, prompt="first")
    assert t1.transcript is not None
    again = ml.run_sync(provider, agent=SPEC, prompt="second", resume=t1)
    assert again.text == "two"
    assert again.session_id == t1.session_id
    assert len(model.requests[2].messages) == len(t1.transcript) + 1
    assert again.transcript is not None
    assert again.transcript[: len(t1.transcript)] == t1.transcript
    assert {"role": "user", "content": "second"} in again.transcript


def test_transcript_is_a_copy() -> None:
    model = ScriptedChatModel([say("a")])
    result = ml.run_sync(Local(model="m", chat=model), agent=SPEC, prompt="q")
    assert result.transcript is not None
    before = list(result.transcript)
    again = ml.run_sync(
        Local(model="m", chat=ScriptedChatModel([say("b")] * 2)),
        agent=SPEC,
        prompt="r",
        resume=result,
    )
    assert result.transcript == before
    assert again.transcript is not None
    assert len(again.transcript) == len(before) + 2


def test_unanswered_tool_calls_are_pending_on_reattach() -> None:
    model = ScriptedChatModel([call("lookup", {"q": "x"}), call("lookup", {"q": "y"})])
    stopped = ml.run_sync(Local(model="m", chat=model), agent=SPEC, prompt="go", max_turns=1)
    assert stopped.reason == "max_turns"
    # the step index is the number of assistant messages: the resumed script is at step 1
    finish = ScriptedChatModel([say("unused"), say("done")])
    # a resumed session with pending calls runs them; the new prompt is not injected
    result = ml.run_sync(
        Local(model="m", chat=finish), agent=SPEC, prompt="ignored", resume=stopped
    )
    assert result.text == "done"
    assert [r.text for r in finish.requests[0].tool_results] == ["found x"]
    assert finish.requests[0].user_text is None


async def test_transcript_covers_directives() -> None:
    chat = RecordingChat([completion("x")])
    result = await ml.run(Local(model="m", chat=chat), agent=SPEC, prompt="q", max_turns=1)
    assert result.transcript is not None
    assert [m["role"] for m in result.transcript] == ["system", "user", "user", "assistant"]
    assert result.transcript[2]["content"].startswith("FINAL TURN")
