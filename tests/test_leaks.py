"""No secret leaks anywhere we can look (DESIGN.md "Secrets never leak"; issue 11 item 5).

Every host runs its scenarios -- a success, retries, faults, authentication failures (on
AgentCore the control plane, provisioning and the signed invoke; on Claude a wrong key, a
wrong or missing bearer file, a credential no header can carry) -- with distinctive fake
secrets: a Local API key and a password in a Local ``base_url``; a Claude API key and a
bearer token read from a file; an AWS access key id, secret access key and session token.
Everything observable is captured while they run:

* every log record of every logger at DEBUG (botocore's, aiohttp's and httpx's included):
  its message, its arguments, its ``extra`` fields and its formatted traceback;
* every telemetry event (measurements and metadata);
* every OpenTelemetry span (name, attributes, events, status) and metric data point
  attribute, with ``capture_content=True`` so the most is recorded;
* every exception: ``str``, ``repr``, ``context``, the partial result, and the whole
  formatted traceback chain (causes and contexts);
* the ``repr`` and ``str`` of every public object the scenarios touch (providers, results
  and their events and transcripts, handles, a live session, session infos, tool uses).

Then every secret is searched for in all of it, whole and by its distinctive core: zero
findings. (What the emulators themselves record is not searched: they are the server the
secret is meant for.)
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import managedloop as ml
import managedloop.otel
from managedloop import telemetry
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents, Local
from managedloop.testing import (
    AgentCoreEmulator,
    AgentCoreFaults,
    ChatEmulator,
    ChatFaults,
    ClaudeEmulator,
    ClaudeFaults,
    call,
    say,
)

pytestmark = pytest.mark.anyio

LOCAL_KEY = "sk-LEAKTESTlocalkey0123456789abcdef"
URL_PASSWORD = "pwLEAKTESTbaseurl9876"
CLAUDE_KEY = "sk-ant-LEAKTESTclaudekey0123456789"
BEARER = "LEAKTESTbearerfiletoken0123456789abcdef"
AWS_KEY_ID = "AKIALEAKTEST00000001"
AWS_SECRET = "LEAKTESTawssecretKEY0123456789abcdefghij"
AWS_TOKEN = "IQoJLEAKTESTawssessiontoken0123456789abcdef"
SECRETS = {
    "local api key": LOCAL_KEY,
    "base_url password": URL_PASSWORD,
    "claude api key": CLAUDE_KEY,
    "bearer file token": BEARER,
    "aws access key id": AWS_KEY_ID,
    "aws secret access key": AWS_SECRET,
    "aws session token": AWS_TOKEN,
}


@ml.tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"found {city}"


AGENT = ml.AgentSpec(
    name="leaks", system_prompt="Use tools.", tools=[lookup], model="claude-haiku-4-5"
)
SCRIPT = [call("lookup", {"city": "Paris"}), say("done")]


class Capture(logging.Handler):
    """Everything observable, as text, by where it was seen."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[tuple[str, str]] = []
        self.formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
        self.records = 0
        self.failures: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1
        try:
            text = self.formatter.format(record)  # message, args and exc_info traceback
        except Exception as exc:  # a record that cannot format is a finding of its own
            text = f"unformattable record {record.msg!r}: {exc!r}"
        self.texts.append((f"log {record.name}", f"{text}\n{record.args!r}\n{vars(record)!r}"))

    def see(self, where: str, value: Any) -> None:
        if isinstance(value, BaseException):
            self.texts.append((where, _exception_text(value)))
        else:
            self.texts.append((where, f"{value!r}\n{value!s}"))

    def telemetry_listener(self, name: str, measurements: Any, meta: Any) -> None:
        self.texts.append((f"telemetry {name}", f"{dict(measurements)!r} {dict(meta)!r}"))


