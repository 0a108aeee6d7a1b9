"""A real shell for ``InvokeAgentRuntimeCommand``: commands run under ``/bin/sh`` **on this
machine, as this user**, in a scratch directory per runtime session, with every
``/mnt/<name>`` path rewritten into that directory (the session-storage mount). A timeout
kills the command's whole process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import signal

from aiohttp import web

from managedloop.testing._agentcore import eventstream as es

__all__ = ["run_shell"]

_MOUNT_RE = re.compile(r"/mnt/([A-Za-z0-9._-]+)")


async def run_shell(
    resp: web.StreamResponse, scratch: str, sid: str, command: str, timeout: float
) -> tuple[int, str]:
    """Run ``command`` under ``/bin/sh`` in the session's directory below ``scratch``,
    streaming its output to ``resp`` as ``contentDelta`` chunks; ``(exit code, status)``."""
    root = f"{scratch}/{hashlib.sha256(sid.encode()).hexdigest()[:16]}"
    await asyncio.to_thread(_makedirs, root)
    rewritten = _MOUNT_RE.sub(lambda m: f"{root}/mnt/{m.group(1)}", command)
    proc = await asyncio.create_subprocess_shell(
        rewritten,
        cwd=root,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group: a timeout kills the whole tree
    )

    async def pump(reader: asyncio.StreamReader | None, key: str) -> None:
        assert reader is not None
        while chunk := await reader.read(8192):
            text = chunk.decode(errors="replace")
            await resp.write(es.event_frame("chunk", {"contentDelta": {key: text}}))

    try:
        async with asyncio.timeout(timeout):
            await asyncio.gather(pump(proc.stdout, "stdout"), pump(proc.stderr, "stderr"))
            code = await proc.wait()
    except TimeoutError:
        _kill_group(proc.pid)
        await proc.wait()
        return -1, "TIMED_OUT"
    finally:
        if proc.returncode is None:
            _kill_group(proc.pid)
            await proc.wait()
    return code, "COMPLETED"


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _makedirs(path: str) -> None:
    os.makedirs(path, exist_ok=True)
