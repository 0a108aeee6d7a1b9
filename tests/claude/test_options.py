"""Constructor options and ids that reach URL paths: refused by name, before any request.

Issue 7 ("bad options that reach the wire or raise without a code"; "``session_id=
'../../v1/agents'`` is sent"): session, agent, environment and file ids are checked
against the API's id alphabet with ``re.fullmatch`` (``invalid_session_id``,
``invalid_agent_id``, ``invalid_environment_id``, ``invalid_file_id``); unknown
constructor keywords list the accepted ones; wrong types, NaN and infinity are
``invalid_opts``; a base URL with credentials is refused without echoing them.
"""

from __future__ import annotations

import math
from typing import Any

import anthropic
import pytest

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.providers.claude import ClaudeHandle
from managedloop.testing import ClaudeEmulator

from .conftest import WEATHER, make_provider, provisioned

pytestmark = pytest.mark.anyio

REAL_SESSION_ID = "sesn_011CZkZAtmR3yMPDzynEDxsB"
BAD_IDS = ["../../v1/agents", "sesn_x\n", "sesn_x/events", "a%2F..", "x y", "", "é", "x" * 256]


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_a_bad_resume_id_is_refused_before_any_request(
    emu: ClaudeEmulator, client: Any, bad: str
) -> None:
    provider = await provisioned(client)
    before = len(emu.requests)
    with pytest.raises(ml.InvalidOptionsError) as info:
        await ml.run(provider, agent=WEATHER, prompt="x", resume=bad)
    assert info.value.code == "invalid_session_id"
    assert emu.requests[before:] == []


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"session_id": "../../v1/agents"}, "invalid_session_id"),
        ({"session_id": 123}, "invalid_session_id"),
        ({"agent": "../agents"}, "invalid_agent_id"),
        ({"agent": {"agent_id": "a\n", "environment_id": "env_1"}}, "invalid_agent_id"),
        ({"agent": "agent_1", "environment": "env_1/../x"}, "invalid_environment_id"),
        (
            {"agent": ClaudeHandle(agent_id="agent_1", environment_id="../env")},
            "invalid_environment_id",
        ),
    ],
)
async def test_bad_ids_in_the_constructor(client: Any, kwargs: dict[str, Any], code: str) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        make_provider(client, **kwargs)
    assert info.value.code == code


async def test_real_ids_are_accepted(client: Any) -> None:
    handle = ClaudeHandle(agent_id="agent_011CZkZAtmR3yMPDzynEDxsB", environment_id="env_01-Ab_9")
    provider = make_provider(client, agent=handle, environment=handle, session_id=REAL_SESSION_ID)
    assert provider.session_id == REAL_SESSION_ID
    assert provider.agent_id == handle.agent_id


async def test_file_and_session_ids_of_file_calls(emu: ClaudeEmulator, client: Any) -> None:
    provider = make_provider(client)
    calls = {
        "invalid_file_id": [
            provider.download_file("../../v1/agents"),
            provider.delete_file("file_1?x=1"),
            provider.attach_file(REAL_SESSION_ID, "file_1#x"),
        ],
        "invalid_session_id": [
            provider.attach_file("../sesn", "file_1"),
            provider.list_files("sesn_1\n"),
        ],
    }
    for code, coros in calls.items():
        for coro in coros:
            with pytest.raises(ml.InvalidOptionsError) as info:
                await coro
            assert info.value.code == code
    with pytest.raises(ml.InvalidOptionsError) as info:
        await provider.teardown({"agent_id": "../a", "environment_id": "env_1"})
    assert info.value.code == "invalid_agent_id"
    with pytest.raises(ml.ArtifactError) as art:
        provider.artifact_store("../../v1/files")
    assert art.value.code == "invalid_session_id"
    assert emu.requests == []


