"""The typed-output loop on the scripted Local model: retries, ``output_invalid``, the
strategies, every kind of type, validators, and the options checked before anything."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

import managedloop as ml
from managedloop.providers import Local
from managedloop.testing import ScriptedChatModel, call, calls, say

from .models import BAD, GOOD, Person, Point, Sky, Weather, get_forecast

pytestmark = pytest.mark.anyio

PLAIN = ml.AgentSpec(name="w", system_prompt="Be brief.")
TOOLED = ml.AgentSpec(name="w", tools=[get_forecast])


def _local(script: list[Any]) -> tuple[Local, ScriptedChatModel]:
    chat = ScriptedChatModel(script)
    return Local(model="m", chat=chat), chat


def _tool_messages(result: ml.SessionResult) -> list[str]:
    assert result.transcript is not None
    return [m["content"] for m in result.transcript if m.get("role") == "tool"]


async def test_invalid_then_valid_through_the_tool_ends_valid_after_one_retry() -> None:
    provider, chat = _local([call("final_result", BAD), call("final_result", GOOD)])
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather)
    assert isinstance(result.output, Weather)
    assert result.output.sky is Sky.SUNNY
    assert result.turns == 2
    assert result.output_failure is None  # refused once, accepted since
    # the errors went back as the output tool's error result, and are in the transcript
    (sent,) = chat.requests[1].tool_results
    assert sent.is_error
    assert "sky" in sent.text
    assert "temperature" in sent.text
    assert "final_result" in sent.text
    (kept,) = _tool_messages(result)
    assert "Input should be 'sunny', 'cloudy' or 'rain'" in kept
    assert result.custom_tool_uses == []


async def test_never_valid_ends_output_invalid_with_the_last_payload_and_errors() -> None:
    last = {"city": "Rome", "sky": "hail", "temperature": {"celsius": "warm"}}
    # (three different payloads: Local answers a repeated identical call itself)
    other = {**BAD, "city": "Nice"}
    script = [call("final_result", BAD), call("final_result", other), call("final_result", last)]
    provider, chat = _local(script)
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather)
    assert result.terminal is ml.Terminal.TERMINATED
    assert result.reason == "output_invalid"
    assert result.output is None
    assert result.turns == 3  # the first answer and output_retries=2 retries
    assert result.output_failure is not None
    assert result.output_failure.payload == last
    locs = [tuple(e["loc"]) for e in result.output_failure.errors]
    assert locs == [("sky",), ("temperature", "celsius")]
    assert all(e["msg"] and e["type"] for e in result.output_failure.errors)
    # serialisable, failure included
    back = ml.SessionResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back.output_failure == result.output_failure
    assert len(chat.requests) == 3


async def test_output_retries_zero_gives_up_at_once() -> None:
    provider, _ = _local([call("final_result", BAD)])
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather, output_retries=0)
    assert (result.reason, result.turns) == ("output_invalid", 1)


async def test_text_strategy_invalid_then_valid_with_a_corrective_message() -> None:
    script = [say("It is sunny in Paris."), say("```json\n" + json.dumps(GOOD) + "\n```")]
    provider, chat = _local(script)
    result = await ml.run(provider, agent=PLAIN, prompt="x", output=Weather, output_strategy="text")
    assert isinstance(result.output, Weather)
    assert result.output_strategy == "text"
    assert "Invalid JSON" in (chat.requests[1].user_text or "")
    assert chat.requests[0].system is not None
    assert '"sky"' in chat.requests[0].system
    assert chat.requests[0].system.startswith("Be brief.")
    assert PLAIN.system_prompt == "Be brief."  # the user's spec is untouched


async def test_native_is_the_default_on_local_without_tools_and_sends_response_format() -> None:
    sent: list[Any] = []
    chat = ScriptedChatModel([say(json.dumps(GOOD))])

    async def recording(request: Any) -> Any:
        sent.append(request.options)
        return await chat(request)

    result = await ml.run(Local(model="m", chat=recording), agent=PLAIN, prompt="x", output=Weather)
    assert isinstance(result.output, Weather)
    assert result.output_strategy == "native"
    fmt = sent[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "Weather"
    assert fmt["json_schema"]["schema"] == pydantic.TypeAdapter(Weather).json_schema()
    assert "strict" not in fmt["json_schema"]  # pydantic's schema is not a strict one
    assert "response_format" not in PLAIN.model_config


async def test_the_tool_strategy_is_the_default_when_the_agent_has_tools() -> None:
    provider, chat = _local([call("final_result", GOOD)])
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather)
    assert result.output_strategy == "tool"
    assert [t.name for t in chat.requests[0].tools] == ["get_forecast", "final_result"]


async def test_an_answer_without_the_output_tool_is_re_prompted() -> None:
    provider, chat = _local([say("Sunny."), call("final_result", GOOD)])
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather)
    assert isinstance(result.output, Weather)
    assert "did not call final_result" in (chat.requests[1].user_text or "")


@pytest.mark.parametrize(
    ("output", "tool_input", "expected"),
    [
        (Point, {"x": 1, "y": 2}, Point(1, 2)),
        (Person, {"name": "Ada", "age": 36}, {"name": "Ada", "age": 36}),
        (int, {"response": 42}, 42),
        (list[Point], {"response": [{"x": 1, "y": 2}]}, [Point(1, 2)]),
        (Point | Person, {"response": {"name": "Ada", "age": 36}}, {"name": "Ada", "age": 36}),
        (Sky, {"response": "rain"}, Sky.RAIN),
    ],
)
async def test_every_kind_of_type_through_the_tool(
    output: Any, tool_input: dict[str, Any], expected: Any
) -> None:
    provider, chat = _local([call("final_result", tool_input)])
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=output)
    assert result.output == expected
    schema = chat.requests[0].tools[1].input_schema
    assert schema["type"] == "object"  # a non-object type is wrapped as {"response": ...}
    back = ml.SessionResult.from_dict(json.loads(json.dumps(result.to_dict())), output=output)
    assert back.output == expected


@pytest.mark.parametrize(
    ("output", "text", "expected"),
    [(int, "42", 42), (list[Point], '[{"x": 1, "y": 2}]', [Point(1, 2)]), (str, '"hi"', "hi")],
)
async def test_scalars_and_lists_as_text(output: Any, text: str, expected: Any) -> None:
    provider, _ = _local([say(text)])
    result = await ml.run(provider, agent=PLAIN, prompt="x", output=output, output_strategy="text")
    assert result.output == expected


async def test_native_wraps_a_type_that_is_not_an_object() -> None:
    sent: list[Any] = []
    chat = ScriptedChatModel([say('{"response": [1, 2]}')])

    async def recording(request: Any) -> Any:
        sent.append(request.options)
        return await chat(request)

    result = await ml.run(
        Local(model="m", chat=recording), agent=PLAIN, prompt="x", output=list[int]
    )
    assert result.output == [1, 2]
    assert sent[0]["response_format"]["json_schema"]["schema"]["required"] == ["response"]


async def test_validators_run_after_pydantic_and_model_retry_re_asks() -> None:
    seen: list[Weather] = []

    def not_paris(w: Weather) -> Weather:
        seen.append(w)
        if w.city == "Paris":
            raise ml.ModelRetry("pick another city than Paris")
        return w

    async def upper(w: Weather) -> Weather:
        return w.model_copy(update={"city": w.city.upper()})

    rome = {**GOOD, "city": "Rome"}
    provider, chat = _local([call("final_result", GOOD), call("final_result", rome)])
    result = await ml.run(
        provider, agent=TOOLED, prompt="x", output=Weather, output_validator=[not_paris, upper]
    )
    assert isinstance(result.output, Weather)
    assert result.output.city == "ROME"
    assert [w.city for w in seen] == ["Paris", "Rome"]
    assert "pick another city than Paris" in chat.requests[1].tool_results[0].text


async def test_a_validator_that_always_refuses_ends_output_invalid() -> None:
    def never(w: Weather) -> None:
        raise ml.ModelRetry("no")

    provider, _ = _local([call("final_result", {**GOOD, "city": c}) for c in "ABC"])
    result = await ml.run(
        provider, agent=TOOLED, prompt="x", output=Weather, output_validator=never
    )
    assert result.reason == "output_invalid"
    assert result.output_failure is not None
    assert result.output_failure.errors == [{"loc": [], "msg": "no", "type": "model_retry"}]


async def test_unreadable_output_arguments_are_refused_and_re_asked() -> None:
    from managedloop.testing import Reply, ToolCall

    class Broken(ToolCall):
        @property
        def arguments(self) -> str:
            return "{not json"

    script = [Reply(tool_calls=[Broken(name="final_result")]), call("final_result", GOOD)]
    provider, chat = _local(script)
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather)
    assert isinstance(result.output, Weather)
    assert "not valid JSON" in chat.requests[1].tool_results[0].text


async def test_several_output_calls_in_one_turn_the_first_valid_one_wins() -> None:
    provider, _ = _local([calls(("final_result", BAD), ("final_result", GOOD))])
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather)
    assert isinstance(result.output, Weather)
    assert result.turns == 1
    other = {**BAD, "city": "Nice"}
    provider, chat = _local(
        [calls(("final_result", BAD), ("final_result", other)), call("final_result", GOOD)]
    )
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather)
    assert isinstance(result.output, Weather)
    assert result.turns == 2
    texts = [r.text for r in chat.requests[1].tool_results]
    assert len(texts) == 2
    assert "refused as well" in texts[1]


async def test_max_turns_still_accepts_a_valid_output_on_the_last_turn() -> None:
    provider, _ = _local([call("get_forecast", {"city": "P"}), call("final_result", GOOD)])
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather, max_turns=2)
    assert isinstance(result.output, Weather)
    provider, _ = _local([call("get_forecast", {"city": "P"}), call("final_result", BAD)])
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather, max_turns=2)
    assert (result.reason, result.turns) == ("output_invalid", 2)  # no turn left to retry


async def test_a_token_budget_halts_before_the_output_is_read() -> None:
    provider, _ = _local([call("final_result", GOOD)])
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather, max_total_tokens=1)
    assert (result.reason, result.output) == ("token_budget", None)
    assert result.output_strategy == "tool"


async def test_approvals_compose_the_held_tool_is_decided_and_the_output_read() -> None:
    @ml.tool(requires_approval=True)
    def book(city: str) -> str:
        """Book a trip."""
        return f"booked {city}"

    spec = ml.AgentSpec(name="w", tools=[book])
    provider, _ = _local([calls(("book", {"city": "Rome"})), call("final_result", GOOD)])
    result = await ml.run(
        provider, agent=spec, prompt="x", output=Weather, confirm=lambda r: ml.Approve()
    )
    assert isinstance(result.output, Weather)
    assert [u.name for u in result.custom_tool_uses] == ["book"]


async def test_a_live_session_types_every_request() -> None:
    provider, _ = _local(
        [call("final_result", GOOD), call("final_result", {**GOOD, "city": "Oslo"})]
    )
    async with ml.start(provider, agent=TOOLED, prompt="x", output=Weather) as session:
        first = await session.result()
        await session.send("and Oslo?")
        second = await session.result()
    assert isinstance(first.output, Weather)
    assert first.output.city == "Paris"
    assert isinstance(second.output, Weather)
    assert second.output.city == "Oslo"
    # the first output call was left open and answered before the follow-up message
    assert second.transcript is not None
    roles = [m["role"] for m in second.transcript]
    assert roles.count("tool") == 1


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"output": Weather, "output_strategy": "json"}, "output_strategy"),
        ({"output": Weather, "output_retries": -1}, "output_retries"),
        ({"output": Weather, "output_retries": True}, "output_retries"),
        ({"output": Weather, "output_validator": 3}, "output_validator"),
        ({"output": object()}, "output"),
    ],
)
async def test_bad_output_options_fail_before_any_request(
    options: dict[str, Any], option: str
) -> None:
    provider, chat = _local([say("x")])
    with pytest.raises(ml.InvalidOptionsError) as caught:
        await ml.run(provider, agent=TOOLED, prompt="x", **options)
    assert caught.value.context["option"] == option
    assert chat.requests == []


async def test_a_user_tool_named_like_the_output_tool_is_refused() -> None:
    @ml.tool
    def final_result(answer: str) -> str:
        """Not an output tool."""
        return answer

    provider, chat = _local([say("x")])
    with pytest.raises(ml.InvalidOptionsError, match="final_result"):
        await ml.run(provider, agent=ml.AgentSpec(tools=[final_result]), prompt="x", output=Weather)
    assert chat.requests == []


class Closed(pydantic.BaseModel):
    """A schema OpenAI's strict mode takes as it is: closed, every property required."""

    model_config = pydantic.ConfigDict(extra="forbid")
    city: str
    celsius: float


