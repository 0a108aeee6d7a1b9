"""The Files API calls: upload, mount into a session, list, download, delete.

Each function takes an :class:`~managedloop.providers.claude._api.Api` (a client and its
settings); the provider holds the client lease around each call. File and session ids
are checked against the id alphabet before any request (they reach URL paths).
"""

from __future__ import annotations

import mimetypes
import os
from pathlib import Path
from typing import Any

import anyio

from managedloop.providers.claude._api import Api
from managedloop.providers.claude._ids import check_id

__all__ = ["attach", "delete", "download", "list_files", "upload"]


async def upload(
    api: Api,
    file: str | os.PathLike[str] | bytes | tuple[str, bytes],
    *,
    filename: str | None = None,
    content_type: str | None = None,
) -> dict[str, Any]:
    """Upload a file (a path, ``bytes`` with ``filename=``, or ``(name, bytes)``)."""
    if isinstance(file, tuple):
        name, data = file
    elif isinstance(file, bytes):
        name, data = filename or "upload.bin", file
    else:
        path = Path(file)
        name, data = filename or path.name, await anyio.Path(path).read_bytes()
    mime = content_type or mimetypes.guess_type(name)[0] or "application/octet-stream"
    meta = await api.call(
        "post",
        "/v1/files",
        lambda: api.client.beta.files.upload(
            file=(name, data, mime),
            extra_headers=api.upload_headers,
            timeout=api.s.receive_timeout,
        ),
    )
    return dict(meta.model_dump(mode="json"))


async def attach(
    api: Api, session_id: str, file_id: str, *, mount_path: str | None = None
) -> dict[str, Any]:
    """Mount an uploaded file into a session (default ``/mnt/session/uploads/<id>``)."""
    check_id("session", session_id)
    check_id("file", file_id)
    kwargs: dict[str, Any] = {"file_id": file_id, "type": "file"}
    if mount_path is not None:
        kwargs["mount_path"] = mount_path
    res = await api.call(
        "post",
        f"/v1/sessions/{session_id}/resources",
        lambda: api.client.beta.sessions.resources.add(
            session_id,
            **kwargs,
            extra_headers=api.headers,
            timeout=api.s.receive_timeout,
        ),
    )
    return dict(res.model_dump(mode="json"))


async def list_files(api: Api, session_id: str | None = None) -> list[dict[str, Any]]:
    """Every file (all pages); ``session_id`` scopes to that session's files."""
    if session_id is not None:
        check_id("session", session_id)

    async def page(cursor: str | None) -> Any:
        kwargs: dict[str, Any] = {"limit": 100}
        if session_id is not None:
            kwargs["scope_id"] = session_id
        if cursor is not None:
            kwargs["page"] = cursor
        return await api.client.beta.files.with_raw_response.list(
            **kwargs, extra_headers=api.files_headers, timeout=api.s.receive_timeout
        )

    return await api.list_raw("/v1/files", page)


async def download(api: Api, file_id: str) -> bytes:
    """A downloadable file's bytes (what an agent wrote; an upload is not downloadable)."""
    check_id("file", file_id)

    async def get() -> bytes:
        response = await api.client.beta.files.download(
            file_id, extra_headers=api.files_headers, timeout=api.s.receive_timeout
        )
        return await response.read()

    return await api.call("get", f"/v1/files/{file_id}/content", get)


async def delete(api: Api, file_id: str) -> None:
    check_id("file", file_id)
    await api.call(
        "delete",
        f"/v1/files/{file_id}",
        lambda: api.client.beta.files.delete(
            file_id, extra_headers=api.files_headers, timeout=api.s.receive_timeout
        ),
    )
