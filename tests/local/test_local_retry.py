"""Transient-error retry (reference §9 ``local/retry_test``, §4.5), unit and over HTTP.

Deliberate change: HTTP 429 is transient here (the reference never retried it), and a
server's ``Retry-After`` (seconds or an HTTP date, capped by ``max_retry_after``) replaces
the exponential backoff for that retry. The backoff is jittered (``managedloop._retry``):
each wait lies in ``[c / 2, c]`` for the reference's ``c = retry_backoff * 2**n``.
"""

from __future__ import annotations

import email.utils
import time

import pytest
from tests_local_helpers import RecordingChat, completion

import managedloop as ml
from managedloop._retry import JITTER
from managedloop.providers.local import Local, is_transient, set_testing
from managedloop.providers.local._http import parse_retry_after
from managedloop.testing import ChatEmulator, ChatFaults, Fail, ScriptedChatModel, call, say

pytestmark = pytest.mark.anyio

SPEC = ml.AgentSpec()


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def backoffs(delays: list[float], ceilings: list[float]) -> bool:
    """Whether each wait is its exponential ceiling with the equal jitter taken off."""
    return len(delays) == len(ceilings) and all(
        c * (1 - JITTER) <= d <= c for d, c in zip(delays, ceilings, strict=True)
    )


def status(code: int, retry_after: float | None = None) -> ml.APIStatusError:
    kind = ml.AuthenticationError if code == 401 else ml.APIStatusError
    return kind(f"HTTP {code}", status=code, retry_after=retry_after)


async def test_transient_errors_retry_with_exponential_backoff_then_succeed() -> None:
    sleeps = Sleeps()
    chat = RecordingChat([status(503), status(503), completion("ok")])
    provider = Local(model="m", chat=chat, retry_backoff=0.1, sleep=sleeps)
    result = await ml.run(provider, agent=SPEC, prompt="q")
    assert result.text == "ok"
    assert backoffs(sleeps.delays, [0.1, 0.2])
    assert len(chat.requests) == 3


async def test_exhausted_retries_surface_the_last_error() -> None:
    sleeps = Sleeps()
    chat = RecordingChat([status(500), status(502), status(503), status(504)])
    provider = Local(model="m", chat=chat, max_retries=3, retry_backoff=1, sleep=sleeps)
    with pytest.raises(ml.APIStatusError) as info:
        await ml.run(provider, agent=SPEC, prompt="q")
    assert info.value.status == 504
    assert backoffs(sleeps.delays, [1, 2, 4])
    assert info.value.partial_result is not None


async def test_non_transient_errors_are_not_retried() -> None:
    sleeps = Sleeps()
    chat = RecordingChat([status(401), completion("never")])
    provider = Local(model="m", chat=chat, sleep=sleeps)
    with pytest.raises(ml.AuthenticationError):
        await ml.run(provider, agent=SPEC, prompt="q")
    assert sleeps.delays == []
    assert len(chat.requests) == 1


async def test_retry_after_wins_over_backoff_and_is_capped() -> None:
    sleeps = Sleeps()
    chat = RecordingChat([status(429, 2.5), status(429, 900.0), completion("ok")])
    provider = Local(model="m", chat=chat, sleep=sleeps, max_retry_after=30)
    await ml.run(provider, agent=SPEC, prompt="q")
    assert sleeps.delays == [2.5, 30.0]


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (status(408), True),
        (status(429), True),
        (status(500), True),
        (status(503), True),
        (status(401), False),
        (status(404), False),
        (status(400), False),
        (ml.TransportError("timeout", cause="TimeoutError"), True),
        (ml.TransportError("closed", cause="stream_dropped"), True),
        (ml.MalformedResponseError("bad", code="malformed_chat_response"), False),
        (ValueError("arbitrary"), False),
    ],
)
def test_transient_classification(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


def test_parse_retry_after() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    now = time.time()
    date = email.utils.formatdate(now + 10, usegmt=True)
    parsed = parse_retry_after(date, now=now)
    assert parsed is not None
    assert 8.5 <= parsed <= 10.5


async def test_set_testing_zeroes_the_default_backoff() -> None:
    model = ScriptedChatModel([Fail(message="flaky")])
    provider = Local(model="m", chat=model, retry_backoff=30, max_retries=2)
    set_testing(True)
    try:
        start = time.monotonic()
        with pytest.raises(ml.APIStatusError) as info:
            await ml.run(provider, agent=SPEC, prompt="q")
        assert time.monotonic() - start < 30  # one real backoff alone would be 30 s
    finally:
        set_testing(False)
    assert info.value.status == 500
    assert len(model.requests) == 3  # the failing step was asked three times


@pytest.mark.parametrize("stream", [False, True])
def test_http_429_and_503_with_retry_after_then_success(stream: bool) -> None:
    sleeps = Sleeps()
    faults = ChatFaults(statuses=(429, 503), retry_after="1")
    with ChatEmulator([say("fine")], faults=faults) as emu:
        provider = Local(
            model="m", base_url=emu.base_url, api_key=emu.api_key, sleep=sleeps, stream=stream
        )
        result = ml.run_sync(provider, agent=SPEC, prompt="q")
    assert result.text == "fine"
    assert sleeps.delays == [1.0, 1.0]
    assert len(emu.received) == 3


@pytest.mark.parametrize("stream", [False, True])
def test_dropped_connection_is_retried(stream: bool) -> None:
    sleeps = Sleeps()
    script = [call("lookup", {"q": "a"}), say("a long enough answer to be cut mid-stream")]

    @ml.tool
    def lookup(q: str) -> str:
        """Look up."""
        return q

    with ChatEmulator(script, faults=ChatFaults(drop=2), chunk_size=4) as emu:
        provider = Local(
            model="m", base_url=emu.base_url, api_key=emu.api_key, sleep=sleeps, stream=stream
        )
        result = ml.run_sync(provider, agent=ml.AgentSpec(tools=[lookup]), prompt="q")
    assert result.text == "a long enough answer to be cut mid-stream"
    assert backoffs(sleeps.delays, [1.0, 2.0])
    assert len(emu.received) == 4


def test_slow_response_times_out_and_is_retried() -> None:
    sleeps = Sleeps()
    with ChatEmulator([say("late")], faults=ChatFaults(slow=1, delay=1.0)) as emu:
        provider = Local(
            model="m", base_url=emu.base_url, api_key=emu.api_key, sleep=sleeps, timeout=0.2
        )
        result = ml.run_sync(provider, agent=SPEC, prompt="q")
    assert result.text == "late"
    assert len(sleeps.delays) == 1


def test_http_401_is_an_authentication_error_without_retry() -> None:
    sleeps = Sleeps()
    with ChatEmulator([say("x")]) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key="sk-wrong-key", sleep=sleeps)
        with pytest.raises(ml.AuthenticationError) as info:
            ml.run_sync(provider, agent=SPEC, prompt="q")
    assert info.value.status == 401
    assert info.value.code == "authentication_error"
    assert sleeps.delays == []
    assert "sk-wrong-key" not in str(info.value)
    assert "sk-wrong-key" not in repr(info.value.context)


def test_http_404_is_a_status_error_with_body() -> None:
    with ChatEmulator([say("x")], faults=ChatFaults(statuses=(404,))) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
        with pytest.raises(ml.APIStatusError) as info:
            ml.run_sync(provider, agent=SPEC, prompt="q")
    assert info.value.status == 404
    assert "injected HTTP 404" in info.value.context["body"]
    assert len(emu.received) == 1