async def test_native_is_strict_where_the_schema_is_a_strict_one() -> None:
    sent: list[Any] = []
    chat = ScriptedChatModel([say('{"city": "Oslo", "celsius": 3}')])

    async def recording(request: Any) -> Any:
        sent.append(request.options)
        return await chat(request)

    result = await ml.run(Local(model="m", chat=recording), agent=PLAIN, prompt="x", output=Closed)
    assert result.output == Closed(city="Oslo", celsius=3)
    assert sent[0]["response_format"]["json_schema"]["strict"] is True


async def test_the_llama_cpp_profile_sends_json_object_with_the_schema() -> None:
    sent: list[Any] = []
    chat = ScriptedChatModel([say('{"city": "Oslo", "celsius": 3}')])

    async def recording(request: Any) -> Any:
        sent.append(request.options)
        return await chat(request)

    provider = Local(model="m", chat=recording, profile="llama.cpp")
    result = await ml.run(provider, agent=PLAIN, prompt="x", output=Closed)
    assert result.output == Closed(city="Oslo", celsius=3)
    assert sent[0]["response_format"] == {
        "type": "json_object",
        "schema": pydantic.TypeAdapter(Closed).json_schema(),
    }


async def test_native_is_refused_on_a_host_without_it_before_anything_is_sent() -> None:
    class Hosted:
        name = "claude"
        supports_outcomes = True
        supports_raw_events = True

        async def open(self, request: Any) -> Any:
            raise AssertionError("never opened")

    with pytest.raises(ml.InvalidOptionsError) as caught:
        await ml.run(Hosted(), agent=PLAIN, prompt="x", output=Closed, output_strategy="native")
    assert caught.value.code == "output_strategy_unsupported"


