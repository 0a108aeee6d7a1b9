"""``prepare``'s shortcuts (a spec's toolset derived once, the records built with their
slots set directly) give what the plain construction gives."""

from __future__ import annotations

import gc

import pytest

import managedloop as ml
from managedloop.hosts import OpenRequest
from managedloop.session import options
from managedloop.session.machine import LoopOptions
from managedloop.session.options import Prepared, prepare
from managedloop.testing import ScriptedChatModel


def weather(city: str) -> str:
    """Weather."""
    return city


def _provider() -> ml.providers.Local:
    return ml.providers.Local(model="m", chat=ScriptedChatModel([]))


def test_a_specs_toolset_is_derived_once_and_dropped_with_the_spec() -> None:
    spec = ml.AgentSpec(tools=[ml.tool(weather)])
    first, _ = prepare(_provider(), agent=spec, options={})
    second, _ = prepare(_provider(), agent=spec, options={})
    assert first.handler is second.handler  # one Toolset serves every run of the spec
    assert [t.name for t in first.handler] == ["weather"]
    tools = first.open_request.tools
    assert tools == second.open_request.tools == spec.tool_definitions()
    assert tools is not second.open_request.tools  # each run gets its own list
    key = id(spec)
    assert key in options._DERIVED
    del spec, first, second
    gc.collect()
    assert key not in options._DERIVED
    other = ml.AgentSpec(tools=[ml.tool(weather)])  # a new spec, its own toolset
    assert prepare(_provider(), agent=other, options={})[0].handler is not None


def test_an_explicit_handler_still_serves_and_the_spec_still_names_the_tools() -> None:
    spec = ml.AgentSpec(tools=[ml.tool(weather)])

    class Handler:
        def handle_tool_call(self, name: str, input: dict[str, object], info: object) -> str:
            return "x"

    handler = Handler()
    prepared, _ = prepare(_provider(), agent=spec, options={"handler": handler})
    assert prepared.handler is handler
    assert [t.name for t in prepared.open_request.tools] == ["weather"]


def test_the_records_equal_the_dataclass_constructors() -> None:
    spec = ml.AgentSpec(tools=[ml.tool(weather)], terminal_tool="weather")
    provider = _provider()
    prepared, _ = prepare(
        provider, agent=spec, options={"max_turns": 7, "telemetry_metadata": {"k": "v"}}
    )
    loop = LoopOptions(max_turns=7, terminal_tool="weather", max_reprompts=2)
    request = OpenRequest(spec=spec, agent=spec, tools=spec.tool_definitions(), metadata={"k": "v"})
    assert prepared.loop == loop
    assert repr(prepared.loop) == repr(loop)
    assert prepared.open_request == request
    expected = Prepared(
        provider=provider,
        handler=prepared.handler,
        open_request=request,
        loop=loop,
        max_concurrent_tools=8,
        tool_timeout=None,
        caller={"k": "v", "provider": "local"},
        info_metadata={"k": "v"},
        approvals={},
        confirm=None,
        model=None,  # the spec's (none): the host reports the model it sends itself
        agent_meta={"agent": None, "agent_id": None},
    )
    assert prepared == expected
    with pytest.raises(AttributeError):
        prepared.handler = None  # type: ignore[misc]  # still frozen