async def test_a_malformed_session_id_from_the_server_is_not_followed(
    emu: ClaudeEmulator, client: Any
) -> None:
    provider = await provisioned(client)
    mint = emu.mint
    emu.mint = lambda prefix: "../../v1/agents" if prefix == "sesn_" else mint(prefix)  # type: ignore[method-assign]
    before = len(emu.requests)
    with pytest.raises(ml.ProviderError) as info:
        await ml.run(provider, agent=WEATHER, prompt="x")
    assert info.value.code == "unexpected_create_session_response"
    assert [r.path for r in emu.requests[before:]] == ["/v1/sessions"]


async def test_unknown_keywords_list_the_accepted_ones(client: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        ClaudeManagedAgents(client=client, idle_timeout=5, foo=1)
    assert info.value.code == "invalid_opts"
    assert info.value.context["option"] == "foo"
    assert "idle_timeout, foo" not in info.value.message
    assert "foo, idle_timeout" in info.value.message
    assert "stream_idle_timeout" in info.value.message
    assert "reconnect_backoff" in info.value.message
    assert "unknown" not in info.value.message.split("accepted:")[1]


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"reconnect_backoff": "x"}, "reconnect_backoff"),
        ({"reconnect_backoff": math.inf}, "reconnect_backoff"),
        ({"reconnect_backoff": -1}, "reconnect_backoff"),
        ({"stream_idle_timeout": math.nan}, "stream_idle_timeout"),
        ({"stream_idle_timeout": math.inf}, "stream_idle_timeout"),
        ({"stream_idle_timeout": 0}, "stream_idle_timeout"),
        ({"stream_idle_timeout": None}, "stream_idle_timeout"),
        ({"result_echo_timeout": math.nan}, "result_echo_timeout"),
        ({"result_echo_timeout": True}, "result_echo_timeout"),
        ({"receive_timeout": math.nan}, "receive_timeout"),
        ({"receive_timeout": -math.inf}, "receive_timeout"),
        ({"max_reconnects": 1.5}, "max_reconnects"),
        ({"max_reconnects": -1}, "max_reconnects"),
        ({"max_retries": "2"}, "max_retries"),
        ({"sleep": 5}, "sleep"),
        ({"session_title": 5}, "session_title"),
        ({"session_metadata": {"a": 1}}, "session_metadata"),
        ({"session_metadata": ["a"]}, "session_metadata"),
        ({"client": object()}, "client"),
    ],
)
async def test_wrong_types_and_non_finite_durations_are_invalid_opts(
    client: Any, kwargs: dict[str, Any], option: str
) -> None:
    kwargs.setdefault("client", client)
    with pytest.raises(ml.InvalidOptionsError) as info:
        ClaudeManagedAgents(**kwargs)
    assert info.value.code == "invalid_opts"
    assert info.value.context["option"] == option


def test_a_configured_receive_timeout_must_be_finite(monkeypatch: pytest.MonkeyPatch) -> None:
    ml.configure(receive_timeout=math.inf)
    with pytest.raises(ml.ConfigError) as info:
        ClaudeManagedAgents(api_key="sk-test")
    assert info.value.code == "invalid_configuration"


@pytest.mark.parametrize(
    "url",
    ["http://u:pw-secret@h:abc/v1", "http://u:pw-secret@127.0.0.1:9/v1", "ftp://h", "nohost"],
)
def test_a_bad_base_url_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        ClaudeManagedAgents(api_key="sk-test", base_url=url)
    assert info.value.code == "invalid_opts"
    assert info.value.context["option"] == "base_url"
    assert "pw-secret" not in str(info.value)
    assert "pw-secret" not in repr(info.value.context)


async def test_valid_options_still_run(emu: ClaudeEmulator) -> None:
    async with anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key) as c:
        handle = await ml.provision(make_provider(c), WEATHER)
        provider = ClaudeManagedAgents(
            client=c,
            agent=handle,
            environment=handle,
            reconnect_backoff=0,
            stream_idle_timeout=30,
            result_echo_timeout=5.0,
            receive_timeout=30,
            max_reconnects=0,
            session_title="t",
            session_metadata={"k": "v"},
        )
        result = await ml.run(provider, agent=WEATHER, prompt="x")
    assert result.terminal is ml.Terminal.END_TURN