async def test_a_too_deep_output_is_refused_never_validated() -> None:
    deep: Any = "x"
    for _ in range(100):
        deep = {"a": deep}
    provider, chat = _local([call("final_result", {"city": deep}), call("final_result", GOOD)])
    result = await ml.run(provider, agent=TOOLED, prompt="x", output=Weather)
    assert isinstance(result.output, Weather)
    assert "nested deeper than 64" in chat.requests[1].tool_results[0].text


async def test_the_host_spec_is_made_once_per_setup_and_matches_a_fresh_one() -> None:
    from managedloop.session.output import plan_and_spec

    provider, chat = _local([say(json.dumps(GOOD)), say(json.dumps(GOOD))])
    spec = ml.AgentSpec(name="once", system_prompt="Be brief.")
    options: dict[str, Any] = {
        "strategy": "text",
        "retries": 2,
        "validators": None,
        "provider": provider,
        "spec": spec,
        "tools": [],
    }
    plan, host = plan_and_spec(Weather, **options)
    again, host_again = plan_and_spec(Weather, **options)
    assert again is plan
    assert host_again is host  # the cached copy, not a new one per run
    assert host == plan.host_spec(spec, provider)  # what a fresh copy would be
    assert host is not None
    assert host.system_prompt != spec.system_prompt  # the schema added
    for _ in range(2):
        result = await ml.run(
            provider, agent=spec, prompt="x", output=Weather, output_strategy="text"
        )
        assert isinstance(result.output, Weather)
    prompts = [r.system for r in chat.requests]
    assert prompts == [host.system_prompt, host.system_prompt]
    assert spec.system_prompt == "Be brief."  # the user's spec is unchanged