def _exception_text(exc: BaseException) -> str:
    parts = ["".join(traceback.format_exception(exc)), repr(exc), str(exc)]
    for link in _chain(exc):
        parts += [repr(getattr(link, "context", None)), repr(link.args)]
        partial = getattr(link, "partial_result", None)
        if partial is not None:
            parts.append(repr(partial))
    return "\n".join(parts)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        item = stack.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        stack += [item.__cause__, item.__context__]


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Capture]:
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    cap = Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(cap)
    root.setLevel(logging.DEBUG)
    attachment = telemetry.attach(cap.telemetry_listener)
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    managedloop.otel.instrument(
        tracer_provider, meter_provider=meter_provider, capture_content=True
    )
    try:
        yield cap
    finally:
        managedloop.otel.uninstrument()
        telemetry.detach(attachment)
        root.removeHandler(cap)
        root.setLevel(old_level)
    spans = exporter.get_finished_spans()
    for span in spans:
        cap.see(f"span {span.name}", span.to_json())
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    cap.see(f"metric {metric.name}", dict(point.attributes or {}))
    tracer_provider.shutdown()
    meter_provider.shutdown()
    found = findings(cap.texts)
    assert found == [], "\n".join(f"{w}: {label}" for w, label in found)
    assert cap.records, "the scenarios logged nothing: the capture is broken"
    assert spans, "no spans were captured: the capture is broken"


