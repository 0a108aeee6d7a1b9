"""Local's constructor refuses bad options before any request (issue 7), and the named
compatibility profiles set what goes on the wire (issue 8 item 4)."""

from __future__ import annotations

import math
from typing import Any

import pytest

import managedloop as ml
from managedloop.providers.local import Local
from managedloop.providers.local._profiles import PROFILES, Profile
from managedloop.testing import ChatEmulator, call, say
from weather import get_weather

AGENT = ml.AgentSpec(tools=[get_weather])


def test_unknown_keywords_are_invalid_opts_listing_the_accepted_ones() -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        Local(model="m", base_url="http://127.0.0.1:1/v1", temprature=0.2)  # type: ignore[call-arg]
    assert info.value.code == "invalid_opts"
    assert info.value.context["option"] == "temprature"
    for accepted in ("base_url", "model_config", "profile", "timeout", "stream"):
        assert accepted in str(info.value)
    assert "unknown" not in str(info.value).split("accepted:")[1]


@pytest.mark.parametrize(
    "option", ["timeout", "connect_timeout", "retry_backoff", "max_retry_after"]
)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, "1"])
def test_every_duration_refuses_nan_inf_and_non_numbers(option: str, value: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        Local(model="m", base_url="http://127.0.0.1:1/v1", **{option: value})
    assert info.value.code == "invalid_opts"
    assert info.value.context["option"] == option


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://u:pw@h:abc/v1", None),  # a bad port behind credentials
        ("http://[::1/v1", None),
        ("http://host/v1\n", None),  # a trailing newline (fullmatch-style: whole string)
        ("http://ho st/v1", None),
    ],
)
def test_malformed_urls_are_invalid_opts_and_hide_credentials(url: str, shown: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        Local(model="m", base_url=url, api_key=None)
    assert info.value.context["option"] == "base_url"
    assert "pw" not in str(info.value)


def test_userinfo_is_masked_entirely_in_repr() -> None:
    local = Local(model="m", base_url="http://alice@127.0.0.1:9/v1", api_key=None)
    assert "alice" not in repr(local)
    assert "***@127.0.0.1:9" in repr(local)
    local = Local(model="m", base_url="http://alice:pw-1@127.0.0.1:9/v1", api_key=None)
    assert "alice" not in repr(local)
    assert "pw-1" not in repr(local)


def test_credentials_in_base_url_plus_an_api_key_are_refused_at_construction() -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        Local(model="m", base_url="http://alice:pw-2@127.0.0.1:9/v1", api_key="sk-x")
    assert info.value.context["option"] == "base_url"
    assert "pw-2" not in str(info.value)
    assert "sk-x" not in str(info.value)


# -- profiles --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["llamacpp", "", 3, object()])
def test_an_unknown_profile_is_invalid_opts(bad: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        Local(model="m", base_url="http://127.0.0.1:1/v1", profile=bad)
    assert info.value.context["option"] == "profile"
    assert "llama.cpp" in str(info.value)


def run_once(profile: Any, streamed: bool, **config: Any) -> dict[str, Any]:
    script = [call("get_weather", {"city": "Paris"}), say("ok")]
    with ChatEmulator(script) as emu:
        local = Local(
            model="m",
            base_url=emu.base_url,
            api_key=emu.api_key,
            profile=profile,
            stream=streamed,
            model_config=config,
        )
        ml.run_sync(local, agent=AGENT, prompt="q")
    return emu.received[1]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", [None, *PROFILES])
def test_each_profile_sends_what_its_table_row_says(name: str | None, stream: bool) -> None:
    profile = PROFILES[name or "default"]
    body = run_once(name, stream, parallel_tool_calls=False, temperature=0)
    assert body.get("tool_choice") == profile.tool_choice
    assert ("parallel_tool_calls" in body) is profile.parallel_tool_calls
    assert body["temperature"] == 0  # model_config keys go verbatim
    if stream and profile.tool_choice == "auto" and not profile.stream_auto_tools:
        # llama.cpp: a call offering tools with tool_choice "auto" goes out unstreamed
        assert "stream" not in body
        assert "stream_options" not in body
    elif stream:
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
    else:
        assert "stream" not in body
        assert "stream_options" not in body
    assistant = body["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == ""


def test_the_default_profile_is_the_documented_one() -> None:
    assert Local(model="m", base_url="http://127.0.0.1:1/v1").profile is PROFILES["default"]
    assert PROFILES["default"].tool_choice == "auto"  # llama.cpp's server needs it


def test_model_config_wins_over_the_profile_and_stream_options_merge() -> None:
    body = run_once(
        "llama.cpp", True, tool_choice="required", stream_options={"x": 1}, stream=False
    )
    assert body["tool_choice"] == "required"
    assert body["stream"] is True  # Local(stream=...) decides, not model_config
    assert body["stream_options"] == {"x": 1, "include_usage": True}


def test_a_custom_profile_can_send_null_content_and_no_usage_request() -> None:
    profile = Profile(name="old-server", null_content=True, include_usage=False)
    body = run_once(profile, True)
    assert body["messages"][1]["content"] is None
    assert "stream_options" not in body
    assert "tool_choice" not in body
    assert "profile='old-server'" in repr(
        Local(model="m", base_url="http://127.0.0.1:1/v1", profile=profile)
    )


def test_usage_not_reported_is_an_empty_raw_list_not_zero() -> None:
    with ChatEmulator([say("hi", usage=None)]) as emu:
        local = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True)
        result = ml.run_sync(local, agent=AGENT, prompt="q")
    assert result.usage.raw == []  # the signal for "not reported"
    with ChatEmulator([say("hi", usage=(0, 0))]) as emu:
        local = Local(model="m", base_url=emu.base_url, api_key=emu.api_key, stream=True)
        result = ml.run_sync(local, agent=AGENT, prompt="q")
    assert result.usage.raw != []  # reported, and zero
    assert (result.usage.input_tokens, result.usage.output_tokens) == (0, 0)


@pytest.mark.anyio
async def test_a_chat_function_local_holds_no_http_pool_and_shares_its_retry_policy() -> None:
    """A chat function replaces HTTP: no pool is made (entering and closing the provider
    still work); equal retry settings share one frozen policy, a bad one raises each time."""
    from managedloop.testing import ScriptedChatModel

    first = Local(model="m", chat=ScriptedChatModel([say("hi")]), retry_backoff=2.5)
    second = Local(model="m", chat=ScriptedChatModel([say("hi")]), retry_backoff=2.5)
    assert first._pool is None
    assert first._retry.policy is second._retry.policy
    assert first._retry.policy.base == 2.5
    assert Local(model="m", chat=ScriptedChatModel([]), retry_backoff=1)._retry.policy.base == 1.0
    async with first as provider:
        assert (await ml.run(provider, agent=AGENT, prompt="x")).text == "hi"
    await first.aclose()
    for _ in range(2):
        with pytest.raises(ml.InvalidOptionsError):
            Local(model="m", chat=ScriptedChatModel([]), max_retries=-1)
    assert Local(model="m", base_url="http://127.0.0.1:1/v1")._pool is not None
