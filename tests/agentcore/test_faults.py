"""The fault matrix: every injected failure ends in the documented result or named error.

§9 lines covered: agent_core_test (transient error retried, truncated stream retried,
transport failure on every attempt surfaces verbatim, ``harness_stream_error`` never
retried, truncation surviving retries is ``early_termination``); client_stream_test (a turn
longer than idle_timeout succeeds while chunks flow; a stall fails with
``stream_idle_timeout``; non-2xx surfaces the status); client_test "invoke not retried on a
500 by botocore" (our own bounded retry instead); session_timeout_cancel for this host (a run
timeout closes the in-flight stream).

Invariants checked on every run: each tool use the model made was answered exactly once,
no resume carries a duplicate tool id, and ``SessionResult.events`` holds each event of
the successful attempts exactly once (live delivery may repeat across retries).
"""

from __future__ import annotations

import math
import time
from typing import Any

import anyio
import pytest

import managedloop as ml
from managedloop.testing import AgentCoreEmulator, AgentCoreFaults, Fail, call, say

from .conftest import make_provider

pytestmark = pytest.mark.anyio


@ml.tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"found {city}"


AGENT = ml.AgentSpec(name="lookup", tools=[lookup])
SCRIPT = [call("lookup", {"city": "Paris"}, text="Let me look that up."), say("Paris it is.")]


async def _disconnected(emu: AgentCoreEmulator) -> None:
    """Until the emulator has seen a client go away (the per-test timeout is the guard)."""
    while emu.disconnects == 0:
        await anyio.sleep(0.01)


class Recorder:
    def __init__(self) -> None:
        self.live: list[Any] = []

    async def handle_tool_call(self, name: str, input: dict[str, Any], info: ml.SessionInfo) -> str:
        return lookup(**input)

    def handle_event(self, event: Any, info: ml.SessionInfo) -> None:
        if "type" not in event:
            self.live.append(event)


def check_resumes(emu: AgentCoreEmulator, result: ml.SessionResult) -> None:
    answered: list[str] = []
    for req in emu.operations("InvokeHarness"):
        messages = req.body["messages"]
        if messages[0]["role"] != "assistant":
            continue
        ids = [b["toolUse"]["toolUseId"] for b in messages[0]["content"] if "toolUse" in b]
        rids = [b["toolResult"]["toolUseId"] for b in messages[1]["content"]]
        assert len(ids) == len(set(ids)), "duplicate tool id in a resume"
        assert ids == rids
        answered += ids
    made = [u.id for u in result.custom_tool_uses]
    assert set(made) <= set(answered), "a tool use was never answered"
    assert len(made) == len(set(made))


async def baseline() -> list[int]:
    """Frames per invoke of the clean two-turn script."""
    async with AgentCoreEmulator(SCRIPT) as emu:
        with make_provider(emu) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="go")
    stops = [i for i, e in enumerate(result.events) if "metadata" in e]
    return [stops[0] + 1, stops[1] - stops[0]]


FRAMES = anyio.run(baseline)  # [frames of the tool turn, frames of the answer turn]


@pytest.mark.parametrize("invoke", [0, 1], ids=["tool-turn", "resume-turn"])
@pytest.mark.parametrize("mid_frame", [False, True], ids=["frame-boundary", "mid-frame"])
async def test_truncation_at_every_frame_index_recovers(invoke: int, mid_frame: bool) -> None:
    for index in range(FRAMES[invoke]):
        faults = AgentCoreFaults(truncate_after=index, cut_mid_frame=mid_frame, skip=invoke)
        async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
            rec = Recorder()
            with make_provider(emu) as provider:
                result = await ml.run(provider, agent=AGENT, prompt="go", handler=rec)
            assert result.terminal is ml.Terminal.END_TURN, index
            assert result.text == "Paris it is."
            check_resumes(emu, result)
            kinds = [next(iter(e)) for e in result.events]
            # messageStop seen before the cut: the turn is complete without a retry
            got_stop = index > FRAMES[invoke] - 2 or (mid_frame and index > FRAMES[invoke] - 1)
            invokes = len(emu.operations("InvokeHarness"))
            assert invokes == (2 if got_stop else 3), (index, invokes)
            assert kinds.count("messageStop") == 2
            assert kinds.count("messageStart") == 2  # the aborted attempt was discarded
            assert len(rec.live) >= len(result.events)  # live is at-least-once


async def test_truncation_on_every_attempt_is_early_termination() -> None:
    faults = AgentCoreFaults(truncate_after=3, times=None)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with make_provider(emu) as provider, pytest.raises(ml.TransportError) as info:
            await ml.run(provider, agent=AGENT, prompt="go")
    err = info.value
    assert err.code == "early_termination"
    assert err.context["attempts"] == 3
    assert len(emu.operations("InvokeHarness")) == 3
    assert err.partial_result is not None
    assert [next(iter(e)) for e in err.partial_result.events][:1] == ["messageStart"]


