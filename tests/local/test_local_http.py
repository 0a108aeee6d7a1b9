"""The default HTTP chat function against the loopback emulator: streaming, malformed
bodies, option validation, secrets, connection pooling across event loops
(reference §9 ``session_text_delta_test`` for the streamed deltas)."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
from typing import Any

import anyio
import pytest

import managedloop as ml
from managedloop.providers.local import Local
from managedloop.testing import ChatEmulator, ChatFaults, call, say
from weather import get_weather

pytestmark = pytest.mark.anyio

KEY = "sk-very-secret-key-1234"


AGENT = ml.AgentSpec(system_prompt="Use tools.", tools=[get_weather])


class Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], info: ml.SessionInfo) -> str:
        return get_weather(**input)

    def handle_event(self, event: dict[str, Any], info: ml.SessionInfo) -> None:
        self.events.append(event)


def test_streamed_text_reaches_handle_event_as_deltas() -> None:
    script = [call("get_weather", {"city": "Paris"}), say("It is sunny in Paris today.")]
    recorder = Recorder()
    with ChatEmulator(script, chunk_size=5) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True)
        result = ml.run_sync(provider, agent=AGENT, prompt="Weather?", handler=recorder)
    deltas = [e["text"] for e in recorder.events if e["type"] == "managedloop.text_delta"]
    assert deltas == ["It is", " sunn", "y in ", "Paris", " toda", "y."]
    assert result.text == "It is sunny in Paris today."
    assert result.custom_tool_uses[0].input == {"city": "Paris"}  # streamed tool call
    assert result.usage.input_tokens == 20  # stream_options.include_usage honoured
    assert all(e["type"] != "managedloop.text_delta" for e in result.events)
    # deltas arrive before the raw event of their model call
    kinds = [e["type"] for e in recorder.events]
    assert kinds.index("managedloop.text_delta") < len(kinds) - 1
    assert kinds[-1] == "local.model_response"
    assert emu.received[0]["stream"] is True
    assert emu.received[0]["stream_options"] == {"include_usage": True}


def test_non_streaming_text_delta_is_the_whole_content() -> None:
    recorder = Recorder()
    with ChatEmulator([say("hello")]) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
        ml.run_sync(provider, agent=AGENT, prompt="hi", handler=recorder)
    kinds = [(e["type"], e.get("text")) for e in recorder.events]
    assert kinds == [("local.model_response", None), ("managedloop.text_delta", "hello")]
    assert "stream" not in emu.received[0]


@pytest.mark.parametrize("stream", [False, True])
def test_malformed_body_is_named_and_not_retried(stream: bool) -> None:
    with ChatEmulator([say("x")], faults=ChatFaults(malformed=1)) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=stream)
        with pytest.raises(ml.MalformedResponseError) as info:
            ml.run_sync(provider, agent=AGENT, prompt="q")
    assert info.value.code == "malformed_chat_response"
    assert len(emu.received) == 1


def test_script_failure_step_is_http_500_retried_then_raised() -> None:
    with ChatEmulator([ml_fail()]) as emu:
        provider = Local(
            model="m", base_url=emu.base_url, api_key=emu.api_key, max_retries=1, retry_backoff=0
        )
        with pytest.raises(ml.APIStatusError) as info:
            ml.run_sync(provider, agent=AGENT, prompt="q")
    assert info.value.status == 500
    assert len(emu.received) == 2


def ml_fail() -> Any:
    from managedloop.testing import Fail

    return Fail(message="model overloaded")


def test_script_assertions_fail_the_with_block() -> None:
    def check(request: Any) -> Any:
        assert request.user_text == "something else", "the model was sent the wrong prompt"
        return say("x")

    emu = ChatEmulator([check])
    with pytest.raises(AssertionError, match="wrong prompt"), emu:  # noqa: PT012
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
        with pytest.raises(ml.APIStatusError) as info:
            ml.run_sync(provider, agent=AGENT, prompt="q")
        assert info.value.status == 400


def test_many_concurrent_sessions_each_play_the_script() -> None:
    async def main(base_url: str, key: str) -> list[ml.SessionResult]:
        async with Local(model="m", base_url=base_url, api_key=key) as provider:
            results: list[ml.SessionResult] = []

            async def one(i: int) -> None:
                results.append(await ml.run(provider, agent=AGENT, prompt=f"q{i}"))

            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(one, i)
            return results

    with ChatEmulator() as emu:
        results = anyio.run(main, emu.base_url, emu.api_key)
    assert len(results) == 50
    assert {r.text for r in results} == {"Done. Sunny in example"}
    assert len({r.session_id for r in results}) == 50
    assert len(emu.received) == 100


def test_run_sync_twice_on_one_provider_and_no_unclosed_sessions() -> None:
    with ChatEmulator() as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
        for _ in range(3):  # each run_sync is a fresh event loop
            assert ml.run_sync(provider, agent=AGENT, prompt="q").terminal == "end_turn"
    gc.collect()  # an unclosed socket or transport would warn here (warnings are errors)


async def test_async_with_keeps_the_pool_across_runs() -> None:
    with ChatEmulator() as emu:
        async with Local(model="m", base_url=emu.base_url, api_key=emu.api_key) as provider:
            first = await ml.run(provider, agent=AGENT, prompt="a")
            session = provider._pool.transport._pool
            second = await ml.run(provider, agent=AGENT, prompt="b")
            assert provider._pool.transport._pool is session is not None
        assert session.closed
    assert first.text == second.text


def test_emulator_wire_shapes() -> None:
    """The emulator's JSON and SSE are Chat Completions as clients parse them."""
    import urllib.request

    with ChatEmulator([say("hey"), say("there")], api_key="k") as emu:
        body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "hi"}]})
        req = urllib.request.Request(
            emu.base_url + "/chat/completions",
            data=body.encode(),
            headers={"Authorization": "Bearer k", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            data = json.loads(resp.read())
        assert data["object"] == "chat.completion"
        assert data["choices"][0]["message"] == {"role": "assistant", "content": "hey"}
        assert data["choices"][0]["finish_reason"] == "stop"
        assert data["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        streamed = json.dumps(
            {
                "model": "x",
                "stream": True,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hey"},
                    {"role": "user", "content": "more"},
                ],
            }
        )
        req = urllib.request.Request(
            emu.base_url + "/chat/completions",
            data=streamed.encode(),
            headers={"Authorization": "Bearer k", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            frames = [f for f in resp.read().decode().split("\n\n") if f]
        assert frames[-1] == "data: [DONE]"
        chunks = [json.loads(f[len("data: ") :]) for f in frames[:-1]]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        assert text == "there"
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert all("usage" not in c for c in chunks)  # include_usage was not asked for


# -- options fail before any request, secrets never leak -------------------------------


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"base_url": "not a url"}, "base_url"),
        ({"base_url": "ftp://host/v1"}, "base_url"),
        ({"base_url": "http:///v1"}, "base_url"),
        ({"base_url": "http://host:99999/v1"}, "base_url"),
        ({"base_url": "http://host/v1?x=1"}, "base_url"),
        ({"base_url": 42}, "base_url"),
        ({"model": ""}, "model"),
        ({"model": 3}, "model"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": 1.5}, "max_retries"),
        ({"retry_backoff": -1}, "retry_backoff"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": "10"}, "timeout"),
        ({"connect_timeout": -2}, "connect_timeout"),
        ({"max_connections": -1}, "max_connections"),
        ({"stream": "yes"}, "stream"),
        ({"chat": "not callable"}, "chat"),
        ({"model_config": ["x"]}, "model_config"),
        ({"headers": {"x": 1}}, "headers"),
        ({"api_key": 1234}, "api_key"),
        ({"sleep": 5}, "sleep"),
    ],
)
def test_bad_options_raise_a_named_error(kwargs: dict[str, Any], option: str) -> None:
    kwargs = {"model": "m", **kwargs}
    with pytest.raises(ml.InvalidOptionsError) as info:
        Local(**kwargs)
    assert info.value.context["option"] == option


def test_no_request_is_made_for_bad_options() -> None:
    with ChatEmulator() as emu:
        with pytest.raises(ml.InvalidOptionsError):
            Local(model="m", base_url=emu.base_url + "?bad=1", api_key=emu.api_key)
        assert emu.received == []


def test_the_key_never_appears_in_repr_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    provider = Local(model="m", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    assert KEY not in repr(provider)
    assert "Secret('**********')" in repr(provider)
    with_userinfo = Local(model="m", base_url="http://user:pw-secret@127.0.0.1:9/v1", api_key=None)
    assert "pw-secret" not in repr(with_userinfo)
    with pytest.raises(ml.InvalidOptionsError) as bad:
        Local(model="m", base_url="gopher://u:pw-secret@h/v1", api_key=KEY)
    assert "pw-secret" not in str(bad.value)
    faults = ChatFaults(statuses=(503, 503))
    with ChatEmulator([say("x")], faults=faults, api_key=KEY) as emu:
        flaky = Local(model="m", base_url=emu.base_url, api_key=KEY, max_retries=1, retry_backoff=0)
        with caplog.at_level("DEBUG"), pytest.raises(ml.APIStatusError) as info:
            ml.run_sync(flaky, agent=AGENT, prompt="q")
    texts = [str(info.value), repr(info.value), repr(info.value.context), caplog.text]
    texts.append(
        json.dumps(info.value.partial_result.to_dict() if info.value.partial_result else {})
    )
    assert "retry 1/1" in caplog.text
    for text in texts:
        assert KEY not in text


def test_config_and_environment_supply_base_url_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with ChatEmulator([say("from env")]) as emu:
        monkeypatch.setenv("OPENAI_BASE_URL", emu.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", emu.api_key or "")
        provider = Local(model="m")
        assert provider.base_url == emu.base_url
        assert ml.run_sync(provider, agent=AGENT, prompt="q").text == "from env"
    ml.configure(openai_base_url="http://127.0.0.1:1/v1")
    assert Local(model="m").base_url == "http://127.0.0.1:1/v1"
    ml.configure(openai_base_url="::bad::")
    with pytest.raises(ml.InvalidOptionsError):
        Local(model="m")


def test_default_base_url_is_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert Local(model="m").base_url == "https://api.openai.com/v1"


def test_emulator_runs_in_a_background_thread_and_stops() -> None:
    before = threading.active_count()
    with ChatEmulator() as emu:
        assert threading.active_count() == before + 1
        assert emu.base_url.startswith("http://127.0.0.1:")
        assert emu.base_url.endswith("/v1")
    assert threading.active_count() == before


@pytest.mark.parametrize("stream", [False, True])
def test_run_timeout_tears_down_the_in_flight_request(stream: bool) -> None:
    # The answer would take 30 s or more; a torn-down run ends long before (a wide bound, so
    # a loaded CI machine cannot fail it: the point is "did not wait for the answer").
    faults = ChatFaults(chunk_delay=30.0, slow=1, delay=0.0 if stream else 30.0)
    with ChatEmulator([say("a slow answer in many chunks")], faults=faults) as emu:
        provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=stream)
        start = time.monotonic()
        with pytest.raises(ml.SessionTimeoutError) as info:
            ml.run_sync(provider, agent=AGENT, prompt="q", timeout=0.3)
        assert time.monotonic() - start < 15
    assert info.value.partial_result is not None
    gc.collect()


def test_a_password_in_base_url_never_reaches_a_transport_error() -> None:
    provider = Local(model="m", base_url="http://user:pw-secret@127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(ml.TransportError) as failed:
        ml.run_sync(provider, agent=AGENT, prompt="q")
    assert "127.0.0.1:9" in str(failed.value)
    for text in (str(failed.value), repr(failed.value), repr(failed.value.context)):
        assert "pw-secret" not in text
    assert "pw-secret" not in repr(provider._http)


async def test_a_session_queued_for_a_pooled_connection_is_not_failed_by_connect_timeout() -> None:
    """``connect_timeout`` bounds establishing a connection, not the wait for a free one in
    a bounded pool (aiohttp's ``connect`` counted both; Local's transport times only the
    socket connect). The second session waits 1 s behind the first, 5x its connect
    timeout, and still succeeds; the only real connect is a loopback one (kernel-side, far
    below 0.2 s)."""
    with ChatEmulator([say("hi")], faults=ChatFaults(slow=1, delay=1.0)) as emu:
        async with Local(
            model="m",
            base_url=emu.base_url,
            api_key=emu.api_key,
            max_connections=1,
            connect_timeout=0.2,
            max_retries=0,
        ) as provider:
            results = await asyncio.gather(
                ml.run(provider, agent=AGENT, prompt="first"),
                ml.run(provider, agent=AGENT, prompt="second"),
            )
    assert [r.terminal for r in results] == [ml.Terminal.END_TURN, ml.Terminal.END_TURN]
    assert len(emu.received) == 2
