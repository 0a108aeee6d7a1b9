"""Shell commands (InvokeAgentRuntimeCommand) and session-storage artifacts.

§9 lines covered: agent_core/command_test (stdout/stderr/exit code, ARN in the path,
session-id header, body; non-zero exit is a result; on_output labelled and in order before
return; ``timeout`` in the body; qualifier in the query only when set; a stall fails at
idle_timeout; an exception frame is ``command_stream_error``); artifacts/
agent_core_session_storage_test (list/fetch/put/delete, chunked put under the 65,536-char
command cap, exit 3 -> not_found, other exits carry the ``CommandResult``, unsafe names and
``.``/``..`` refused before any command, a quote in the mount refused, transport errors pass
through). Changed on purpose: an empty put works (§11.14 fixed); the "bare vs chunk-wrapped
events" line is handled in the provider but botocore always yields the modelled shape.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest

import managedloop as ml
from managedloop.providers.agentcore import BedrockAgentCore
from managedloop.providers.agentcore._artifacts import CHUNK, COMMAND_LIMIT, SessionStorage
from managedloop.testing import AgentCoreEmulator, AgentCoreFaults

from .conftest import make_provider

pytestmark = pytest.mark.anyio


async def test_stdout_stderr_exit_code_and_the_wire(
    provider: BedrockAgentCore, emu: AgentCoreEmulator, sid: str
) -> None:
    result = await provider.run_command("echo out; echo err >&2; exit 3", session_id=sid)
    assert result == ml.CommandResult(
        stdout="out\n", stderr="err\n", exit_code=3
    )  # a result, not an error
    (req,) = emu.operations("InvokeAgentRuntimeCommand")
    assert req.path == f"/runtimes/{emu.harness_arn}/commands"
    assert req.session_id == sid
    assert req.body == {"command": "echo out; echo err >&2; exit 3"}
    assert "qualifier" not in req.query


async def test_output_streams_to_the_callback_in_order_before_return(
    provider: BedrockAgentCore, sid: str, tmp_path: Any
) -> None:
    # The command prints "a", then waits until the callback, seeing "a", creates the go
    # file: were output held until the command ended, it would wait forever (and time out).
    go = tmp_path / "go"
    seen: list[tuple[str, str]] = []

    async def on_output(stream: str, text: str) -> None:
        seen.append((stream, text))
        if text == "a":
            go.touch()

    result = await provider.run_command(
        f"printf a; while [ ! -e {go} ]; do sleep 0.01; done; printf b >&2",
        session_id=sid,
        on_output=on_output,
        timeout=30,
    )
    assert seen == [("stdout", "a"), ("stderr", "b")]
    assert (result.stdout, result.stderr, result.exit_code) == ("a", "b", 0)


async def test_timeout_and_qualifier_go_on_the_wire(
    provider: BedrockAgentCore, emu: AgentCoreEmulator, sid: str
) -> None:
    await provider.run_command("true", session_id=sid, timeout=60, qualifier="DEFAULT")
    (req,) = emu.operations("InvokeAgentRuntimeCommand")
    assert req.body["timeout"] == 60
    assert req.query == {"qualifier": "DEFAULT"}


async def test_a_server_timeout_is_a_result(provider: BedrockAgentCore, sid: str) -> None:
    result = await provider.run_command("sleep 5", session_id=sid, timeout=1)
    assert result.exit_code == -1


async def test_an_exception_frame_is_command_stream_error(emu: AgentCoreEmulator, sid: str) -> None:
    emu.faults = AgentCoreFaults(command_exception="validationException")
    with make_provider(emu) as provider, pytest.raises(ml.HostStreamError) as info:
        await provider.run_command("true", session_id=sid)
    assert info.value.code == "command_stream_error"
    assert info.value.context["type"] == "validationException"


async def test_a_stalled_command_stream_fails_at_idle_timeout(
    emu: AgentCoreEmulator, sid: str
) -> None:
    emu.faults = AgentCoreFaults(command_stall=math.inf)  # ends only when the client goes
    with make_provider(emu) as provider, pytest.raises(ml.TransportError) as info:
        await provider.run_command("true", session_id=sid, idle_timeout=0.2)
    assert info.value.code == "stream_idle_timeout"


async def test_a_scripted_command_handler() -> None:
    async with AgentCoreEmulator(commands=lambda sid, cmd: (cmd.upper(), "", 0)) as emu:
        with make_provider(emu) as provider:
            result = await provider.run_command("hello", session_id="s" * 40)
    assert result.stdout == "HELLO"


async def test_command_validation(provider: BedrockAgentCore) -> None:
    with pytest.raises(ml.InvalidOptionsError):
        await provider.run_command("true", session_id="short")
    with pytest.raises(ml.InvalidOptionsError):
        await provider.run_command("x" * 70_000, session_id="s" * 40)


# --------------------------------------------------------------------------- artifacts


async def test_artifacts_round_trip_binary_safe(provider: BedrockAgentCore, sid: str) -> None:
    store = ml.Artifacts.for_session(provider, sid)
    assert await store.list() == []
    payload = bytes(range(256)) * 4
    art = await store.put("report.bin", payload)
    assert (art.name, art.size, art.ref) == ("report.bin", 1024, "/mnt/data/report.bin")
    await store.put("notes.txt", "hello")
    listed = await store.list()
    assert [(a.name, a.size, a.ref) for a in listed] == [
        ("notes.txt", 5, "/mnt/data/notes.txt"),
        ("report.bin", 1024, "/mnt/data/report.bin"),
    ]
    assert await store.fetch("report.bin") == payload
    await store.delete("notes.txt")
    with pytest.raises(ml.ArtifactError) as info:
        await store.fetch("notes.txt")
    assert info.value.code == "not_found"
    with pytest.raises(ml.ArtifactError) as info:
        await store.delete("notes.txt")
    assert info.value.code == "not_found"


async def test_empty_contents(provider: BedrockAgentCore, emu: AgentCoreEmulator, sid: str) -> None:
    store = ml.Artifacts.for_session(provider, sid)
    art = await store.put("empty.txt", b"")
    assert art.size == 0
    assert await store.fetch("empty.txt") == b""
    assert len(emu.operations("InvokeAgentRuntimeCommand")) == 2  # one put command, one fetch


async def test_a_large_put_is_chunked_under_the_command_limit(
    provider: BedrockAgentCore, emu: AgentCoreEmulator, sid: str
) -> None:
    payload = os.urandom(100_000)
    store = ml.Artifacts.for_session(provider, sid)
    await store.put("big.bin", payload)
    cmds = [r.body["command"] for r in emu.operations("InvokeAgentRuntimeCommand")]
    assert len(cmds) == 4  # 3 appends of <= 48,000 base64 chars + 1 decode
    assert all(len(c) <= COMMAND_LIMIT for c in cmds)
    assert "b64decode" in cmds[-1]
    assert await store.fetch("big.bin") == payload
    assert CHUNK == 48_000


async def test_sessions_are_isolated(provider: BedrockAgentCore) -> None:
    a = ml.Artifacts.for_session(provider, "a" * 40)
    b = ml.Artifacts.for_session(provider, "b" * 40)
    await a.put("x.txt", b"1")
    assert await b.list() == []


@pytest.mark.parametrize("name", ["../etc/passwd", "a'b", "a/b", ".", "..", "sp ace", "", "a;rm"])
async def test_unsafe_names_are_refused_before_any_command(
    provider: BedrockAgentCore, emu: AgentCoreEmulator, sid: str, name: str
) -> None:
    store = ml.Artifacts.for_session(provider, sid)
    for verb in (store.fetch(name), store.put(name, b"x"), store.delete(name)):
        with pytest.raises(ml.ArtifactError) as info:
            await verb
        assert info.value.code == "invalid_name"
    assert emu.operations("InvokeAgentRuntimeCommand") == []


@pytest.mark.parametrize(
    "mount",
    [
        "/mnt/da'ta",
        "/tmp/x",
        "/mnt/a/b",
        "mnt/x",
        "/mnt/..",  # the mount's parent: a put wrote outside the mount
        "/mnt/../",
        "/mnt/.",
        "/mnt/data\n",
        "/mnt/data//",
        "/mnt/",
        3,
    ],
)
def test_unsafe_mounts_are_refused(provider: BedrockAgentCore, mount: Any) -> None:
    with pytest.raises(ml.InvalidOptionsError) as info:
        provider.artifact_store("s" * 40, mount=mount)
    assert info.value.context["option"] == "mount"
    assert provider.artifact_store("s" * 40, mount="/mnt/out/").mount == "/mnt/out"
    assert provider.artifact_store("s" * 40, mount="/mnt/a..b").mount == "/mnt/a..b"


class FakeProvider:
    def __init__(self, result: ml.CommandResult | Exception) -> None:
        self.result = result
        self.commands: list[str] = []

    async def run_command(self, cmd: str, **kw: Any) -> ml.CommandResult:
        self.commands.append(cmd)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def store_of(result: ml.CommandResult | Exception) -> SessionStorage:
    return SessionStorage(FakeProvider(result), session_id="s" * 40)  # type: ignore[arg-type]


async def test_command_failures_carry_the_command_result() -> None:
    bad = ml.CommandResult(stderr="denied", exit_code=1)
    for verb in ("list", "delete", "fetch"):
        store = store_of(bad)
        with pytest.raises(ml.ArtifactError) as info:
            await (store.list() if verb == "list" else getattr(store, verb)("x"))
        assert info.value.code == "command_failed"
        assert info.value.context["result"] == bad


async def test_malformed_outputs() -> None:
    with pytest.raises(ml.ArtifactError) as info:
        await store_of(ml.CommandResult(stdout="not json", exit_code=0)).list()
    assert info.value.code == "unexpected_list_output"
    with pytest.raises(ml.ArtifactError) as info:
        await store_of(ml.CommandResult(stdout="!!!", exit_code=0)).fetch("x")
    assert info.value.code == "bad_base64"
    store = store_of(ml.CommandResult(stdout="aGVs\nbG8=\n", exit_code=0))
    assert await store.fetch("x") == b"hello"  # whitespace in base64 is ignored


async def test_transport_errors_pass_through() -> None:
    err = ml.TransportError("gone", code="stream_idle_timeout")
    with pytest.raises(ml.TransportError):
        await store_of(err).list()


async def test_commands_quote_the_path() -> None:
    fake = FakeProvider(ml.CommandResult(stdout="", exit_code=0))
    store = SessionStorage(fake, session_id="s" * 40, mount="/mnt/out")  # type: ignore[arg-type]
    await store.fetch("r.txt")
    assert fake.commands[0].startswith("python3 -c '")
    assert fake.commands[0].endswith(" '/mnt/out/r.txt'")
