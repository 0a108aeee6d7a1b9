"""Frames delivered twice, and tool input that is not a JSON object, end to end (issue 7).

Frames carry no sequence number. Delivered twice, they used to corrupt the turn silently
(``'donedone'``, input ``{}``, the tool never ran). Now the block/message states only a
duplicate produces are refused with ``MalformedResponseError(code="duplicate_frame")``
(retried like any bad frame; the emulator serves the same turn again), and the rest (a
repeated delta inside an open block, which the model itself could have sent) never makes a
tool run with inputs it was not given. A ``null`` or invalid-JSON input is answered with an
error result naming the problem; the tool never runs.
"""

from __future__ import annotations

from typing import Any

import pytest

import managedloop as ml
from managedloop.testing import AgentCoreEmulator, AgentCoreFaults, call, say

from .conftest import make_provider

pytestmark = pytest.mark.anyio

ran: list[dict[str, Any]] = []


@ml.tool
def lookup(city: str = "nowhere") -> str:
    """Look a city up (every parameter optional: a {} input would run it with defaults)."""
    ran.append({"city": city})
    return f"found {city}"


AGENT = ml.AgentSpec(name="dups", tools=[lookup])
SCRIPT = [call("lookup", {"city": "Paris"}, text="Let me look that up."), say("Paris it is.")]
# The tool turn's frames, as the emulator sends them: messageStart, three text deltas, the
# text block's stop, the tool block's start, two input fragments, its stop, messageStop,
# metadata.
KINDS = [
    "messageStart",
    "text",
    "text",
    "text",
    "textStop",
    "toolStart",
    "fragment",
    "fragment",
    "toolStop",
    "messageStop",
    "metadata",
]
DETECTED = {"messageStart", "textStop", "toolStart", "toolStop", "messageStop"}


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


def _results_sent(emu: AgentCoreEmulator) -> list[dict[str, Any]]:
    return [
        block["toolResult"]
        for req in emu.operations("InvokeHarness")
        for message in req.body["messages"]
        for block in message["content"]
        if "toolResult" in block
    ]


async def test_the_emulator_turn_has_the_frames_this_file_assumes() -> None:
    async with AgentCoreEmulator(SCRIPT) as emu:
        with make_provider(emu) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="go")
    first_turn = result.events[: len(KINDS)]
    assert [next(iter(e)) for e in first_turn] == [
        "messageStart",
        *["contentBlockDelta"] * 3,
        "contentBlockStop",
        "contentBlockStart",
        *["contentBlockDelta"] * 2,
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    assert ran == [{"city": "Paris"}]


async def test_every_frame_twice_is_a_named_error_and_nothing_runs() -> None:
    faults = AgentCoreFaults(duplicate_every_frame=True, times=None)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with make_provider(emu) as provider, pytest.raises(ml.MalformedResponseError) as info:
            await ml.run(provider, agent=AGENT, prompt="go")
    assert info.value.code == "duplicate_frame"
    assert info.value.context["event_type"] == "messageStart"
    assert info.value.context["attempts"] == 3  # retried like any bad frame, then named
    assert ran == []
    assert info.value.partial_result is not None


@pytest.mark.parametrize("index", range(len(KINDS)), ids=lambda i: f"{i}-{KINDS[i]}")
async def test_any_single_frame_twice_never_runs_a_tool_wrongly(index: int) -> None:
    faults = AgentCoreFaults(duplicate_frame=index)  # the first invoke only
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with make_provider(emu) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="go")
    invokes = len(emu.operations("InvokeHarness"))
    kind = KINDS[index]
    assert result.text == "Paris it is."
    if kind in DETECTED:
        assert invokes == 3  # refused, retried once (same turn served again), then resumed
        assert ran == [{"city": "Paris"}]
    elif kind == "fragment":  # the input is now invalid JSON: an error result, no run
        assert invokes == 2
        assert ran == []
        (sent,) = _results_sent(emu)
        assert sent["status"] == "error"
        assert "not valid JSON" in sent["content"][0]["text"]
    else:  # a repeated text delta or metadata: indistinguishable from the model's own
        assert invokes == 2
        assert ran == [{"city": "Paris"}]


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("null", "null"),
        ('{"city": ', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
async def test_invalid_tool_input_is_an_error_result_and_the_tool_never_runs(
    raw: str, says: str
) -> None:
    faults = AgentCoreFaults(raw_tool_input=raw)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with make_provider(emu) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="go")
    assert ran == []  # never with its defaults
    assert result.text == "Paris it is."
    (sent,) = _results_sent(emu)
    assert sent["status"] == "error"
    assert says in sent["content"][0]["text"]
    assert result.custom_tool_uses[0].input_error is not None


async def test_a_call_id_reused_for_another_input_is_never_answered_with_the_old_result() -> None:
    # The hostile review of issue 7: the second call (Rome) under the first's id got
    # "found Paris" and never ran. It must not run (at most once per id) and must not be
    # answered with another call's result.
    script = [
        call("lookup", {"city": "Paris"}, id="t1"),
        call("lookup", {"city": "Rome"}, id="t1"),
        say("done"),
    ]
    async with AgentCoreEmulator(script) as emu:
        result = await ml.run(make_provider(emu), agent=AGENT, prompt="go")
    assert ran == [{"city": "Paris"}]
    first, second = _results_sent(emu)
    assert "found Paris" in str(first)
    assert "found Paris" not in str(second)
    assert "was not run" in str(second)
    assert result.text == "done"
