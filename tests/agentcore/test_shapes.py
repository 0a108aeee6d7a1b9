"""Every emulator route's response, checked strictly against botocore's output shapes.

botocore parses leniently (an unknown key is dropped, a wrong type often passes through),
so the *raw* JSON of every response body, and of every event-stream frame's payload, is
walked against the operation's output shape here: an unknown key, a missing required
member, a wrong type, a value outside an enum or a union with other than one member fails.
The routes come from the emulator's own table (``ROUTES``), and the test fails if a route
is missing from the calls below or a call hits a route not in the table, so a new route
cannot go unchecked. (Success responses only: error bodies follow botocore's generic
error parsing.)
"""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import botocore.session
import pytest
from botocore.eventstream import EventStreamBuffer

from managedloop.providers.agentcore._signing import prepare_request
from managedloop.testing import call
from managedloop.testing.agentcore import ROUTES, AgentCoreEmulator

SID = "shapes-" + "s" * 40


def walk(value: Any, shape: Any, path: str = "$") -> Iterator[str]:
    """Every way ``value`` (raw JSON) departs from ``shape``."""
    kind = shape.type_name
    if kind == "structure":
        if not isinstance(value, dict):
            yield f"{path}: expected an object, got {type(value).__name__}"
            return
        members = {
            m.serialization.get("name", name): (name, m)
            for name, m in shape.members.items()
            if m.serialization.get("location") is None
        }
        for key in value:
            if key not in members:
                yield f"{path}.{key}: not a member of {shape.name}"
        for required in shape.required_members:
            wire = shape.members[required].serialization.get("name", required)
            if shape.members[required].serialization.get("location") is None and (
                wire not in value
            ):
                yield f"{path}.{wire}: required by {shape.name}, missing"
        if shape.is_tagged_union and len(value) != 1:
            yield f"{path}: union {shape.name} must have exactly one member, has {len(value)}"
        for key, item in value.items():
            if key in members:
                yield from walk(item, members[key][1], f"{path}.{key}")
    elif kind == "list":
        if not isinstance(value, list):
            yield f"{path}: expected a list, got {type(value).__name__}"
            return
        for i, item in enumerate(value):
            yield from walk(item, shape.member, f"{path}[{i}]")
    elif kind == "map":
        if not isinstance(value, dict):
            yield f"{path}: expected a map, got {type(value).__name__}"
            return
        for key, item in value.items():
            yield from walk(key, shape.key, f"{path}<key>")
            yield from walk(item, shape.value, f"{path}[{key!r}]")
    elif kind == "string":
        if not isinstance(value, str):
            yield f"{path}: expected a string, got {type(value).__name__}"
        elif shape.enum and value not in shape.enum:
            yield f"{path}: {value!r} not in enum {shape.name}"
    elif kind in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            yield f"{path}: expected an integer, got {value!r}"
    elif kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            yield f"{path}: expected a number, got {value!r}"
    elif kind == "boolean":
        if not isinstance(value, bool):
            yield f"{path}: expected a boolean, got {value!r}"
    elif kind == "timestamp":
        # rest-json bodies carry epoch seconds; a plausible one is after 2020
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 1.5e9:
            yield f"{path}: expected epoch seconds, got {value!r}"
    elif kind == "blob":
        try:
            base64.b64decode(value, validate=True)
        except (TypeError, ValueError):
            yield f"{path}: expected base64, got {value!r}"
    # "document" shapes take any JSON


def body_problems(operation: Any, body: bytes) -> list[str]:
    shape = operation.output_shape
    payload = shape.serialization.get("payload") if shape is not None else None
    if shape is None:
        return [] if not body else ["a body for an operation with no output"]
    if payload is not None:
        shape = shape.members[payload]
    return list(walk(json.loads(body or b"{}"), shape))


def frame_problems(operation: Any, data: bytes) -> list[str]:
    stream = operation.get_event_stream_output()
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    problems: list[str] = []
    count = 0
    for message in buffer:
        count += 1
        headers = message.headers
        assert headers[":message-type"] == "event", headers
        event_type = headers[":event-type"]
        if event_type not in stream.members:
            problems.append(f"{event_type}: not an event of {stream.name}")
            continue
        event = stream.members[event_type]
        target = next(
            (m for m in event.members.values() if m.serialization.get("eventpayload")), event
        )
        problems += walk(json.loads(message.payload), target, f"${event_type}")
    assert count, "no frames"
    return problems


@pytest.fixture
def emu() -> Iterator[AgentCoreEmulator]:
    with AgentCoreEmulator([call("lookup", {"city": "Paris"}, text="Looking.")]) as e:
        yield e


def _raw(client: Any, operation: str, params: dict[str, Any]) -> bytes:
    """Send one data-plane call exactly as signed by botocore; the raw response body."""
    request = prepare_request(client, operation, params)
    headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
    http = urllib.request.Request(request.url, data=request.body, headers=headers, method="POST")
    with urllib.request.urlopen(http, timeout=30) as response:
        assert response.status == 200
        return bytes(response.read())


