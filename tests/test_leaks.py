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

Beyond the library calls (issue 25), the same search runs over:

* **the command line's output**, stdout and stderr, of every command — ``demo``, ``run``,
  ``emulate``, ``provision``, ``tag``, ``resolve``, ``ls``, ``prune`` — on its success path
  and its error paths (a wrong key, an unknown tag, a bad argument), plain and ``--json``,
  with the secrets in the environment the commands read;
* **webhook deliveries and the receiver**: a signing secret of its own, every delivery the
  Claude emulator made (body and headers) and every answer, good and bad signatures, a
  stale one, a failed run, the receiver's ``repr`` and outcomes;
* **store files on disk**: the SQLite database (and its WAL) the commands wrote and the
  webhook ledger's JSON file, as bytes;
* the stdout of ``managedloop demo`` (in process) and of ``python -m managedloop emulate``.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import subprocess
import sys
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
from host_models import for_host, model_for
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
from realproxy import RealProxy

pytestmark = pytest.mark.anyio

LOCAL_KEY = "sk-LEAKTESTlocalkey0123456789abcdef"
URL_PASSWORD = "pwLEAKTESTbaseurl9876"
CLAUDE_KEY = "sk-ant-LEAKTESTclaudekey0123456789"
BEARER = "LEAKTESTbearerfiletoken0123456789abcdef"
AWS_KEY_ID = "AKIALEAKTEST00000001"
AWS_SECRET = "LEAKTESTawssecretKEY0123456789abcdefghij"
AWS_TOKEN = "IQoJLEAKTESTawssessiontoken0123456789abcdef"
PROXY_PASSWORD = "pxLEAKTESTproxypass2468"
PROXY_WRONG = "pxLEAKTESTwrongpass1357"
ENV_KEY = "envkey-LEAKTESTenvironmentkey0123456789"
WEBHOOK_KEY = b"LEAKTESTwebhooksigningkey0123456789"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(WEBHOOK_KEY).decode()
SECRETS = {
    "proxy password": PROXY_PASSWORD,
    "wrong proxy password": PROXY_WRONG,
    # the Proxy-Authorization token the password travels in (base64 of user:password)
    "proxy basic token": base64.b64encode(f"proxyuser:{PROXY_PASSWORD}".encode()).decode(),
    "local api key": LOCAL_KEY,
    "base_url password": URL_PASSWORD,
    "claude api key": CLAUDE_KEY,
    "bearer file token": BEARER,
    "aws access key id": AWS_KEY_ID,
    "aws secret access key": AWS_SECRET,
    "aws session token": AWS_TOKEN,
    "claude environment key": ENV_KEY,
    "webhook signing secret": WEBHOOK_SECRET,
    "webhook signing key": WEBHOOK_KEY.decode(),
}


@ml.tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"found {city}"


AGENT = ml.AgentSpec(
    name="leaks", system_prompt="Use tools.", tools=[lookup], model=model_for("claude")
)
AGENTCORE_AGENT = for_host(AGENT, "agentcore")  # Bedrock refuses a Claude API id
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
    result = await ml.run(provider, agent=for_host(AGENT, provider), prompt="Paris?", **run)
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


