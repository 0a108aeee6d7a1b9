"""Vocabulary types, config resolution, artifacts name rules, telemetry, specs.

Reference §9 lines covered: vocabulary_test, outcome_test, config_test, artifacts_test
(name rules), agent/spec_test (digest identity). Deliberate change: config keys are
resolved by name through ``managedloop.config.resolve``; ``configure()`` is the
process-wide layer (the Elixir app env).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import managedloop as ml
from managedloop import config, telemetry
from managedloop.artifacts import validate_name

pytestmark = pytest.mark.anyio


def roundtrip(value: Any) -> Any:
    return type(value).from_dict(json.loads(json.dumps(value.to_dict())))


def test_defaults() -> None:
    assert ml.Usage() == ml.Usage(input_tokens=0, output_tokens=0, raw=[])
    assert ml.ToolUse(name="t").input == {}
    assert ml.ToolResult(tool_use_id="x") == ml.ToolResult(tool_use_id="x", text="", is_error=False)
    turn = ml.TurnResult()
    assert (turn.terminal, turn.usage, turn.events) == (ml.Terminal.TERMINATED, None, [])
    result = ml.SessionResult()
    assert (result.turns, result.usage, result.session_id, result.reason) == (
        0,
        ml.Usage(),
        None,
        None,
    )
    assert ml.SessionInfo().to_dict() == {"session_id": None, "provider": None, "metadata": {}}


def test_tool_use_needs_a_name() -> None:
    with pytest.raises(TypeError):
        ml.ToolUse()  # type: ignore[call-arg]


def test_everything_round_trips_through_json() -> None:
    result = ml.SessionResult(
        terminal=ml.Terminal.REQUIRES_ACTION,
        stop_reason={"type": "requires_action", "event_ids": ["e1"]},
        reason="max_turns",
        session_id="s",
        text="t",
        custom_tool_uses=[ml.ToolUse(id="u", name="n", input={"a": [1]}, thread_id="th")],
        server_tool_uses=[ml.ToolUse(name="web_search")],
        usage=ml.Usage(input_tokens=3, output_tokens=4, raw=[{"x": 1}]),
        turns=2,
        events=[{"type": "e"}],
        transcript=[{"role": "user", "content": "hi"}],
    )
    back = roundtrip(result)
    assert back == result
    assert back.terminal is ml.Terminal.REQUIRES_ACTION
    assert isinstance(back.custom_tool_uses[0], ml.ToolUse)
    for value in (
        ml.TurnResult(usage=ml.Usage(input_tokens=1)),
        ml.Outcome(description="d", rubric="r", max_iterations=3),
        ml.Artifact(name="a.md", size=3),
        ml.CommandResult(stdout="o", exit_code=1),
        ml.SessionInfo(session_id="s", provider="local", metadata={"k": "v"}),
        ml.ToolResult(tool_use_id="u", text="t", is_error=True),
    ):
        assert roundtrip(value) == value


def test_values_are_frozen() -> None:
    with pytest.raises(AttributeError):
        ml.Usage().input_tokens = 3  # type: ignore[misc]


def test_usage_adds() -> None:
    total = ml.Usage(input_tokens=1, output_tokens=2, raw=["a"]) + ml.Usage(
        input_tokens=3, output_tokens=4, raw=["b"]
    )
    assert total == ml.Usage(input_tokens=4, output_tokens=6, raw=["a", "b"])
    assert total + None == total
    assert total.total_tokens == 10


@pytest.mark.parametrize(
    "kwargs",
    [
        {"description": "d", "rubric": 3},
        {"description": None, "rubric": "r"},
        {"description": "d", "rubric": "r", "max_iterations": 0},
        {"description": "d", "rubric": "r", "max_iterations": "2"},
    ],
)
def test_outcome_rejects_bad_fields(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ml.InvalidOptionsError):
        ml.Outcome(**kwargs)


def test_terminal_is_a_str_enum() -> None:
    assert ml.Terminal.END_TURN == "end_turn"
    assert ml.Terminal("requires_action") is ml.Terminal.REQUIRES_ACTION


# -- config ------------------------------------------------------------------------------


def test_precedence_explicit_then_configure_then_env_then_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    ml.configure(aws_region="ap-south-1")
    assert config.resolve("aws_region", "us-west-2") == "us-west-2"
    assert config.resolve("aws_region") == "ap-south-1"
    ml.configure()
    assert config.resolve("aws_region") == "eu-west-1"
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-north-1")
    assert config.resolve("aws_region") == "eu-north-1"
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert config.resolve("aws_region") == "us-east-1"


def test_presence_based_none_and_false_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env-secret")
    assert config.resolve("api_key", None) is None
    ml.configure(api_key=None, receive_timeout=False)
    assert config.resolve("api_key") is None
    assert config.resolve("receive_timeout") is False


def test_required_missing_names_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    with pytest.raises(ml.ConfigError) as info:
        config.resolve_required("aws_access_key_id")
    message = str(info.value)
    assert "aws_access_key_id=" in message
    assert "AWS_ACCESS_KEY_ID" in message
    assert "configure(aws_access_key_id=" in message
    assert info.value.code == "missing_configuration"


def test_unknown_configure_key_is_refused() -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        ml.configure(api_kee="x")
    assert info.value.context["option"] == "api_kee"


def test_secrets_never_show(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-very-secret")
    secret = config.resolve("api_key")
    assert isinstance(secret, ml.Secret)
    assert secret.reveal() == "sk-ant-very-secret"
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("t").info("key %s %r", secret, secret)
    shown = f"{secret} {secret!r} {[secret]} {ml.ConfigError('x', key=secret)!r} {caplog.text}"
    assert "very-secret" not in shown
    assert config.reveal(secret) == "sk-ant-very-secret"
    assert config.reveal(None) is None
    assert secret == ml.Secret("sk-ant-very-secret")
    assert len({secret, ml.Secret("sk-ant-very-secret")}) == 1
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(secret)


# -- artifacts name rules ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "",
        "..",
        "../etc/passwd",
        "a/../../b",
        "/abs",
        "~/x",
        "a\x00b",
        "a\\b",
        "C:x",
        "a//b",
        "./a",
        "x" * 256,
        3,
    ],
)
def test_unsafe_artifact_names_are_refused(name: Any) -> None:
    with pytest.raises(ml.ArtifactError) as info:
        validate_name(name)
    assert info.value.code == "invalid_name"


@pytest.mark.parametrize("name", ["report.md", "out/report 1.md", "a..b", ".hidden"])
def test_safe_artifact_names_pass(name: str) -> None:
    assert validate_name(name) == name


async def test_artifacts_validate_before_the_store_sees_a_name() -> None:
    class Store:
        def __init__(self) -> None:
            self.files: dict[str, bytes] = {}

        async def list(self) -> list[ml.Artifact]:
            return [ml.Artifact(name=n, size=len(b)) for n, b in self.files.items()]

        async def fetch(self, name: str) -> bytes:
            return self.files[name]

        async def put(self, name: str, data: bytes) -> ml.Artifact:
            self.files[name] = data
            return ml.Artifact(name=name, size=len(data))

        async def delete(self, name: str) -> None:
            del self.files[name]

    store = Store()
    arts = ml.Artifacts(store)
    assert (await arts.put("a.txt", "hé")).size == 3
    assert await arts.fetch("a.txt") == "hé".encode()
    assert [a.name for a in await arts.list()] == ["a.txt"]
    with pytest.raises(ml.ArtifactError):
        await arts.put("../x", b"")
    await arts.delete("a.txt")
    assert store.files == {}
    with pytest.raises(ml.ArtifactError) as info:
        ml.Artifacts.for_session(object(), "s1")
    assert info.value.code == "not_supported"


# -- telemetry ---------------------------------------------------------------------------


def test_attach_filter_detach_and_a_raising_listener(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[tuple[str, Any, Any]] = []
    only_terminal = telemetry.attach(lambda *a: seen.append(a), ["managedloop.session.terminal"])

    def broken(*_: Any) -> None:
        raise RuntimeError("listener bug")

    bad = telemetry.attach(broken)
    try:
        assert telemetry.enabled("session.terminal")
        telemetry.emit(
            "session.terminal", None, {"terminal": "end_turn"}, caller={"terminal": "x", "t": 1}
        )
        telemetry.emit("tool.start", {"system_time": 1}, {"tool": "x"})
    finally:
        assert telemetry.detach(only_terminal)
        assert telemetry.detach(bad)
    assert not telemetry.detach(bad)
    assert seen == [("managedloop.session.terminal", {}, {"terminal": "end_turn", "t": 1})]
    assert "listener bug" in caplog.text
    assert not telemetry.enabled("session.terminal")
    with pytest.raises(ValueError, match="unknown telemetry"):
        telemetry.attach(lambda *a: None, ["managedloop.nope"])


def test_span_emits_start_stop_and_exception() -> None:
    seen: list[tuple[str, Any, Any]] = []
    handle = telemetry.attach(lambda *a: seen.append(a))
    try:
        with telemetry.span("request", {"method": "get"}) as extra:
            extra["status"] = 200
        with pytest.raises(KeyError), telemetry.span("request", {"method": "post"}):
            raise KeyError("x")
    finally:
        telemetry.detach(handle)
    names = [s[0] for s in seen]
    assert names == [
        "managedloop.request.start",
        "managedloop.request.stop",
        "managedloop.request.start",
        "managedloop.request.exception",
    ]
    assert seen[1][2] == {"method": "get", "status": 200}
    assert seen[1][1]["duration"] >= 0
    assert seen[3][2]["kind"] == "KeyError"


# -- specs -------------------------------------------------------------------------------


def test_agent_spec_digest_covers_behaviour_not_name() -> None:
    a = ml.AgentSpec(name="a", system_prompt="p", model="m")
    assert a.digest == ml.AgentSpec(name="b", system_prompt="p", model="m").digest
    assert a.digest != ml.AgentSpec(name="a", system_prompt="q", model="m").digest
    assert len(a.digest) == 64
    assert ml.EnvironmentSpec(config={"a": 1}).digest != ml.EnvironmentSpec(config={"a": 2}).digest


def test_agent_spec_rules() -> None:
    with pytest.raises(ml.InvalidOptionsError):
        ml.AgentSpec(name="")
    with pytest.raises(ml.InvalidOptionsError):
        ml.AgentSpec(terminal_tool="submit")
    with pytest.raises(ml.InvalidOptionsError) as info:
        ml.AgentSpec().require_name()
    assert info.value.context["option"] == "name"
    assert ml.AgentSpec(name="x").require_name() == "x"


async def test_provision_facade_caches_and_teardown_releases() -> None:
    class Host:
        name = "fake"

        def __init__(self) -> None:
            self.made = 0
            self.torn = 0

        async def provision(self, spec: ml.AgentSpec, *, environment: Any = None) -> dict[str, Any]:
            self.made += 1
            return {"agent_id": f"a{self.made}"}

        async def teardown(self, handle: Any) -> str:
            self.torn += 1
            return "archived"

    host = Host()
    spec = ml.AgentSpec(name="a")
    first = await ml.provision(host, spec)
    assert await ml.provision(host, spec) == first  # stored: a JSON round trip
    assert host.made == 1
    assert await ml.teardown(host, first) == "archived"
    assert (await ml.provision(host, spec)) == {"agent_id": "a2"}
    with pytest.raises(ml.UnsupportedError):
        await ml.provision(object(), spec)
    with pytest.raises(ml.UnsupportedError):
        await ml.teardown(object(), first)


def test_provision_sync_twin() -> None:
    class Host:
        async def provision(self, spec: ml.AgentSpec, *, environment: Any = None) -> str:
            return f"h-{spec.name}-{environment}"

    assert ml.provision_sync(Host(), ml.AgentSpec(name="a"), environment="e") == "h-a-e"


def test_config_reads_the_environment_as_os_environ_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """config's environment lookup (os.environ's own mapping, without the KeyErrors of a
    miss) sees what os.environ holds: set, changed, emptied, removed, non-ASCII."""
    import os

    from managedloop import config

    name = "MANAGEDLOOP_TEST_ENV_LOOKUP"
    monkeypatch.delenv(name, raising=False)
    assert config._getenv(name) is None
    for value in ("http://x", "", "é ü \u2603"):
        monkeypatch.setenv(name, value)
        assert config._getenv(name) == os.environ.get(name) == value
    os.environ[name] = "direct"
    assert config._getenv(name) == "direct"
    del os.environ[name]
    assert config._getenv(name) is None
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "")  # set but empty: present, so it wins
    assert config.resolve("openai_base_url") == ""
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert config.resolve("openai_base_url") is None