def test_every_route_answers_within_its_botocore_output_shape(emu: AgentCoreEmulator) -> None:
    from managedloop.providers.agentcore._signing import install_capture

    session = botocore.session.get_session()
    control = session.create_client("bedrock-agentcore-control", **emu.client_kwargs)
    data = session.create_client("bedrock-agentcore", **emu.client_kwargs)
    install_capture(data)
    bodies: dict[str, list[str]] = {}

    def capture(http_response: Any = None, operation_model: Any = None, **_: Any) -> None:
        if http_response is not None and operation_model is not None:
            # a 204 (TagResource) has no body for botocore to read
            body = http_response.content if http_response.raw is not None else b""
            problems = body_problems(operation_model, body)
            bodies.setdefault(operation_model.name, []).extend(problems)

    control.meta.events.register("after-call.bedrock-agentcore-control", _after_call(capture))
    try:
        created = control.create_harness(
            harnessName="shapes_harness", executionRoleArn=emu.execution_role_arn
        )["harness"]
        control.list_harnesses()
        control.get_harness(harnessId=emu.harness_id)
        control.list_harness_endpoints(harnessId=emu.harness_id)
        control.create_harness_endpoint(harnessId=emu.harness_id, endpointName="live")
        control.get_harness_endpoint(harnessId=emu.harness_id, endpointName="DEFAULT")
        control.update_harness(harnessId=emu.harness_id, maxIterations=5)
        control.list_harness_versions(harnessId=emu.harness_id)
        control.get_harness(harnessId=emu.harness_id, harnessVersion="1")
        control.update_harness_endpoint(
            harnessId=emu.harness_id, endpointName="live", targetVersion="2"
        )
        control.tag_resource(resourceArn=emu.harness_arn, tags={"k": "v"})
        control.list_tags_for_resource(resourceArn=emu.harness_arn)
        control.delete_harness_endpoint(harnessId=emu.harness_id, endpointName="live")
        control.delete_harness(harnessId=created["harnessId"])

        invoke = data.meta.service_model.operation_model("InvokeHarness")
        raw = _raw(
            data,
            "invoke_harness",
            {
                "harnessArn": emu.harness_arn,
                "runtimeSessionId": SID,
                "messages": [{"role": "user", "content": [{"text": "go"}]}],
            },
        )
        bodies["InvokeHarness"] = frame_problems(invoke, raw)
        command = data.meta.service_model.operation_model("InvokeAgentRuntimeCommand")
        raw = _raw(
            data,
            "invoke_agent_runtime_command",
            {
                "agentRuntimeArn": emu.harness_arn,
                "runtimeSessionId": SID,
                "body": {"command": "echo hi"},
            },
        )
        bodies["InvokeAgentRuntimeCommand"] = frame_problems(command, raw)
        data.meta.events.register("after-call.bedrock-agentcore", _after_call(capture))
        stopped = data.stop_runtime_session(agentRuntimeArn=emu.harness_arn, runtimeSessionId=SID)
        assert stopped["runtimeSessionId"] == SID
    finally:
        control.close()
        data.close()

    served = {op for _service, op, _method, _path in ROUTES}
    recorded = {r.operation for r in emu.requests}
    assert recorded == served, "the calls above and the emulator's ROUTES must match"
    assert set(bodies) == served
    problems = {op: found for op, found in bodies.items() if found}
    assert problems == {}, json.dumps(problems, indent=1)


def _after_call(capture: Any) -> Any:
    def handler(http_response: Any = None, model: Any = None, **kw: Any) -> None:
        capture(http_response=http_response, operation_model=model)

    return handler


def test_the_walk_is_strict() -> None:
    model = botocore.session.get_session().get_service_model("bedrock-agentcore-control")
    shape = model.operation_model("GetHarnessEndpoint").output_shape
    good = {
        "endpoint": {
            "harnessId": "h",
            "harnessName": "h",
            "endpointName": "DEFAULT",
            "arn": "arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/h",
            "status": "READY",
            "createdAt": 1.7e9,
            "updatedAt": 1.7e9,
            "liveVersion": "1",
            "targetVersion": "1",
        }
    }
    assert list(walk(good, shape)) == []
    for change, expect in [
        ({"bogus": 1}, "not a member"),
        ({"status": "SOMETIMES"}, "not in enum"),
        ({"createdAt": "yesterday"}, "epoch seconds"),
        ({"liveVersion": 1}, "expected a string"),
    ]:
        bad = {"endpoint": {**good["endpoint"], **change}}
        assert any(expect in p for p in walk(bad, shape)), change
    missing = {"endpoint": {k: v for k, v in good["endpoint"].items() if k != "status"}}
    assert any("required" in p for p in walk(missing, shape))
