"""Files API and session artifacts.

Reference §9 lines covered here:

* ``artifacts/claude_files_test``: list scoped by ``scope_id`` mapping filename /
  size_bytes / id; fetch the newest by created_at; unknown name -> not_found; delete the
  newest; put uploads then attaches at ``/data/<name>``; a list body without ``data`` ->
  unexpected_response; outputs_dir / output_path. *Changed on purpose:* put sends no
  ``purpose`` (the SDK's upload takes none) and a custom mount directory is a store
  option (``mount_dir=``) rather than a per-call ``mount_path``.
* ``client_test`` Files lines: upload with the files beta only and a per-part content
  type; download / list / delete with the combined beta; attach body. *Changed:* a list
  always pages (``limit``), so it always has a query string.
* Issue 3 item 5: names escaping their scope (``..``, absolute, NUL, empty) raise
  ``ArtifactError(code="invalid_name")`` before any request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import managedloop as ml
from managedloop.providers.claude import output_path, outputs_dir
from managedloop.testing import ClaudeEmulator

from .conftest import WEATHER, provisioned

pytestmark = pytest.mark.anyio


async def _session(emu: ClaudeEmulator, client: Any) -> tuple[Any, str]:
    provider = await provisioned(client)
    result = await ml.run(provider, agent=WEATHER, prompt="x")
    assert result.session_id is not None
    return provider, result.session_id


async def test_files_upload_attach_list_download_delete(
    emu: ClaudeEmulator, client: Any, tmp_path: Path
) -> None:
    provider, sid = await _session(emu, client)
    src = tmp_path / "report.txt"
    src.write_text("hello")
    meta = await provider.upload_file(src)
    assert meta["filename"] == "report.txt"
    assert meta["size_bytes"] == 5
    upload = next(r for r in emu.requests if r.path == "/v1/files" and r.method == "POST")
    assert upload.headers["anthropic-beta"] == "files-api-2025-04-14"
    res = await provider.attach_file(sid, meta["id"], mount_path="/data/report.txt")
    assert res["mount_path"] == "/data/report.txt"
    emu.write_output(sid, "out.md", b"# result")
    scoped = await provider.list_files(sid)
    assert [f["filename"] for f in scoped] == ["out.md"]
    listing = next(r for r in emu.requests if r.path == "/v1/files" and r.method == "GET")
    assert listing.query["scope_id"] == [sid]
    assert listing.headers["anthropic-beta"] == "files-api-2025-04-14,managed-agents-2026-04-01"
    assert emu.state.files[meta["id"]].mime_type == "text/plain"  # per-part content type
    assert await provider.download_file(scoped[0]["id"]) == b"# result"
    await provider.delete_file(scoped[0]["id"])
    both = "files-api-2025-04-14,managed-agents-2026-04-01"
    for method, suffix in (("GET", "/content"), ("DELETE", "")):
        req = next(
            r
            for r in emu.requests
            if r.method == method and r.path.endswith(scoped[0]["id"] + suffix)
        )
        assert req.headers["anthropic-beta"] == both
    assert await provider.list_files(sid) == []
    assert len(await provider.list_files()) == 1  # the upload, unscoped


async def test_artifacts_facade(emu: ClaudeEmulator, client: Any) -> None:
    provider, sid = await _session(emu, client)
    store = ml.Artifacts.for_session(provider, sid)
    emu.write_output(sid, "report.md", b"v1")
    emu.write_output(sid, "report.md", b"v2")  # a re-run: duplicates accumulate
    emu.write_output(sid, "data.csv", b"a,b")
    listed = await store.list()
    assert sorted(a.name for a in listed) == ["data.csv", "report.md", "report.md"]
    assert all(a.ref and a.ref.startswith("file_") for a in listed)
    assert await store.fetch("report.md") == b"v2"  # the newest
    await store.delete("report.md")
    assert await store.fetch("report.md") == b"v1"
    with pytest.raises(ml.ArtifactError) as info:
        await store.fetch("missing.md")
    assert info.value.code == "not_found"
    put = await store.put("inputs/notes.txt", "for the agent")
    assert put.size == 13
    attach = [r for r in emu.requests if r.path.endswith("/resources")][-1]
    assert attach.json == {
        "file_id": put.ref,
        "type": "file",
        "mount_path": "/data/inputs/notes.txt",
    }


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b", "nul\x00byte", ""])
async def test_escaping_names_are_rejected(emu: ClaudeEmulator, client: Any, name: str) -> None:
    provider, sid = await _session(emu, client)
    store = ml.Artifacts.for_session(provider, sid)
    before = len(emu.requests)
    for op in (store.fetch(name), store.put(name, b"x"), store.delete(name)):
        with pytest.raises(ml.ArtifactError) as info:
            await op
        assert info.value.code == "invalid_name"
    assert len(emu.requests) == before  # refused before any request


def test_outputs_dir_convention() -> None:
    assert outputs_dir() == "/mnt/session/outputs"
    assert output_path("report.md") == "/mnt/session/outputs/report.md"
    with pytest.raises(ml.ArtifactError):
        output_path("../x")


def test_a_files_list_without_data_is_unexpected_response() -> None:
    from managedloop.providers.claude._api import Page as _Page

    with pytest.raises(ml.ProviderError) as info:
        _Page({"items": []})
    assert info.value.code == "unexpected_response"
    page = _Page({"data": [{"id": "file_1"}], "next_page": None})
    assert (page.data, page.next_page) == ([{"id": "file_1"}], None)