def findings(texts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(where, which secret) for every secret found in ``texts``."""
    return [
        (where, label)
        for where, text in texts
        for label, secret in SECRETS.items()
        if secret in text or _core(secret) in text
    ]


def test_the_search_finds_every_secret_whole_or_by_its_core() -> None:
    for label, secret in SECRETS.items():
        assert findings([("x", f"a {secret} b")]) == [("x", label)]
        assert findings([("x", f"Bearer ***{_core(secret)}***")]) == [("x", label)]
    assert findings([("x", "sk-ant-emu-0123 AKEMU0000 nothing here")]) == []


def _core(secret: str) -> str:
    """The distinctive middle of a secret (a prefix such as ``sk-`` or ``AKIA`` stripped)."""
    return secret[4:-4]


async def _expect_failure(cap: Capture, where: str, coro: Any) -> Any:
    with pytest.raises(ml.ManagedLoopError) as info:
        await coro
    cap.see(where, info.value)
    cap.failures.append((where, info.value.code))
    return info.value


async def _success(cap: Capture, where: str, provider: Any, **run: Any) -> ml.SessionResult:
    result = await ml.run(provider, agent=AGENT, prompt="Paris?", **run)
    assert result.terminal is ml.Terminal.END_TURN
    for name, value in {
        "provider": provider,
        "result": result,
        "result.events": result.events,
        "result.transcript": result.transcript,
        "result.to_dict": result.to_dict(),
        "tool uses": result.custom_tool_uses,
        "usage": result.usage,
    }.items():
        cap.see(f"{where} {name}", value)
    return result


LOCAL_FAILURES = {
    "give-up": ChatFaults(statuses=[500] * 10),  # retries exhausted
    "drop": ChatFaults(drop=10),  # connections cut mid-body
    "malformed": ChatFaults(malformed=10),
    "redirect elsewhere": ChatFaults(redirect=10, redirect_to="http://127.0.0.2:9/v1/x"),
}


async def test_local_leaks_nothing(capture: Capture) -> None:
    for password in (False, True):
        key = None if password else LOCAL_KEY
        for stream in (False, True):
            label = f"local password={password} stream={stream}"
            # a success after a 503 and a 429 (both retried)
            with ChatEmulator(SCRIPT, api_key=key, faults=ChatFaults(statuses=[503, 429])) as emu:
                await _success(capture, label, _local(emu.base_url, password, stream))
            for what, faults in LOCAL_FAILURES.items():
                with ChatEmulator(SCRIPT, api_key=key, faults=faults) as emu:
                    provider = _local(emu.base_url, password, stream)
                    await _expect_failure(capture, f"{label} {what}", ml.run(provider, agent=AGENT))
    with ChatEmulator(SCRIPT, api_key=LOCAL_KEY + "x") as emu:  # the server wants another key
        wrong = _local(emu.base_url, False, False)
        capture.see("local wrong-key provider", wrong)
        await _expect_failure(capture, "local auth", ml.run(wrong, agent=AGENT))
        with pytest.raises(ml.ManagedLoopError) as both:
            Local(model="m1", base_url=_with_password(emu.base_url), api_key=LOCAL_KEY)
        capture.see("local both credentials", both.value)
    for password in (False, True):  # a live session: its repr and each SessionInfo
        with ChatEmulator(SCRIPT, api_key=None if password else LOCAL_KEY) as emu:
            seen = Seen()
            provider = _local(emu.base_url, password, False)
            async with ml.start(provider, agent=AGENT, prompt="Paris?", handler=seen) as live:
                capture.see(f"local live password={password}", live)
                capture.see(f"local live result password={password}", await live.result())
            capture.see(f"local live infos password={password}", seen.infos)
            assert seen.infos
    with ChatEmulator(SCRIPT) as emu:
        gone = emu.base_url
    # nothing listens there any more: the connection is refused (the URL holds a password)
    refused = _local(gone, True, False)
    await _expect_failure(capture, "local refused", ml.run(refused, agent=AGENT))
    each = ["http_error", "transport_error", "malformed_chat_response", "redirect_refused"]
    assert [c for _, c in capture.failures] == [
        *each * 4,
        "authentication_error",
        "transport_error",
    ]


class Seen:
    """A handler that answers every call and keeps each SessionInfo it is handed."""

    def __init__(self) -> None:
        self.infos: list[ml.SessionInfo] = []

    def handle_tool_call(self, name: str, input: Any, info: ml.SessionInfo) -> str:
        self.infos.append(info)
        return f"found {input}"

    def handle_event(self, event: Any, info: ml.SessionInfo) -> None:
        self.infos.append(info)


def _with_password(base_url: str) -> str:
    return base_url.replace("http://", f"http://alice:{URL_PASSWORD}@")


def _local(base_url: str, password: bool, stream: bool) -> Local:
    if password:
        return Local(model="m1", base_url=_with_password(base_url), stream=stream, retry_backoff=0)
    return Local(model="m1", base_url=base_url, api_key=LOCAL_KEY, stream=stream, retry_backoff=0)


async def test_claude_leaks_nothing(capture: Capture, tmp_path: Path) -> None:
    bearer_file = _token_file(tmp_path / "token", BEARER)
    with ClaudeEmulator(SCRIPT, api_key=CLAUDE_KEY) as emu:
        emu.bearer_tokens.add(BEARER)
        async with anthropic.AsyncAnthropic(
            base_url=emu.base_url, api_key=CLAUDE_KEY, max_retries=0
        ) as client:
            handle = await ml.provision(ClaudeManagedAgents(client=client), AGENT)
            capture.see("claude handle", handle)
        for label, auth in (
            ("api key", {"api_key": CLAUDE_KEY}),
            ("bearer file", {"api_key": None, "bearer_token_file": str(bearer_file)}),
        ):
            provider = ClaudeManagedAgents(
                base_url=emu.base_url,
                agent=handle,
                environment=handle,
                reconnect_backoff=0.0,
                **auth,
            )
            emu.agent.script = list(SCRIPT)
            await _success(capture, f"claude {label}", provider)
            emu.agent.script = list(SCRIPT)
            emu.faults = ClaudeFaults(drop_stream_after=(2,), server_errors=1)
            await _success(capture, f"claude {label} faults", provider, timeout=30)
            emu.faults = ClaudeFaults(rate_limit=50)  # every call limited: retries give up
            emu.agent.script = list(SCRIPT)
            await _expect_failure(
                capture, f"claude {label} give-up", ml.run(provider, agent=AGENT, timeout=30)
            )
            emu.faults = ClaudeFaults()
        for label, auth in (
            ("wrong key", {"api_key": CLAUDE_KEY + "x"}),
            ("wrong bearer", {"api_key": None, "bearer_token_file": str(_wrong(tmp_path))}),
        ):
            wrong = ClaudeManagedAgents(
                base_url=emu.base_url, agent=handle, environment=handle, **auth
            )
            capture.see(f"claude {label} provider", wrong)
            await _expect_failure(capture, f"claude {label}", ml.run(wrong, agent=AGENT))
        # A credential no HTTP header can carry (a newline read with the file, a stray
        # space): h11 would refuse the header and quote it, token and all, in the error it
        # raises, which the session's error chains. Refused up front, without the value.
        for label, bad in (("key newline", CLAUDE_KEY + "\n"), ("key space", " " + CLAUDE_KEY)):
            with pytest.raises(ml.ManagedLoopError) as refused:
                ClaudeManagedAgents(
                    base_url=emu.base_url, agent=handle, environment=handle, api_key=bad
                )
            capture.see(f"claude {label}", refused.value)
        odd = _token_file(tmp_path / "odd-token", BEARER + "\r\n")
        await _expect_failure(
            capture,
            "claude bearer newline",
            ml.run(
                ClaudeManagedAgents(
                    base_url=emu.base_url,
                    agent=handle,
                    environment=handle,
                    api_key=None,
                    bearer_token_file=str(odd),
                ),
                agent=AGENT,
            ),
        )
        missing = ClaudeManagedAgents(
            base_url=emu.base_url,
            agent=handle,
            environment=handle,
            api_key=None,
            bearer_token_file=str(tmp_path / "none"),
        )
        await _expect_failure(capture, "claude missing bearer file", ml.run(missing, agent=AGENT))
        with pytest.raises(ml.ManagedLoopError) as in_url:
            ClaudeManagedAgents(base_url=_with_password(emu.base_url), api_key=CLAUDE_KEY)
        capture.see("claude base_url password", in_url.value)
    assert [c for _, c in capture.failures] == [
        "create_session_failed",  # rate-limited until the retries give up
        "create_session_failed",
        "authentication_error",
        "authentication_error",
        "authentication_error",  # the bearer file's token with a CR LF
        "authentication_error",
    ]


def _wrong(tmp_path: Path) -> Path:
    return _token_file(tmp_path / "wrong-token", BEARER + "-not-accepted")


def _token_file(path: Path, token: str) -> Path:
    # an hour ahead: far from the library's 60 s "expiring" bound on any machine
    path.write_text(json.dumps({"access_token": token, "expires_at": time.time() + 3600}))
    return path


async def test_agentcore_leaks_nothing(capture: Capture) -> None:
    with AgentCoreEmulator(SCRIPT) as emu:
        emu.access_key_id = AWS_KEY_ID
        emu._secret = AWS_SECRET  # the emulator checks SigV4 signatures with this pair
        kwargs: dict[str, Any] = {
            **emu.client_kwargs,
            "aws_session_token": AWS_TOKEN,
            "harness_arn": emu.harness_arn,
            "retry_backoff": 0.0,
        }
        with BedrockAgentCore(**kwargs) as provider:
            await _success(capture, "agentcore", provider)
            emu.set_script(SCRIPT)
            emu.faults = AgentCoreFaults(drop_after=1, times=1)  # one retry, then fine
            await _success(capture, "agentcore retry", provider)
            emu.set_script(SCRIPT)
            emu.faults = AgentCoreFaults(drop_after=1, times=None)  # every attempt drops
            await _expect_failure(capture, "agentcore give-up", ml.run(provider, agent=AGENT))
            emu.set_script(SCRIPT)
            emu.faults = AgentCoreFaults(exception_at=1, exception_type="validationException")
            await _expect_failure(capture, "agentcore exception", ml.run(provider, agent=AGENT))
            emu.faults = AgentCoreFaults()
        wrong = BedrockAgentCore(**{**kwargs, "aws_secret_access_key": AWS_SECRET + "x"})
        with wrong:
            capture.see("agentcore wrong-secret provider", wrong)
            await _expect_failure(capture, "agentcore auth", ml.run(wrong, agent=AGENT))
            # provisioning: the CreateHarness 403 echoes the canonical request (the token)
            await _expect_failure(
                capture,
                "agentcore provision auth",
                wrong.provision(AGENT, execution_role_arn=emu.execution_role_arn),
            )
        # harness_tools=[] skips GetHarness: the signed InvokeHarness itself is refused
        with BedrockAgentCore(
            **{**kwargs, "aws_secret_access_key": AWS_SECRET + "x", "harness_tools": []}
        ) as wrong_invoke:
            await _expect_failure(
                capture, "agentcore invoke auth", ml.run(wrong_invoke, agent=AGENT)
            )
    # (a wrong secret fails the open's GetHarness: reported as harness_tools_unavailable)
    assert [c for _, c in capture.failures] == [
        "transport_error",
        "harness_stream_error",
        "harness_tools_unavailable",
        "authentication_error",  # CreateHarness
        "authentication_error",  # InvokeHarness
    ]


def test_claude_refuses_a_credential_no_header_can_carry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Claude API key or bearer token that is not visible ASCII without whitespace is a
    named error that never quotes it (the leak test above shows why it must not reach h11)."""
    from managedloop.providers.claude._api import read_bearer_token

    for bad in (CLAUDE_KEY + "\n", CLAUDE_KEY + " ", "\t" + CLAUDE_KEY, CLAUDE_KEY + "\x00", "é"):
        with pytest.raises(ml.InvalidOptionsError) as given:
            ClaudeManagedAgents(api_key=bad)
        assert given.value.context["option"] == "api_key"
        errors: list[BaseException] = [given.value]
        if "\x00" not in bad:  # (no environment variable can hold a NUL)
            monkeypatch.setenv("ANTHROPIC_API_KEY", bad)
            with pytest.raises(ml.ConfigError) as configured:
                ClaudeManagedAgents()
            assert configured.value.code == "invalid_configuration"
            errors.append(configured.value)
        for error in errors:
            assert findings([("e", _exception_text(error))]) == []
        path = _token_file(tmp_path / "t", bad)
        with pytest.raises(ml.AuthenticationError) as read:
            read_bearer_token(str(path))
        assert read.value.context["reason"] == "bearer_file_invalid"
        assert findings([("e", _exception_text(read.value))]) == []
        # with client=, the client's own key is what is sent: the configured one is unused
        ClaudeManagedAgents(client=anthropic.AsyncAnthropic(api_key=CLAUDE_KEY))
    monkeypatch.setenv("ANTHROPIC_API_KEY", CLAUDE_KEY)
    assert repr(ClaudeManagedAgents()).startswith("ClaudeManagedAgents(")
    assert read_bearer_token(str(_token_file(tmp_path / "ok", BEARER))) == BEARER


def test_configured_secrets_are_held_wrapped() -> None:
    """``ml.configure(api_key=...)`` keeps secret keys as :class:`~managedloop.config.Secret`:
    a dump of the module's globals (a debugger, a crash reporter's locals) shows none, and
    the key still reaches the provider."""
    import managedloop.config as config

    try:
        ml.configure(api_key=CLAUDE_KEY, base_url="http://127.0.0.1:9")
        dumped = repr(vars(config))
        assert findings([("globals", dumped)]) == []
        assert config.reveal(config.resolve("api_key")) == CLAUDE_KEY
        assert config.resolve("base_url") == "http://127.0.0.1:9"  # not a secret: as given
    finally:
        ml.configure()