async def test_invoke_retries_zero_means_one_attempt() -> None:
    faults = AgentCoreFaults(truncate_after=1, times=None)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with (
            make_provider(emu, invoke_retries=0) as provider,
            pytest.raises(ml.TransportError, match="truncated"),
        ):
            await ml.run(provider, agent=AGENT, prompt="go")
    assert len(emu.operations("InvokeHarness")) == 1


@pytest.mark.parametrize("index", range(5))
async def test_a_corrupted_frame_is_retried(index: int) -> None:
    async with AgentCoreEmulator(SCRIPT, faults=AgentCoreFaults(corrupt_frame=index)) as emu:
        with make_provider(emu) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="go")
    assert result.text == "Paris it is."
    check_resumes(emu, result)
    assert len(emu.operations("InvokeHarness")) == 3


async def test_corruption_on_every_attempt_is_bad_frame() -> None:
    faults = AgentCoreFaults(corrupt_frame=2, times=None)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with make_provider(emu) as provider, pytest.raises(ml.MalformedResponseError) as info:
            await ml.run(provider, agent=AGENT, prompt="go")
    assert info.value.code == "bad_frame"
    assert len(emu.operations("InvokeHarness")) == 3


@pytest.mark.parametrize(
    "kind", ["runtimeClientError", "validationException", "internalServerException"]
)
async def test_an_exception_frame_is_a_named_error_never_retried(kind: str) -> None:
    faults = AgentCoreFaults(exception_at=4, exception_type=kind, exception_message="duplicate Ids")
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with make_provider(emu) as provider, pytest.raises(ml.HostStreamError) as info:
            await ml.run(provider, agent=AGENT, prompt="go")
    err = info.value
    assert err.code == "harness_stream_error"
    assert (err.context["type"], err.context["message"]) == (kind, "duplicate Ids")
    assert len(emu.operations("InvokeHarness")) == 1
    assert err.partial_result is not None
    assert len(err.partial_result.events) == 4


async def test_a_scripted_failure_is_an_exception_frame() -> None:
    async with AgentCoreEmulator([Fail(message="boom", kind="runtimeClientError")]) as emu:
        with make_provider(emu) as provider, pytest.raises(ml.HostStreamError) as info:
            await ml.run(provider, agent=AGENT, prompt="go")
    assert info.value.context["type"] == "runtimeClientError"


async def test_a_stall_longer_than_idle_timeout_is_retried() -> None:
    # The stall never ends by itself: only abandoning it at idle_timeout finishes the run.
    faults = AgentCoreFaults(stall_at=3, stall_seconds=math.inf)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        rec = Recorder()
        with make_provider(emu, idle_timeout=0.3) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="go", handler=rec)
        await _disconnected(emu)
    assert result.text == "Paris it is."
    check_resumes(emu, result)
    assert emu.disconnects == 1  # the stalled attempt was abandoned, not waited out
    assert len(rec.live) == len(result.events) + 3  # the aborted attempt's 3 events, live only


async def test_events_before_a_stall_reach_the_handler_during_the_stall() -> None:
    # Events are decoded and delivered as their bytes arrive, not when the turn ends: the
    # frames sent before a pause must reach the handler while the pause lasts.
    # The stall lasts until the handler, seeing frame 2, releases it: were events held
    # until the turn ended, the handler would never see frame 2 and the run would hang.
    faults = AgentCoreFaults(stall_at=3, stall_seconds=math.inf)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        seen: list[Any] = []
        released_at: list[int] = []

        class Releasing(Recorder):
            def handle_event(self, event: Any, info: ml.SessionInfo) -> None:
                if "type" not in event:
                    seen.append(event)
                    if len(seen) == 3:
                        released_at.append(len(seen))
                        emu.release_stalls()

        with make_provider(emu, idle_timeout=60) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="go", handler=Releasing())
    assert result.text == "Paris it is."
    assert released_at == [3]  # frames 0-2 were delivered while frame 3 was held back
    assert len(emu.operations("InvokeHarness")) == 2  # a pause shorter than idle: no retry


async def test_a_stall_on_every_attempt_is_stream_idle_timeout() -> None:
    faults = AgentCoreFaults(stall_at=1, stall_seconds=math.inf, times=None)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with (
            make_provider(emu, idle_timeout=0.2, invoke_retries=1) as provider,
            pytest.raises(ml.TransportError) as info,
        ):
            await ml.run(provider, agent=AGENT, prompt="go")
    assert info.value.code == "stream_idle_timeout"
    assert info.value.context["attempts"] == 2


async def test_a_slow_but_live_turn_outlasts_idle_timeout() -> None:
    # idle_timeout is a socket read timeout (aiohttp's), so this one is on real time: the
    # total is guaranteed by the server's sleeps (lower bound, never flaky); each gap is a
    # tenth of idle_timeout.
    faults = AgentCoreFaults(chunk_delay=0.1, times=None)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with make_provider(emu, idle_timeout=1.0) as provider:
            started = time.monotonic()
            result = await ml.run(provider, agent=AGENT, prompt="go")
            elapsed = time.monotonic() - started
    assert result.text == "Paris it is."
    assert sum(FRAMES) * 0.1 > 1.0
    assert elapsed > 1.0  # longer than idle_timeout in total
    assert len(emu.operations("InvokeHarness")) == 2  # never retried