async def test_local_proxy_credentials_leak_nothing(
    capture: Capture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real proxy (proxy.py) asking for credentials: forwarded and tunnelled requests,
    from ``proxy=`` and from the environment, a wrong password (407), a tunnel the proxy
    cannot open (the target is gone) and a proxy that is gone."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with RealProxy(tmp_path, auth=f"proxyuser:{PROXY_PASSWORD}") as proxy:
        good = f"http://proxyuser:{PROXY_PASSWORD}@127.0.0.1:{proxy.port}"
        wrong = f"http://proxyuser:{PROXY_WRONG}@127.0.0.1:{proxy.port}"
        for stream in (False, True):
            with ChatEmulator(SCRIPT, api_key=LOCAL_KEY) as emu:
                option = Local(
                    model="m1",
                    base_url=emu.base_url,
                    api_key=LOCAL_KEY,
                    stream=stream,
                    proxy=good,
                    retry_backoff=0,
                )
                capture.see("local proxy provider", option)
                capture.see("local proxy transport", option._pool.transport)  # type: ignore[union-attr]
                await _success(capture, f"local proxy= stream={stream}", option)
                monkeypatch.setenv("HTTP_PROXY", good)
                env = Local(
                    model="m1",
                    base_url=emu.base_url,
                    api_key=LOCAL_KEY,
                    stream=stream,
                    retry_backoff=0,
                )
                await _success(capture, f"local HTTP_PROXY stream={stream}", env)
                monkeypatch.delenv("HTTP_PROXY")
                bad = Local(
                    model="m1",
                    base_url=emu.base_url,
                    api_key=LOCAL_KEY,
                    proxy=wrong,
                    stream=stream,
                    retry_backoff=0,
                )
                await _expect_failure(capture, "local proxy 407", ml.run(bad, agent=AGENT))
                gone = emu.base_url.replace("http://", "https://")
            tunnel_407 = Local(
                model="m1", base_url=gone, api_key=LOCAL_KEY, proxy=wrong, retry_backoff=0
            )
            await _expect_failure(capture, "local CONNECT 407", ml.run(tunnel_407, agent=AGENT))
            monkeypatch.setenv("HTTPS_PROXY", good)
            tunnel = Local(
                model="m1", base_url=gone, api_key=LOCAL_KEY, retry_backoff=0, max_retries=1
            )
            await _expect_failure(capture, "local CONNECT refused", ml.run(tunnel, agent=AGENT))
            monkeypatch.delenv("HTTPS_PROXY")
    nothing = Local(
        model="m1",
        base_url="http://127.0.0.1:9/v1",
        api_key=LOCAL_KEY,
        proxy=good,
        retry_backoff=0,
        max_retries=1,
    )
    await _expect_failure(capture, "local proxy gone", ml.run(nothing, agent=AGENT))
    assert [c for _, c in capture.failures] == [
        *["proxy_auth_required", "proxy_auth_required", "proxy_refused"] * 2,
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


async def test_self_hosted_leaks_nothing(capture: Capture, tmp_path: Path) -> None:
    """The environment key of a self-hosted sandbox (and the API key beside it): a run
    with a built-in and a custom tool, a failing heartbeat and a hanging poll, a refused
    key; the worker's own objects; and the tool's environment (``env``)."""
    from managedloop.providers.claude import SandboxWorker, SelfHostedEnvironment
    from managedloop.testing.script import Reply, ToolCall

    script = [
        Reply(
            tool_calls=[
                ToolCall(name="bash", input={"command": "env"}, server=True),
                ToolCall(name="lookup", input={"city": "Paris"}),
            ]
        ),
        say("done"),
    ]
    with ClaudeEmulator(script, api_key=CLAUDE_KEY) as emu:
        async with anthropic.AsyncAnthropic(
            base_url=emu.base_url, api_key=CLAUDE_KEY, max_retries=0
        ) as client:
            env = await client.beta.environments.create(name="s", config={"type": "self_hosted"})
            emu.work.keys[env.id] = ENV_KEY
            sandbox = SelfHostedEnvironment(
                environment_id=env.id, environment_key=ENV_KEY, workdir=tmp_path, poll_timeout=0.2
            )
            capture.see("self-hosted options", sandbox)
            capture.see("self-hosted worker", SandboxWorker(client, sandbox))
            provider = ClaudeManagedAgents(client=client, environment=sandbox)
            emu.work.fail_heartbeats = 1  # a transient failure: the worker retries
            emu.work.hang_polls = 1
            result = await _success(capture, "self-hosted", provider)
            (env_result,) = [
                e for e in emu.events(result.session_id) if e["type"] == "user.tool_result"
            ]
            capture.see("self-hosted tool environment", env_result)
            emu.agent.script = list(script)
            wrong = SelfHostedEnvironment(
                environment_id=env.id, environment_key=ENV_KEY + "x", workdir=tmp_path
            )
            error = await _expect_failure(
                capture,
                "self-hosted wrong key",
                ml.run(ClaudeManagedAgents(client=client, environment=wrong), agent=AGENT),
            )
            assert error.code == "invalid_environment_key"
    assert [c for _, c in capture.failures] == ["invalid_environment_key"]


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
            await _expect_failure(
                capture, "agentcore give-up", ml.run(provider, agent=AGENTCORE_AGENT)
            )
            emu.set_script(SCRIPT)
            emu.faults = AgentCoreFaults(exception_at=1, exception_type="validationException")
            await _expect_failure(
                capture, "agentcore exception", ml.run(provider, agent=AGENTCORE_AGENT)
            )
            emu.faults = AgentCoreFaults()
        wrong = BedrockAgentCore(**{**kwargs, "aws_secret_access_key": AWS_SECRET + "x"})
        with wrong:
            capture.see("agentcore wrong-secret provider", wrong)
            await _expect_failure(capture, "agentcore auth", ml.run(wrong, agent=AGENTCORE_AGENT))
            # provisioning: the CreateHarness 403 echoes the canonical request (the token)
            await _expect_failure(
                capture,
                "agentcore provision auth",
                wrong.provision(AGENTCORE_AGENT, execution_role_arn=emu.execution_role_arn),
            )
        # harness_tools=[] skips GetHarness: the signed InvokeHarness itself is refused
        with BedrockAgentCore(
            **{**kwargs, "aws_secret_access_key": AWS_SECRET + "x", "harness_tools": []}
        ) as wrong_invoke:
            await _expect_failure(
                capture, "agentcore invoke auth", ml.run(wrong_invoke, agent=AGENTCORE_AGENT)
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


# -- the command line, webhooks, store files (issue 25) -----------------------------------


def _file_texts(*paths: Path) -> list[tuple[str, str]]:
    """Every file at ``paths`` (and an SQLite database's -wal/-shm), as text of its bytes."""
    out = []
    for path in paths:
        for each in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            if each.exists():
                out.append((f"file {each.name}", each.read_bytes().decode("utf-8", "replace")))
    return out


def _cli(capsys: pytest.CaptureFixture[str], texts: list[tuple[str, str]], argv: list[str]) -> int:
    from managedloop.cli import main

    out = io.StringIO()
    code = main(argv, out=out)
    seen = capsys.readouterr()
    texts.append((f"cli {' '.join(argv[:2])} -> {code}", out.getvalue() + seen.out + seen.err))
    return code


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_cli_output_and_store_files_leak_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from managedloop.cli import ops

    texts: list[tuple[str, str]] = []
    codes: dict[str, int] = {}
    empty = tmp_path / "aws-empty"
    empty.touch()
    for name, value in {
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "ANTHROPIC_BEARER_TOKEN_FILE", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    database = tmp_path / "state.sqlite3"
    store = ["--store", f"sqlite:{database}"]
    claude_spec = str(EXAMPLES / "claude.toml")
    with ClaudeEmulator(api_key=CLAUDE_KEY) as emu:
        monkeypatch.setenv("ANTHROPIC_API_KEY", CLAUDE_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", emu.base_url)
        for json_flag in ([], ["--json"]):
            for command in (
                ["provision", claude_spec, "--tag", "prod"],
                ["tag", claude_spec, "canary"],
                ["resolve", "support-bot:prod"],
                ["ls", claude_spec, "--keep", "1"],
                ["prune", claude_spec, "--keep", "1", "--dry-run"],
                ["prune", claude_spec, "--keep", "1"],
                ["resolve", "support-bot:nope"],  # unknown tag: exit 3
                ["tag", claude_spec, "x", "--digest", "nothex"],  # usage error: exit 2
            ):
                code = _cli(capsys, texts, [*command, *store, *json_flag])
                codes[f"{command[0]} {command[-1]}"] = code
        monkeypatch.setenv("ANTHROPIC_API_KEY", CLAUDE_KEY + "x")  # a wrong key: exit 2
        codes["provision wrong key"] = _cli(capsys, texts, ["provision", claude_spec, *store])
        codes["ls wrong key"] = _cli(capsys, texts, ["ls", claude_spec, *store, "--json"])
    with AgentCoreEmulator() as emu:
        kw = emu.client_kwargs
        emu.access_key_id = AWS_KEY_ID
        emu._secret = AWS_SECRET
        monkeypatch.setenv("MANAGEDLOOP_AGENTCORE_ENDPOINT_URL", kw["endpoint_url"])
        monkeypatch.setenv("AWS_REGION", kw["region_name"])
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
        monkeypatch.setenv("AWS_SESSION_TOKEN", AWS_TOKEN)
        monkeypatch.setenv("MANAGEDLOOP_EXECUTION_ROLE_ARN", emu.execution_role_arn)
        spec = str(EXAMPLES / "agentcore.toml")
        try:
            codes["agentcore provision"] = _cli(capsys, texts, ["provision", spec, *store])
            codes["agentcore ls"] = _cli(capsys, texts, ["ls", spec, *store, "--json"])
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET + "x")
            codes["agentcore wrong secret"] = _cli(capsys, texts, ["ls", spec, *store])
        finally:
            ops.set_testing()
    with ChatEmulator(SCRIPT, api_key=LOCAL_KEY) as emu:
        run = ["run", "--base-url", emu.base_url, "--model", "m1", "--prompt", "Paris?"]
        codes["run"] = _cli(capsys, texts, [*run, "--api-key", LOCAL_KEY])
        codes["run wrong key"] = _cli(capsys, texts, [*run, "--api-key", LOCAL_KEY + "x"])
        password = ["run", "--base-url", _with_password(emu.base_url), "--model", "m1"]
        codes["run password"] = _cli(capsys, texts, [*password, "--prompt", "q"])
    codes["demo"] = _cli(capsys, texts, ["demo"])
    texts += _file_texts(database)
    assert findings(texts) == []
    assert codes == {
        **{
            f"{c} {last}": 0
            for c, last in [
                ("provision", "prod"),
                ("tag", "canary"),
                ("resolve", "support-bot:prod"),
                ("ls", "1"),
                ("prune", "--dry-run"),
                ("prune", "1"),
            ]
        },
        "resolve support-bot:nope": 3,
        "tag nothex": 2,
        "provision wrong key": 2,  # refused credentials (cli.exits)
        "ls wrong key": 2,  # refused credentials (cli.exits)
        "agentcore provision": 0,
        "agentcore ls": 0,
        "agentcore wrong secret": 2,  # refused credentials (cli.exits)
        "run": 0,
        "run wrong key": 2,  # refused credentials (cli.exits)
        "run password": 2,  # refused credentials (cli.exits)
        "demo": 0,
    }
    assert database.stat().st_size > 0  # the commands did write the store searched above


def test_emulate_prints_no_secret_of_the_environment(tmp_path: Path) -> None:
    """``emulate`` prints the emulator's own URL and key, never a credential the
    environment holds (the demo's stdout is searched in-process above)."""
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "ANTHROPIC_API_KEY": CLAUDE_KEY,
        "OPENAI_API_KEY": LOCAL_KEY,
        "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_SESSION_TOKEN": AWS_TOKEN,
        "XDG_CACHE_HOME": str(tmp_path),
    }
    emulate = subprocess.Popen(
        [sys.executable, "-m", "managedloop", "emulate", "claude", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert emulate.stdout is not None
        lines = [emulate.stdout.readline() for _ in range(2)]  # base_url=..., api_key=...
    finally:
        emulate.terminate()
        rest, errors = emulate.communicate(timeout=30)
    assert any(line.startswith("base_url=") for line in lines), lines
    texts = [("emulate", "".join(lines) + rest + errors)]
    assert findings(texts) == []


async def test_webhooks_leak_nothing(capture: Capture, tmp_path: Path) -> None:
    import managedloop.webhooks as mw
    from managedloop.stores import FileStore
    from webhooks.conftest import (
        Calls,
        asgi_bridge,
        deployment,
        run_deployment,
        serve,
        weather_spec,
    )

    ledger = tmp_path / "hooks.json"
    with ClaudeEmulator(SCRIPT, api_key=CLAUDE_KEY) as emu:
        async with anthropic.AsyncAnthropic(
            base_url=emu.base_url, api_key=CLAUDE_KEY, max_retries=0
        ) as client:
            calls = Calls()
            dep_id, spec = await deployment(client, weather_spec(calls))
            emu.agent.script = [call("get_weather", {"city": "Paris"}), say("Sunny.")]
            provider = ClaudeManagedAgents(client=client)
            hooks = mw.app(
                provider,
                agent=spec,
                secret=WEBHOOK_SECRET,
                store=FileStore(ledger),
                background=False,
            )
            capture.see("webhooks receiver", hooks)
            answers: list[tuple[int, bytes]] = []
            bridge = asgi_bridge(hooks)

            async def answered(body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
                answer = await bridge(body, headers)
                answers.append(answer)
                return answer

            async with serve(answered) as url:
                emu.webhooks.subscribe(url, secret=WEBHOOK_SECRET)
                sid = await run_deployment(client, dep_id)
                deliveries = await emu.webhooks.delivered(3)
                emu.webhooks.redeliver(deliveries[0])  # a duplicate
                await emu.webhooks.delivered(4)
                first = deliveries[0]
                now = int(time.time())
                forged = {
                    **first.headers,
                    "webhook-signature": mw.sign(b"other", first.webhook_id, now, first.body),
                }
                stale = {**first.headers, "webhook-timestamp": "1"}
                for headers in (forged, stale, {"webhook-id": "x"}):
                    answers.append(await bridge(first.body, headers))
                missing = json.dumps(
                    {
                        "id": "evt_1",
                        "type": "event",
                        "data": {"id": "sesn_missing", "type": "session.requires_action"},
                    }
                ).encode()
                signed = {
                    "webhook-id": "wh_missing",
                    "webhook-timestamp": str(now),
                    "webhook-signature": mw.sign(WEBHOOK_SECRET, "wh_missing", now, missing),
                }
                answers.append(await bridge(missing, signed))  # its run fails: a 500
                with pytest.raises(ml.ManagedLoopError) as failed:
                    await hooks.handle(
                        missing,
                        {
                            **signed,
                            "webhook-id": "wh_missing2",
                            "webhook-signature": mw.sign(
                                WEBHOOK_SECRET, "wh_missing2", now, missing
                            ),
                        },
                    )
                capture.see("webhooks failed run", failed.value)
                with pytest.raises(ml.WebhookVerificationError) as refused:
                    await hooks.handle(first.body, forged)
                capture.see("webhooks refused", refused.value)
            for d in emu.webhooks.deliveries:
                capture.see(
                    f"webhook delivery {d.event_type}", f"{d.body!r} {d.headers!r} {d.answer!r}"
                )
    for status, body in answers:
        capture.see(f"webhook answer {status}", body)
    capture.texts += _file_texts(ledger)
    assert sid
    assert calls.log == ["Paris"]
    assert sorted(status for status, _ in answers) == [200, 200, 200, 200, 400, 401, 401, 500]
    assert ledger.stat().st_size > 0


def test_the_file_search_reads_what_an_sqlite_store_wrote(tmp_path: Path) -> None:
    """The store-file scan above can fail: a secret written into an SQLite store (still in
    its WAL, not yet checkpointed into the main file) or a JSON store is found."""
    from managedloop.stores import FileStore, SQLiteStore

    db = SQLiteStore(tmp_path / "s.sqlite3")
    db.put("k", {"leaked": CLAUDE_KEY})
    assert ("file s.sqlite3-wal", "claude api key") in findings(_file_texts(tmp_path / "s.sqlite3"))
    db.close()
    FileStore(tmp_path / "s.json").put("k", {"leaked": WEBHOOK_SECRET})
    assert findings(_file_texts(tmp_path / "s.json")) == [("file s.json", "webhook signing secret")]
