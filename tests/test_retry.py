"""The one retry policy (``managedloop._retry``): classification, waits, the loop, and the
table of each host's deliberate differences, run row by row through the hosts' real code.

No test here reads the wall clock: waits are recorded by an injected ``sleep`` or by
``_retry.testing()``, HTTP-dates are parsed against an injected ``now``, and the jitter's
random draw is injected where an exact value is asserted.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

import managedloop as ml
from managedloop import _retry
from managedloop._retry import JITTER, Attempts, Policy, Situation, classify
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.testing import ChatEmulator, ChatFaults, ClaudeEmulator, say
from managedloop.testing.agentcore import AgentCoreEmulator, AgentCoreFaults

NOW = 1_700_000_000.0
INVALID_500 = (
    "{\"error\": {\"message\": \"[{'type': 'string_type', 'loc': ('body', 'messages', 1,"
    " 'content'), 'msg': 'Input should be a valid string', 'input': None}]\","
    ' "type": "internal_server_error"}}'
)  # llama.cpp's server answering a null content with HTTP 500


def status(code: int | None, **context: Any) -> ml.APIStatusError:
    kind = ml.AuthenticationError if code in (401, 403) else ml.APIStatusError
    return kind(f"HTTP {code}", status=code, **context)


# ---------------------------------------------------------------------------- classification


@pytest.mark.parametrize(
    ("error", "situation"),
    [
        (ml.TransportError("reset"), Situation.TRANSPORT),
        (ml.TransportError("idle", code="stream_idle_timeout"), Situation.TRANSPORT),
        (ml.MalformedResponseError("crc", code="bad_frame"), Situation.DAMAGED),
        (
            ml.MalformedResponseError("not json", code="malformed_chat_response"),
            Situation.MALFORMED,
        ),
        (status(408), Situation.THROTTLED),
        (status(429), Situation.THROTTLED),
        (status(500), Situation.SERVER),
        (status(529), Situation.SERVER),
        (status(500, body=INVALID_500), Situation.INVALID_REQUEST),
        (
            status(500, body={"error": {"type": "invalid_request_error", "message": "bad"}}),
            Situation.INVALID_REQUEST,
        ),
        (status(400, error_code="ValidationException"), Situation.INVALID_REQUEST),
        (status(503, invalid_request=True), Situation.INVALID_REQUEST),
        (ml.ProviderError("in-stream", invalid_request=True), Situation.INVALID_REQUEST),
        (status(502, body='{"error": {"code": "validation_error"}}'), Situation.INVALID_REQUEST),
        (status(503, body="upstream connect error"), Situation.SERVER),
        (status(400), Situation.CLIENT),
        (status(404), Situation.CLIENT),
        (status(409), Situation.CLIENT),
        (status(424), Situation.CLIENT),
        (status(401), Situation.AUTH),
        (ml.AuthenticationError("bearer file unreadable"), Situation.AUTH),
        (status(None), Situation.NO_STATUS),
        (ml.HostStreamError("exception frame"), Situation.HOST),
        (ml.ProviderError("odd"), Situation.OTHER),
        (ValueError("not ours"), Situation.OTHER),
    ],
)
def test_classification(error: BaseException, situation: Situation) -> None:
    assert classify(error) is situation
    assert _retry.retryable(error) is (situation in _retry.RETRIED)


def _host_classifiers() -> dict[str, Callable[[Any], bool]]:
    from managedloop.providers.agentcore._errors import retryable as agentcore
    from managedloop.providers.claude._connection import _retryable as claude
    from managedloop.providers.local import is_transient as local

    return {"local": local, "claude": claude, "agentcore": agentcore}


@pytest.mark.parametrize(
    "error",
    [
        status(408),  # AgentCore did not retry it
        status(None),  # Claude retried it
        ml.MalformedResponseError("no", code="malformed_chat_response"),  # AgentCore retried it
        ml.MalformedResponseError("crc", code="bad_frame"),
        status(500, body=INVALID_500),  # every host retried it
        status(429),
        status(503),
        status(424),
        status(403),
        ml.TransportError("reset"),
        ml.HostStreamError("frame"),
    ],
    ids=repr,
)
def test_every_host_classifies_alike(error: ml.ProviderError) -> None:
    verdicts = {host: fn(error) for host, fn in _host_classifiers().items()}
    assert verdicts == dict.fromkeys(verdicts, _retry.retryable(error))


def test_a_body_that_json_cannot_write_is_still_scanned() -> None:
    body: dict[str, Any] = {"message": "Input should be a valid string"}
    body["self"] = body  # a cycle: json refuses, str() still shows the message
    assert classify(status(500, body=body)) is Situation.INVALID_REQUEST


# ---------------------------------------------------------------------------- Retry-After


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3", 3.0),
        (" 0.5 ", 0.5),
        ("-4", 0.0),
        (b"7", 7.0),
        (12, 12.0),
        (2.5, 2.5),
        (email.utils.formatdate(NOW + 10, usegmt=True), 10.0),
        (email.utils.formatdate(NOW - 10, usegmt=True), 0.0),  # a date past: go now
        ("Wed, 21 Oct 2015 07:28:00 -0000", 0.0),
        (None, None),
        ("", None),
        ("soon", None),
        ("nan", None),
        ("inf", None),
        ("-inf", None),
        (float("nan"), None),
        (True, None),
        ("9" * 100, None),
        ("Wed, 99 Foo 2015 07:28:00 GMT", None),
        (object(), None),
    ],
)
def test_parse_retry_after(value: object, seconds: float | None) -> None:
    assert _retry.parse_retry_after(value, now=NOW) == seconds


@pytest.mark.fuzz
@given(st.text(max_size=80), st.floats(allow_nan=True, allow_infinity=True))
def test_parse_retry_after_never_raises(value: str, now: float) -> None:
    seconds = _retry.parse_retry_after(value, now=now)
    assert seconds is None or (math.isfinite(seconds) and seconds >= 0)


@pytest.mark.fuzz
@given(st.binary(max_size=80) | st.from_regex(r"[A-Za-z]{3}, \d{1,2} [A-Za-z]{3} \d{1,5} .*"))
def test_parse_retry_after_never_raises_on_dates_or_bytes(value: bytes | str) -> None:
    seconds = _retry.parse_retry_after(value, now=NOW)
    assert seconds is None or (math.isfinite(seconds) and seconds >= 0)


class _Response:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


def _raised_from(cause: BaseException) -> ml.APIStatusError:
    try:
        raise status(429) from cause
    except ml.APIStatusError as exc:
        return exc


def test_retry_after_is_found_where_each_host_keeps_it() -> None:
    assert _retry.retry_after(status(429, retry_after=4.0)) == 4.0  # Local: the context
    sdk = RuntimeError("anthropic-style")
    sdk.response = _Response({"retry-after": "6"})  # type: ignore[attr-defined]
    assert _retry.retry_after(_raised_from(sdk)) == 6.0  # the anthropic SDK's httpx response
    boto = RuntimeError("botocore-style")
    boto.response = {"ResponseMetadata": {"HTTPHeaders": {"retry-after": "8"}}}  # type: ignore[attr-defined]
    assert _retry.retry_after(_raised_from(boto)) == 8.0  # a botocore ClientError
    odd = RuntimeError("no headers")
    odd.response = {"ResponseMetadata": "?"}  # type: ignore[attr-defined]
    assert _retry.retry_after(_raised_from(odd)) is None
    assert _retry.retry_after(status(429)) is None


# ---------------------------------------------------------------------------- backoff


def test_backoff_is_capped_exponential_with_equal_jitter() -> None:
    policy = Policy(retries=5, base=0.5, cap=3.0)
    assert [policy.ceiling(n) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert policy.backoff(1, rand=lambda: 0.0) == 1.0
    assert policy.backoff(1, rand=lambda: 1.0) == 1.0 * (1 - JITTER)
    assert policy.ceiling(10**9) == 3.0  # no overflow, however many retries
    assert Policy(retries=1, base=0.0, cap=3.0).backoff(4) == 0.0


def test_retry_after_wins_over_backoff_and_is_capped() -> None:
    policy = Policy(retries=3, base=1.0, cap=4.0, retry_after_cap=30.0)
    assert policy.wait(status(429, retry_after="12"), 0) == 12.0
    assert policy.wait(status(429, retry_after="900"), 0) == 30.0
    assert policy.wait(status(429, retry_after="garbage"), 2) <= 4.0  # ignored: backoff


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("base", math.nan),
        ("cap", math.inf),
        ("retry_after_cap", -1.0),
        ("jitter", 1.5),
        ("retries", -1),
        ("retries", True),
        ("base", "1"),
    ],
)
def test_a_bad_policy_is_refused(field: str, value: object) -> None:
    options: dict[str, Any] = {"retries": 1, "base": 1.0, "cap": 2.0, field: value}
    with pytest.raises(ml.InvalidOptionsError) as info:
        Policy(**options)
    assert info.value.context["option"] == field


@pytest.mark.fuzz
@given(
    base=st.floats(min_value=0, max_value=1e308),
    cap=st.floats(min_value=0, max_value=1e308),
    jitter=st.floats(min_value=0, max_value=1),
    retry=st.integers(min_value=-5, max_value=10**6),
    draw=st.floats(allow_nan=False, allow_infinity=True),
)
def test_backoff_never_exceeds_its_cap_and_is_never_negative(
    base: float, cap: float, jitter: float, retry: int, draw: float
) -> None:
    policy = Policy(retries=1, base=base, cap=cap, jitter=jitter)
    wait = policy.backoff(retry, rand=lambda: draw)
    assert 0.0 <= wait <= cap
    assert policy.ceiling(retry) * (1 - jitter) - 1e-9 * cap <= wait <= policy.ceiling(retry)


@pytest.mark.fuzz
@given(st.text(max_size=40), st.floats(min_value=0, max_value=1e6))
def test_a_wait_never_exceeds_the_retry_after_cap(header: str, cap: float) -> None:
    policy = Policy(retries=1, base=1.0, cap=2.0, retry_after_cap=cap)
    wait = policy.wait(status(429, retry_after=header), 0)
    assert 0.0 <= wait <= max(cap, 2.0)


# ---------------------------------------------------------------------------- the loop


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.mark.anyio
async def test_attempts_wait_between_retries_then_reraise() -> None:
    sleeps = Sleeps()
    seen: list[tuple[int, float]] = []
    attempts = Attempts(
        Policy(retries=2, base=1.0, cap=10.0, jitter=0.0),
        sleep=sleeps,
        on_retry=lambda exc, n, wait: seen.append((n, wait)),
    )
    error = status(503)
    assert await attempts.failed(error) == 1.0
    assert await attempts.failed(status(429, retry_after="7")) == 7.0
    with pytest.raises(ml.APIStatusError) as info:
        await attempts.failed(error)  # no retry left
    assert info.value is error
    assert sleeps.waits == [1.0, 7.0]
    assert seen == [(1, 1.0), (2, 7.0)]
    with pytest.raises(ml.AuthenticationError):
        await Attempts(Policy(retries=5, base=1.0, cap=1.0), sleep=sleeps).failed(status(401))
    assert sleeps.waits == [1.0, 7.0]  # never waited for a failure that is not retried


@pytest.mark.anyio
async def test_testing_mode_zeroes_the_default_sleep_and_records_the_waits() -> None:
    with _retry.testing() as waits:
        await _retry.sleep(3600.0)  # returns at once
        assert waits == [3600.0]
    _retry.set_testing(True)
    try:
        await _retry.sleep(5.0)
        assert _retry.testing_waits() == [5.0]
    finally:
        _retry.set_testing(False)
    assert _retry.testing_waits() == []


# ------------------------------------------------------- the table of host differences


@dataclass(frozen=True)
class Row:
    host: str
    situation: str
    retried: bool
    wait: float | tuple[float, float] | None
    """An exact wait (a Retry-After), the bounds of a jittered backoff, or None (no retry)."""


BACKOFF_1S = (1.0 * (1 - JITTER), 1.0)  # the first backoff of a 1 s base

TABLE = [
    # Local: max_retries=1, retry_backoff=1, max_retry_after=30; the chat function fails once.
    Row("local", "transport", True, BACKOFF_1S),
    Row("local", "408", True, BACKOFF_1S),
    Row("local", "429 retry-after 2.5", True, 2.5),
    Row("local", "429 retry-after 900 (capped)", True, 30.0),
    Row("local", "500", True, BACKOFF_1S),
    Row("local", "500 invalid request body", False, None),
    Row("local", "malformed answer", False, None),
    Row("local", "400", False, None),
    Row("local", "401", False, None),
    Row("local", "no status", False, None),
    Row("local", "streamed answer dropped part-way", True, BACKOFF_1S),
    # AgentCore: invoke_retries=1, retry_backoff=1; the first InvokeHarness fails.
    Row("agentcore", "transport (dropped after events: RESTART)", True, BACKOFF_1S),
    Row("agentcore", "damaged frame", True, BACKOFF_1S),
    Row("agentcore", "no messageStop", True, BACKOFF_1S),
    Row("agentcore", "408", True, BACKOFF_1S),
    Row("agentcore", "429", True, BACKOFF_1S),
    Row("agentcore", "500", True, BACKOFF_1S),
    Row("agentcore", "400 ValidationException", False, None),
    Row("agentcore", "403", False, None),
    Row("agentcore", "424", False, None),
    Row("agentcore", "exception frame", False, None),
    # Claude: reconnect_backoff=1; the first event send (or the first stream) fails.
    Row("claude", "send 429 retry-after 2 (resent as is)", True, 2.0),
    Row("claude", "send 408 (history-checked)", True, BACKOFF_1S),
    Row("claude", "send 500 (history-checked)", True, BACKOFF_1S),
    Row("claude", "send 500 invalid request body", False, None),
    Row("claude", "send 400", False, None),
    Row("claude", "stream dropped (reconnect)", True, BACKOFF_1S),
]


@pytest.fixture
def isolated_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """botocore must not read this machine's AWS settings (the emulator's are explicit)."""
    empty = tmp_path / "aws-empty"
    empty.touch()
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))


@pytest.mark.anyio
@pytest.mark.parametrize("row", TABLE, ids=lambda r: f"{r.host}: {r.situation}")
async def test_host_retry_table(row: Row, isolated_aws: None) -> None:
    """Each row of the ``_retry`` docstring's host table, through that host's real code."""
    probe = {"local": _probe_local, "agentcore": _probe_agentcore, "claude": _probe_claude}
    calls, waits, error = await probe[row.host](row.situation)
    assert calls == (2 if row.retried else 1), calls
    assert (error is None) is row.retried, error  # a retried blip does not fail the run
    if row.wait is None:
        assert waits == []
    elif isinstance(row.wait, tuple):
        low, high = row.wait
        assert len(waits) == 1
        assert low <= waits[0] <= high, waits
    else:
        assert waits == [row.wait]


def _ok() -> dict[str, Any]:
    return {
        "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]
    }


_LOCAL_FAILURES: dict[str, Callable[[], BaseException]] = {
    "transport": lambda: ml.TransportError("reset", cause="ConnectionResetError"),
    "408": lambda: status(408),
    "429 retry-after 2.5": lambda: status(429, retry_after=2.5),
    "429 retry-after 900 (capped)": lambda: status(429, retry_after=900.0),
    "500": lambda: status(500, body="oops"),
    "500 invalid request body": lambda: status(500, body=INVALID_500),
    "malformed answer": lambda: ml.MalformedResponseError("no", code="malformed_chat_response"),
    "400": lambda: status(400),
    "401": lambda: status(401),
    "no status": lambda: status(None),
}


Probe = tuple[int, list[float], ml.ProviderError | None]  # attempts, waits, the run's error


async def _run(provider: Any, **kwargs: Any) -> ml.ProviderError | None:
    try:
        await ml.run(provider, **kwargs)
    except ml.ProviderError as exc:
        return exc
    return None


async def _probe_local(situation: str) -> Probe:
    sleeps = Sleeps()
    options: dict[str, Any] = {
        "max_retries": 1,
        "retry_backoff": 1.0,
        "max_retry_after": 30.0,
        "sleep": sleeps,
    }
    if situation == "streamed answer dropped part-way":
        with ChatEmulator([say("a long enough answer")], faults=ChatFaults(drop=1)) as emu:
            provider = Local(
                model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True, **options
            )
            async with provider:
                error = await _run(provider, agent=ml.AgentSpec(), prompt="q")
            return len(emu.received), sleeps.waits, error
    failure = _LOCAL_FAILURES[situation]()
    calls: list[object] = []

    async def chat(request: object) -> dict[str, Any]:
        calls.append(request)
        if len(calls) == 1:
            raise failure
        return _ok()

    error = await _run(Local(model="m", chat=chat, **options), agent=ml.AgentSpec(), prompt="q")
    assert error is None or error is failure
    return len(calls), sleeps.waits, error


_AGENTCORE_FAULTS = {
    "transport (dropped after events: RESTART)": AgentCoreFaults(drop_after=2),
    "damaged frame": AgentCoreFaults(corrupt_frame=2),
    "no messageStop": AgentCoreFaults(truncate_after=2),
    "408": AgentCoreFaults(status=408),
    "429": AgentCoreFaults(status=429),
    "500": AgentCoreFaults(status=500),
    "400 ValidationException": AgentCoreFaults(status=400),
    "403": AgentCoreFaults(status=403),
    "424": AgentCoreFaults(status=424),
    "exception frame": AgentCoreFaults(exception_at=2),
}


async def _probe_agentcore(situation: str) -> Probe:
    faults = _AGENTCORE_FAULTS[situation]
    async with AgentCoreEmulator(faults=faults) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn, invoke_retries=1, retry_backoff=1.0, **emu.client_kwargs
        )
        with _retry.testing() as waits, provider:
            error = await _run(provider, agent=ml.AgentSpec(), prompt="go")
        return len(emu.operations("InvokeHarness")), waits, error


def _first_send(raise_: Callable[[], web.HTTPException]) -> Callable[[str, str], None]:
    """A ``before_request`` hook failing the first event send with ``raise_()``."""
    fired: list[bool] = []

    def hook(method: str, path: str) -> None:
        if method == "POST" and path.endswith("/events") and not fired:
            fired.append(True)
            raise raise_()

    return hook


def _json_error(status_code: int, body: str) -> Callable[[], web.HTTPException]:
    def make() -> web.HTTPException:
        error = web.HTTPException(text=body, content_type="application/json")
        error.set_status(status_code)
        return error

    return make


async def _probe_claude(situation: str) -> Probe:
    sleeps = Sleeps()
    with ClaudeEmulator() as emu:
        f = emu.faults
        if situation.startswith("send 429"):
            f.rate_limit, f.retry_after, f.fault_path, f.fault_method = 1, "2", "/events", "POST"
        elif situation.startswith(("send 408", "send 500 (")):
            f.server_errors, f.fault_path, f.fault_method = 1, "/events", "POST"
            f.server_error_status = 408 if "408" in situation else 500
        elif situation == "send 500 invalid request body":
            f.before_request = _first_send(_json_error(500, INVALID_500))
        elif situation == "send 400":
            f.before_request = _first_send(_json_error(400, '{"type": "error"}'))
        else:
            f.drop_stream_after = (1,)
        async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as client:
            spec = ml.AgentSpec(name="retry", system_prompt="Answer.")
            handle = await ml.provision(ClaudeManagedAgents(client=client), spec)
            provider = ClaudeManagedAgents(
                client=client,
                agent=handle,
                environment=handle,
                reconnect_backoff=1.0,
                sleep=sleeps,
            )
            error = await _run(provider, agent=spec, prompt="hello")
        if situation.startswith("stream"):
            streams = [r for r in emu.requests if r.path.endswith("/events/stream")]
            return len(streams), sleeps.waits, error
        sends = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/events")]
        return len(sends), sleeps.waits, error


def test_the_table_covers_every_host_and_the_docstring_names_them() -> None:
    doc = _retry.__doc__ or ""
    assert {row.host for row in TABLE} == {"local", "agentcore", "claude"}
    for host in ("Local", "AgentCore", "Claude"):
        assert host in doc