async def test_a_dropped_connection_is_retried_with_restart() -> None:
    async with AgentCoreEmulator(SCRIPT, faults=AgentCoreFaults(drop_after=5)) as emu:
        rec = Recorder()
        with make_provider(emu) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="go", handler=rec)
    assert result.text == "Paris it is."
    check_resumes(emu, result)
    assert len(result.events) == sum(FRAMES)
    assert len(rec.live) == sum(FRAMES) + 5


async def test_a_connection_that_keeps_dropping_is_named_a_connection_failure() -> None:
    faults = AgentCoreFaults(drop_after=2, times=None)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with make_provider(emu) as provider, pytest.raises(ml.TransportError) as info:
            await ml.run(provider, agent=AGENT, prompt="go")
    assert info.value.code == "transport_error"
    assert "connection failed" in str(info.value)
    assert info.value.context["attempts"] == 3


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_throttling_and_5xx_before_the_stream_are_retried(status: int) -> None:
    async with AgentCoreEmulator(SCRIPT, faults=AgentCoreFaults(status=status, times=2)) as emu:
        with make_provider(emu) as provider:
            result = await ml.run(provider, agent=AGENT, prompt="go")
    assert result.text == "Paris it is."
    assert len(emu.operations("InvokeHarness")) == 4  # 2 refused + 2 turns: one HTTP try each


async def test_throttling_that_persists_surfaces_the_status() -> None:
    async with AgentCoreEmulator(SCRIPT, faults=AgentCoreFaults(status=429, times=None)) as emu:
        with make_provider(emu) as provider, pytest.raises(ml.APIStatusError) as info:
            await ml.run(provider, agent=AGENT, prompt="go")
    assert info.value.status == 429
    assert info.value.context["error_code"] == "ThrottlingException"
    assert len(emu.operations("InvokeHarness")) == 3  # botocore added no attempts of its own


@pytest.mark.parametrize("status", [400, 424, 409])
async def test_client_errors_are_not_retried(status: int) -> None:
    async with AgentCoreEmulator(SCRIPT, faults=AgentCoreFaults(status=status, times=None)) as emu:
        with make_provider(emu) as provider, pytest.raises(ml.APIStatusError) as info:
            await ml.run(provider, agent=AGENT, prompt="go")
    assert info.value.status == status
    assert len(emu.operations("InvokeHarness")) == 1


async def test_a_run_timeout_closes_the_in_flight_stream() -> None:
    # The stall never ends by itself: only the run timeout can end this run.
    faults = AgentCoreFaults(stall_at=2, stall_seconds=math.inf, times=None)

    class Seen:
        def __init__(self) -> None:
            self.events: list[Any] = []

        def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> str:
            return "unused"

        def handle_event(self, event: Any, info: Any) -> None:
            if not str(event.get("type", "")).startswith("managedloop."):  # not a text delta
                self.events.append(event)

    seen = Seen()
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with make_provider(emu) as provider:
            with pytest.raises(ml.SessionTimeoutError) as info:
                await ml.run(provider, agent=AGENT, prompt="go", timeout=0.3, handler=seen)
            assert info.value.partial_result is not None
            # Every event that arrived before the timeout is kept (how many arrived in 0.3 s
            # depends on the machine's load, so the count is not pinned: at most the two
            # frames before the stall).
            assert info.value.partial_result.events == seen.events
            assert len(seen.events) <= 2
            await _disconnected(emu)
    assert emu.disconnects == 1  # the server saw its client go away


async def test_closing_a_live_session_mid_turn_closes_the_stream() -> None:
    faults = AgentCoreFaults(stall_at=2, stall_seconds=math.inf, times=None)
    async with AgentCoreEmulator(SCRIPT, faults=faults) as emu:
        with make_provider(emu) as provider:
            async with ml.start(provider, agent=AGENT, prompt="go") as session:
                async for _event in session.events():  # the turn is in flight: frames 0-1
                    break
            await _disconnected(emu)
    assert emu.disconnects == 1


async def test_a_refused_connection_is_a_transport_error_after_retries() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    emu = AgentCoreEmulator()
    kwargs = {**emu.client_kwargs, "endpoint_url": f"http://127.0.0.1:{port}"}
    from managedloop.providers import BedrockAgentCore

    with (
        BedrockAgentCore(harness_arn=emu.harness_arn, retry_backoff=0, **kwargs) as provider,
        pytest.raises(ml.TransportError) as info,
    ):
        await ml.run(provider, agent=ml.AgentSpec(), prompt="go")
    assert info.value.code == "transport_error"
    assert info.value.context["attempts"] == 3
