"""Tools and handlers: schema derivation, validation, error results, timeouts.

Reference §9 lines covered: tools_test (ok / error / raising handler / function handler),
tool_schema_test (types, docs as descriptions, required list, defaults not required).
Deliberate changes: tools are Python functions with type hints (pydantic derives the
schema) rather than keyword schemas; handlers are objects with ``handle_tool_call``.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

import anyio
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

import managedloop as ml
from managedloop.handler import error_payload, is_error_payload, run_tool_calls

pytestmark = pytest.mark.anyio

INFO = ml.SessionInfo(session_id="s1", provider="fake")


class Address(pydantic.BaseModel):
    city: str
    zip: str | None = None


@ml.tool
def weather(city: str, days: int = 1, units: Literal["c", "f"] = "c") -> str:
    """Current weather for a city.

    Args:
        city: The city name.
        days: How many days ahead,
            counting today.
        units: Temperature units.
    """
    return f"{city}:{days}:{units}"


@ml.tool(name="ship", description="Ship a parcel.", timeout=5)
async def ship_parcel(to: Address, fragile: bool = False) -> dict[str, Any]:
    return {"city": to.city, "fragile": fragile}


def test_schema_from_hints_defaults_and_docstring() -> None:
    d = weather.definition
    assert d.name == "weather"
    assert d.description == "Current weather for a city."
    assert d.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "city": {"type": "string", "description": "The city name."},
            "days": {
                "type": "integer",
                "default": 1,
                "description": "How many days ahead, counting today.",
            },
            "units": {
                "enum": ["c", "f"],
                "type": "string",
                "default": "c",
                "description": "Temperature units.",
            },
        },
        "required": ["city"],
    }


def test_pydantic_model_parameters_and_overrides() -> None:
    d = ship_parcel.definition
    assert (d.name, d.description) == ("ship", "Ship a parcel.")
    assert d.input_schema["properties"]["to"] == {"$ref": "#/$defs/Address"}
    assert "Address" in d.input_schema["$defs"]
    assert d.input_schema["required"] == ["to"]


def test_the_decorated_function_still_calls() -> None:
    assert weather("Oslo", days=2) == "Oslo:2:c"
    assert repr(weather) == "Tool(name='weather')"


def test_session_info_parameter_is_injected_not_shown() -> None:
    @ml.tool
    def whoami(info: ml.SessionInfo, prefix: str = "") -> str:
        return prefix + str(info.session_id)

    assert whoami.definition.input_schema["properties"] == {
        "prefix": {"type": "string", "default": ""}
    }
    assert whoami.bind({}, INFO) == {"prefix": "", "info": INFO}


@pytest.mark.parametrize(
    "define",
    [
        lambda: ml.tool(lambda *args: None),
        lambda: ml.tool(lambda **kw: None),
        lambda: ml.tool(name="bad name!")(lambda: None),
        lambda: ml.tool(timeout=0)(lambda: None),
        lambda: ml.Toolset([weather, weather]),
        lambda: ml.AgentSpec(tools=[weather, ml.ToolDefinition(name="weather")]),
        lambda: ml.tool(42),  # type: ignore[call-overload]
    ],
)
def test_bad_definitions_fail_at_definition_time(define: Any) -> None:
    with pytest.raises(ml.ToolDefinitionError):
        define()


def test_a_type_with_no_json_schema_fails_at_definition() -> None:
    class Opaque:
        pass

    def f(x: Opaque) -> str:
        return ""

    with pytest.raises(ml.ToolDefinitionError) as info:
        ml.tool(f)
    assert "f" in str(info.value)
    assert isinstance(info.value, TypeError)


def use(name: str, input: dict[str, Any] | None = None, id: str = "u1") -> ml.ToolUse:
    return ml.ToolUse(id=id, name=name, input=input or {})


async def call(toolset: Any, u: ml.ToolUse, **kw: Any) -> ml.ToolResult:
    [result] = await run_tool_calls(toolset, [u], INFO, **kw)
    return result


async def test_valid_call_and_str_result() -> None:
    result = await call(ml.Toolset([weather]), use("weather", {"city": "Rome"}))
    assert result == ml.ToolResult(tool_use_id="u1", text="Rome:1:c")


async def test_non_string_results_become_json() -> None:
    result = await call(ml.Toolset([ship_parcel]), use("ship", {"to": {"city": "Oslo"}}))
    assert result.text == '{"city":"Oslo","fragile":false}'


async def test_invalid_input_is_an_error_result_and_the_function_does_not_run() -> None:
    ran = []

    @ml.tool
    def f(n: int) -> str:
        ran.append(n)
        return "ran"

    result = await call(ml.Toolset([f]), use("f", {"n": "not a number"}))
    assert result.is_error
    assert "invalid input for tool 'f'" in result.text
    assert "n:" in result.text
    extra = await call(ml.Toolset([f]), use("f", {"n": 1, "other": 2}))
    assert extra.is_error
    assert "other" in extra.text
    assert ran == []


async def test_tool_error_unknown_tool_and_exceptions_become_error_results() -> None:
    @ml.tool
    def refuse() -> str:
        raise ml.ToolError("not allowed here")

    @ml.tool
    async def crash() -> str:
        raise ValueError("bad value")

    toolset = ml.Toolset([refuse, crash])
    assert await call(toolset, use("refuse")) == ml.ToolResult(
        tool_use_id="u1", text="not allowed here", is_error=True
    )
    crashed = await call(toolset, use("crash"))
    assert crashed.is_error
    assert crashed.text == "tool 'crash' raised ValueError: bad value"
    unknown = await call(toolset, use("nope"))
    assert unknown.is_error
    assert "unknown tool 'nope'" in unknown.text
    assert "crash, refuse" in unknown.text


async def test_tool_result_objects_keep_their_error_flag() -> None:
    @ml.tool
    def f() -> ml.ToolResult:
        return ml.ToolResult(tool_use_id="ignored", text="bad", is_error=True)

    assert await call(ml.Toolset([f]), use("f")) == ml.ToolResult(
        tool_use_id="u1", text="bad", is_error=True
    )


async def test_per_tool_and_session_timeouts() -> None:
    @ml.tool(timeout=0.05)
    async def slow() -> str:
        await anyio.sleep_forever()
        return "late"

    @ml.tool
    async def slow_too() -> str:
        await anyio.sleep_forever()
        return "late"

    result = await call(ml.Toolset([slow]), use("slow"))
    assert result.is_error
    assert result.text == "tool 'slow' timed out after 0.05s"
    session_wide = await call(ml.Toolset([slow_too]), use("slow_too"), timeout=0.05)
    assert session_wide.is_error
    assert session_wide.text == "tool 'slow_too' timed out after 0.05s"


async def test_sync_tools_run_in_a_worker_thread_unless_inline() -> None:
    main = threading.get_ident()

    @ml.tool
    def threaded() -> str:
        return "worker" if threading.get_ident() != main else "loop"

    @ml.tool(inline=True)
    def inline() -> str:
        return "worker" if threading.get_ident() != main else "loop"

    toolset = ml.Toolset([threaded, inline])
    results = await run_tool_calls(toolset, [use("threaded", id="a"), use("inline", id="b")], INFO)
    assert [r.text for r in results] == ["worker", "loop"]


async def test_plain_object_handlers_sync_and_async() -> None:
    class SyncHandler:
        def handle_tool_call(self, name: str, input: dict[str, Any], info: ml.SessionInfo) -> str:
            return f"{name}:{input['x']}:{info.session_id}"

    class AsyncHandler:
        async def handle_tool_call(self, name: str, input: dict[str, Any], info: Any) -> Any:
            raise ml.ToolError("fn-error")

    assert (await call(SyncHandler(), use("t", {"x": 1}))).text == "t:1:s1"
    failed = await call(AsyncHandler(), use("t"))
    assert (failed.text, failed.is_error) == ("fn-error", True)


def test_error_payload_shape() -> None:
    assert error_payload("boom") == '{"error": "boom", "isError": true}'


def test_is_error_payload_reads_back_error_payload_only() -> None:
    assert is_error_payload(error_payload("boom"))
    assert is_error_payload(' {"isError": true}')
    for text in ("boom", "", "{", '{"isError": "true"}', '{"error": "x"}', "[1]"):
        assert not is_error_payload(text)


def test_toolset_protocol() -> None:
    toolset = ml.Toolset([weather, lambda_tool])
    assert len(toolset) == 2
    assert "weather" in toolset
    assert [t.name for t in toolset] == ["weather", "lambda_tool"]
    assert [d.name for d in toolset.definitions()] == ["weather", "lambda_tool"]
    assert repr(toolset) == "Toolset(['weather', 'lambda_tool'])"
    assert isinstance(toolset, ml.Handler)


def lambda_tool(a: int) -> int:
    """Plain functions are wrapped as tools."""
    return a


def test_agent_spec_wraps_a_plain_function_once() -> None:
    def plain(city: str) -> str:
        """Weather."""
        return city

    spec = ml.AgentSpec(tools=[plain])
    assert spec.tools == (plain,)  # the spec keeps what it was given
    first, second = spec.toolset().get("plain"), spec.toolset().get("plain")
    assert first is not None
    assert first is second  # no schema derivation per run
    assert spec.tool_definitions() == [first.definition]


@pytest.mark.parametrize("name", ["get_weather\n", "get weather", "", "x" * 129, "é"])
def test_a_tool_name_must_match_entirely(name: str) -> None:
    # `re.match` with `$` accepted "get_weather\n" (found by the hostile review of issue 7).
    with pytest.raises(ml.ToolDefinitionError):
        ml.ToolDefinition(name=name)


@ml.tool
def many(  # every kind of field a flat input model holds
    count: int,
    ratio: float = 0.5,
    tags: list[str] = [],  # noqa: B006 (pydantic copies a mutable default per call)
    extra: dict[str, int] | None = None,
    when: Literal["now", "later"] = "now",
    *,
    info: ml.SessionInfo,
) -> str:
    return ""


def _by_model(t: ml.Tool[..., Any], arguments: Any) -> Any:
    """What ``bind`` gave before its fields validator: the model's own validation, the
    values read back off the instance (plus the session info)."""
    try:
        validated = t._model.model_validate(arguments)
    except pydantic.ValidationError as exc:
        return exc.title, exc.errors(), str(exc)
    kwargs = {name: getattr(validated, name) for name in t._model_params}
    if t._info_param is not None:
        kwargs[t._info_param] = INFO
    return kwargs


def _by_bind(t: ml.Tool[..., Any], arguments: Any) -> Any:
    try:
        return t.bind(arguments, INFO)
    except pydantic.ValidationError as exc:
        return exc.title, exc.errors(), str(exc)


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
_keys = st.sampled_from(["city", "days", "units", "to", "count", "ratio", "tags", "extra", "x"])


@pytest.mark.fuzz
@given(st.dictionaries(_keys, _values, max_size=5) | _values)
def test_bind_validates_as_the_input_model_does(arguments: Any) -> None:
    """``bind`` validates a flat input model's fields without building the model: the same
    keyword arguments, or the same ``ValidationError`` (title, errors, text); a model with
    nested definitions goes through the model itself."""
    for t in (weather, ship_parcel, many, tree):
        assert _by_bind(t, arguments) == _by_model(t, arguments)
    assert ship_parcel._fields is not False  # a nested model's schema is inlined
    assert tree._fields is False  # a recursive one is a definition: the model validates


class Node(pydantic.BaseModel):
    name: str
    children: list[Node] = []


@ml.tool
def tree(root: Node, x: int = 0) -> str:
    return root.name


def test_bind_copies_a_mutable_default_per_call() -> None:
    first, second = many.bind({"count": 1}, INFO), many.bind({"count": 2}, INFO)
    assert first == {
        "count": 1,
        "ratio": 0.5,
        "tags": [],
        "extra": None,
        "when": "now",
        "info": INFO,
    }
    assert first["tags"] is not second["tags"]
