"""The ``anthropic:`` model prefix: the Messages API through the real ``anthropic`` SDK,
against the emulator's ``/v1/messages`` route (no network). Also the neutral ↔ Messages
conversions (the analogue of reference §9 ``local/req_llm_chat_test``: message and tool
conversion, model term, options, response conversion)."""

from __future__ import annotations

import json

import pytest

import managedloop as ml
from managedloop.providers.local import ChatRequest, Local
from managedloop.providers.local._anthropic import from_messages_response, to_messages_request
from managedloop.testing import ChatEmulator, ChatFaults, call, say
from weather import get_weather

pytestmark = pytest.mark.anyio


AGENT = ml.AgentSpec(system_prompt="Use tools.", tools=[get_weather])


def test_anthropic_prefix_runs_through_the_sdk() -> None:
    script = [call("get_weather", {"city": "Paris"}, text="Let me check."), say("Sunny!")]
    with ChatEmulator(script) as emu:
        provider = Local(
            model="anthropic:claude-test",
            base_url=emu.anthropic_base_url,
            api_key=emu.api_key,
        )
        result = ml.run_sync(provider, agent=AGENT, prompt="Weather in Paris?")
    assert result.terminal is ml.Terminal.END_TURN
    assert result.stop_reason == "stop"
    assert result.text == "Sunny!"
    assert result.custom_tool_uses[0].input == {"city": "Paris"}
    assert result.usage.input_tokens == 20
    sent = emu.received[1]
    assert sent["model"] == "claude-test"  # the prefix is stripped
    assert sent["system"] == "Use tools."
    assert sent["max_tokens"] == 4096
    assert sent["tools"][0]["name"] == "get_weather"
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][2]["content"][0]["type"] == "tool_result"
    assert emu.requests[1].tool_results[0].text == "Sunny in Paris"
    # the neutral transcript stays OpenAI-shaped
    assert result.transcript is not None
    assert result.transcript[2]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_anthropic_errors_map_to_our_tree() -> None:
    with ChatEmulator([say("x")]) as emu:
        bad_key = Local(model="anthropic:c", base_url=emu.anthropic_base_url, api_key="nope")
        with pytest.raises(ml.AuthenticationError):
            ml.run_sync(bad_key, agent=AGENT, prompt="q")
    with ChatEmulator([say("ok")], faults=ChatFaults(statuses=(529,), retry_after="0")) as emu:
        flaky = Local(model="anthropic:c", base_url=emu.anthropic_base_url, api_key=emu.api_key)
        assert ml.run_sync(flaky, agent=AGENT, prompt="q").text == "ok"
        assert len(emu.received) == 2


def test_anthropic_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    provider = Local(model="anthropic:c", base_url="http://127.0.0.1:9")
    with pytest.raises(ml.ConfigError):
        ml.run_sync(provider, agent=AGENT, prompt="q")


def test_neutral_history_converts_to_messages_shape() -> None:
    request = ChatRequest(
        model="claude-x",
        messages=[
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": "calling",
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a": 1}'},
                    },
                    {"id": "t2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "one"},
            {
                "role": "tool",
                "tool_call_id": "t2",
                "content": json.dumps({"error": "bad", "isError": True}),
            },
            {"role": "user", "content": "STOP — fix it"},
        ],
        tools=[
            {
                "type": "function",
                "function": {"name": "f", "description": "F.", "parameters": {"type": "object"}},
            }
        ],
        options={"max_tokens": 100, "temperature": 0},
    )
    kwargs = to_messages_request(request)
    assert kwargs["model"] == "claude-x"
    assert kwargs["system"] == "sys"
    assert kwargs["max_tokens"] == 100
    assert kwargs["temperature"] == 0
    assert kwargs["tools"] == [
        {"name": "f", "description": "F.", "input_schema": {"type": "object"}}
    ]
    assert kwargs["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "t2", "name": "g", "input": {}},
            ],
        },
        {
            "role": "user",  # consecutive tool results and the corrective merge into one turn
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": json.dumps({"error": "bad", "isError": True}),
                    "is_error": True,
                },
                {"type": "text", "text": "STOP — fix it"},
            ],
        },
    ]


def test_messages_response_converts_to_neutral() -> None:
    response = from_messages_response(
        {
            "content": [
                {"type": "text", "text": "a"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )
    assert response.message == {
        "role": "assistant",
        "content": "a",
        "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
        ],
    }
    assert response.finish_reason == "tool_calls"
    assert response.usage == {"prompt_tokens": 10, "completion_tokens": 5}
    for stop, finish in [("end_turn", "stop"), ("max_tokens", "length"), ("pause", "pause")]:
        assert from_messages_response({"stop_reason": stop}).finish_reason == finish
    assert from_messages_response({"content": []}).usage is None
