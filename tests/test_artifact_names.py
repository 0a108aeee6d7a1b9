"""Unsafe artifact names are refused on every host's store before any request (issue 7).

A table of bad names by every host that has an artifact store (Claude Files over its
emulator, AgentCore session storage over its emulator): each verb raises
``ArtifactError(code="invalid_name")`` and the emulator receives nothing. Each store's own
name limit (``max_name_bytes``) is applied by :class:`managedloop.Artifacts` before any
request, and the AgentCore store's own check is a full match (``'x\\n'`` passed ``$``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import pytest

import managedloop as ml
from managedloop.artifacts import MAX_NAME_BYTES, validate_name
from managedloop.providers import BedrockAgentCore, ClaudeManagedAgents
from managedloop.providers.agentcore._artifacts import check_name
from managedloop.testing import AgentCoreEmulator, ClaudeEmulator

pytestmark = pytest.mark.anyio

SID_AC = "s" * 40

BAD_NAMES = [
    pytest.param("a\u2028b", id="line-separator"),
    pytest.param("a\u2029b", id="paragraph-separator"),
    pytest.param("a\x85b", id="next-line"),
    pytest.param("report\u202etxt.exe", id="bidi-override-rlo"),
    pytest.param("a\u202ab", id="bidi-embedding-lre"),
    pytest.param("a\u2066b", id="bidi-isolate-lri"),
    pytest.param("a\u2069b", id="bidi-isolate-pdi"),
    pytest.param("a\u200bb", id="zero-width-space-cf"),
    pytest.param("a\ufeffb", id="bom-cf"),
    pytest.param("a\udc80b", id="lone-surrogate"),
    pytest.param("a\x1bb", id="escape-cc"),
    pytest.param("x\n", id="trailing-newline"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("   ", id="whitespace-only"),
    pytest.param("\t", id="tab-only"),
    pytest.param(" a.txt", id="leading-space"),
    pytest.param("a.txt ", id="trailing-space"),
    pytest.param("a.txt\u00a0", id="trailing-nbsp"),
    pytest.param("dir /a.txt", id="segment-trailing-space"),
    pytest.param("../escape", id="dotdot"),
    pytest.param("/etc/passwd", id="absolute"),
    pytest.param("", id="empty"),
    pytest.param("x" * (MAX_NAME_BYTES + 1), id="over-255-bytes"),
    pytest.param("é" * 128, id="over-255-utf8-bytes"),
]


@asynccontextmanager
async def claude_store() -> AsyncIterator[tuple[ml.Artifacts, Callable[[], int]]]:
    with ClaudeEmulator() as emu:
        client = anthropic.AsyncAnthropic(base_url=emu.base_url, api_key=emu.api_key)
        async with client:
            provider = ClaudeManagedAgents(client=client)
            yield ml.Artifacts.for_session(provider, "sesn_names"), lambda: len(emu.requests)


@asynccontextmanager
async def agentcore_store() -> AsyncIterator[tuple[ml.Artifacts, Callable[[], int]]]:
    with (
        AgentCoreEmulator() as emu,
        BedrockAgentCore(harness_arn=emu.harness_arn, **emu.client_kwargs) as provider,
    ):
        yield ml.Artifacts.for_session(provider, SID_AC), lambda: len(emu.requests)


STORES = [pytest.param(claude_store, id="claude"), pytest.param(agentcore_store, id="agentcore")]


@pytest.fixture(autouse=True)
def _no_ambient_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    empty = tmp_path / "aws-empty"
    empty.touch()
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))


@pytest.mark.parametrize("make_store", STORES)
@pytest.mark.parametrize("name", BAD_NAMES)
async def test_bad_names_never_reach_any_store(make_store: Any, name: str) -> None:
    async with make_store() as (store, requests):
        before = requests()
        for verb in (store.fetch(name), store.put(name, b"x"), store.delete(name)):
            with pytest.raises(ml.ArtifactError) as info:
                await verb
            assert info.value.code == "invalid_name"
        assert requests() == before  # refused before any request


@pytest.mark.parametrize("make_store", STORES)
async def test_each_store_declares_and_gets_its_name_limit(make_store: Any) -> None:
    async with make_store() as (store, requests):
        limit = store.store.max_name_bytes
        assert limit <= MAX_NAME_BYTES
        before = requests()
        with pytest.raises(ml.ArtifactError) as info:
            await store.put("x" * (limit + 1), b"x")
        assert info.value.code == "invalid_name"
        assert str(limit) in str(info.value)
        assert requests() == before


async def test_the_agentcore_limit_leaves_room_for_the_temp_suffix() -> None:
    async with agentcore_store() as (store, requests):
        longest = "x" * store.store.max_name_bytes
        await store.put(longest, b"payload")  # <name>.mlpart is written first
        assert await store.fetch(longest) == b"payload"
        assert requests() > 0


@pytest.mark.parametrize("name", ["x\n", "x\n\n", "a b", "a/b", "..", "x" * 249])
def test_the_agentcore_store_check_is_a_full_match(name: str) -> None:
    with pytest.raises(ml.ArtifactError) as info:
        check_name(name)
    assert info.value.code == "invalid_name"


@pytest.mark.parametrize(
    "name", ["report.md", "out/report 1.md", "a..b", ".hidden", "données.csv", "日本.txt"]
)
def test_ordinary_names_still_pass(name: str) -> None:
    assert validate_name(name) == name
