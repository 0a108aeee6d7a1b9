"""Session-storage artifacts: files under a harness ``sessionStorage`` mount, via commands.

AgentCore has no file API for a session's microVM; files persist across stop/resume of the
same runtime session id on a ``sessionStorage`` mount (declared in the harness
``environment``: ``{"agentCoreRuntimeEnvironment": {"filesystemConfigurations":
[{"sessionStorage": {"mountPath": "/mnt/data"}}]}}``). Every verb is therefore one or more
``InvokeAgentRuntimeCommand`` shell commands of the form ``python3 -c '<code>' '<arg>'...``.

Invariants relied on:

* names are ``[A-Za-z0-9._-]+`` (a full match: no trailing newline), never ``.``/``..`` and
  at most :data:`MAX_NAME_BYTES` (so ``<name>.mlpart`` still fits the filesystem's 255),
  checked before any command runs, so a name can be single-quoted into a shell command
  without escaping; the mount path is checked the same way (``/mnt/<name>``, never
  ``/mnt/.`` or ``/mnt/..``: those are the mount's parent, outside it);
* a command is at most 65,536 characters, so ``put`` streams base64 in 48,000-character
  chunks into ``<name>.mlpart`` (first chunk truncates, later ones append), then one command
  decodes it into place atomically (``os.replace``) and removes the temp file; empty
  contents are a single command (no temp file);
* exit code 3 means "no such artifact"; any other non-zero exit is ``command_failed``
  carrying the :class:`~managedloop.CommandResult`.

Report-scale only: bytes transit as base64 text through the command stream.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, Protocol

from managedloop.errors import ArtifactError, InvalidOptionsError
from managedloop.results import Artifact, CommandResult

__all__ = ["CHUNK", "CommandRunner", "SessionStorage"]

CHUNK = 48_000  # base64 chars per put command: the code + quoting stays under the 65,536 cap
COMMAND_LIMIT = 65_536  # the service's maximum command length
NOT_FOUND = 3  # exit code the scripts use for a missing file
# Applied with fullmatch: ``$`` matches before a trailing newline, so ``'x\n'`` passed.
_NAME_RE = re.compile(r"[A-Za-z0-9._-]+")
_MOUNT_RE = re.compile(r"/mnt/([A-Za-z0-9._-]+)")
_TEMP_SUFFIXES = (".mlpart", ".mltmp")  # put's temp files sit beside the target
MAX_NAME_BYTES = 255 - max(map(len, _TEMP_SUFFIXES))  # so <name>.mlpart still fits NAME_MAX

_LIST = """
import json, os, sys
base = sys.argv[1]
out = []
try:
    entries = os.scandir(base)
except FileNotFoundError:
    entries = []
for e in entries:
    if e.is_file(follow_symlinks=False):
        out.append({"name": e.name, "size": e.stat(follow_symlinks=False).st_size})
print(json.dumps(sorted(out, key=lambda x: x["name"])))
"""
_FETCH = """
import base64, sys
try:
    data = open(sys.argv[1], "rb").read()
except FileNotFoundError:
    sys.exit(3)
sys.stdout.write(base64.b64encode(data).decode())
"""
_APPEND = """
import os, sys
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
with open(sys.argv[1], sys.argv[2]) as f:
    f.write(sys.argv[3])
"""
_FINISH = """
import base64, os, sys
path, part = sys.argv[1], sys.argv[2]
os.makedirs(os.path.dirname(path), exist_ok=True)
data = base64.b64decode(open(part).read()) if part != "-" else b""
tmp = path + ".mltmp"
with open(tmp, "wb") as f:
    f.write(data)
os.replace(tmp, path)
if part != "-":
    os.remove(part)
print(len(data))
"""
_DELETE = """
import os, sys
try:
    os.remove(sys.argv[1])
except FileNotFoundError:
    sys.exit(3)
"""


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def command(code: str, *args: str) -> str:
    """``python3 -c '<code>' '<arg>'...`` (code quote-escaped; args are pre-validated)."""
    return " ".join(["python3", "-c", _quote(code.strip()), *(_quote(a) for a in args)])


def check_name(name: str) -> str:
    if (
        not isinstance(name, str)
        or _NAME_RE.fullmatch(name) is None
        or name in (".", "..")
        or len(name) > MAX_NAME_BYTES
    ):
        raise ArtifactError(
            f"artifact name {name!r} must be 1-{MAX_NAME_BYTES} characters of [A-Za-z0-9._-] "
            "(not '.' or '..') on session storage",
            code="invalid_name",
            name=name,
        )
    return name


def check_mount(mount: Any) -> str:
    """``/mnt/<name>`` (one trailing ``/`` dropped), never ``/mnt/.`` or ``/mnt/..``."""
    if isinstance(mount, str) and mount.endswith("/"):
        mount = mount[:-1]
    match = _MOUNT_RE.fullmatch(mount) if isinstance(mount, str) else None
    if match is None or match.group(1) in (".", ".."):
        raise InvalidOptionsError(
            f"mount must be /mnt/<name> ([A-Za-z0-9._-], not '.' or '..'), got {mount!r}",
            option="mount",
        )
    return str(mount)


class CommandRunner(Protocol):
    """What the store needs from the provider: one shell command in the session
    (:meth:`managedloop.providers.BedrockAgentCore.run_command`)."""

    async def run_command(
        self,
        command: str,
        *,
        session_id: str,
        harness_arn: str | None = None,
        timeout: int | None = None,
    ) -> CommandResult: ...


class SessionStorage:
    """An :class:`~managedloop.ArtifactStore` over one session's storage mount."""

    max_name_bytes = MAX_NAME_BYTES

    def __init__(
        self,
        provider: CommandRunner,
        *,
        session_id: str,
        mount: str = "/mnt/data",
        harness_arn: str | None = None,
        timeout: int | None = None,
    ) -> None:
        mount = check_mount(mount)
        self.provider = provider
        self.session_id = session_id
        self.mount = mount
        self.harness_arn = harness_arn
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"SessionStorage(session_id={self.session_id!r}, mount={self.mount!r})"

    def _path(self, name: str) -> str:
        return f"{self.mount}/{check_name(name)}"

    async def _run(self, cmd: str) -> CommandResult:
        if len(cmd) > COMMAND_LIMIT:  # pragma: no cover - guarded by CHUNK
            raise ArtifactError("command too long", code="command_too_long", length=len(cmd))
        return await self.provider.run_command(
            cmd, session_id=self.session_id, harness_arn=self.harness_arn, timeout=self.timeout
        )

    @staticmethod
    def _failed(verb: str, result: CommandResult) -> ArtifactError:
        return ArtifactError(
            f"artifact {verb} failed with exit code {result.exit_code}: {result.stderr.strip()}",
            code="command_failed",
            result=result,
        )

    async def list(self) -> list[Artifact]:
        result = await self._run(command(_LIST, self.mount))
        if result.exit_code != 0:
            raise self._failed("list", result)
        try:
            entries = json.loads(result.stdout)
            if not isinstance(entries, list):
                raise TypeError("not a list")
            return [
                Artifact(
                    name=e["name"], size=e["size"], ref=f"{self.mount}/{e['name']}", raw=dict(e)
                )
                for e in entries
            ]
        except (ValueError, TypeError, KeyError) as exc:
            raise ArtifactError(
                f"unexpected list output: {exc}",
                code="unexpected_list_output",
                stdout=result.stdout[:200],
            ) from exc

    async def fetch(self, name: str) -> bytes:
        result = await self._run(command(_FETCH, self._path(name)))
        if result.exit_code == NOT_FOUND:
            raise ArtifactError(f"no artifact {name!r}", code="not_found", name=name)
        if result.exit_code != 0:
            raise self._failed("fetch", result)
        try:
            return base64.b64decode("".join(result.stdout.split()), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ArtifactError(
                f"artifact {name!r}: stdout is not base64", code="bad_base64", name=name
            ) from exc

    async def put(self, name: str, data: bytes) -> Artifact:
        path = self._path(name)
        encoded = base64.b64encode(data).decode()
        part = path + ".mlpart"
        if not encoded:
            result = await self._run(command(_FINISH, path, "-"))
        else:
            for i in range(0, len(encoded), CHUNK):
                mode = "w" if i == 0 else "a"
                appended = await self._run(command(_APPEND, part, mode, encoded[i : i + CHUNK]))
                if appended.exit_code != 0:
                    raise self._failed("put", appended)
            result = await self._run(command(_FINISH, path, part))
        if result.exit_code != 0:
            raise self._failed("put", result)
        return Artifact(name=name, size=len(data), ref=path)

    async def delete(self, name: str) -> None:
        result = await self._run(command(_DELETE, self._path(name)))
        if result.exit_code == NOT_FOUND:
            raise ArtifactError(f"no artifact {name!r}", code="not_found", name=name)
        if result.exit_code != 0:
            raise self._failed("delete", result)

    def describe(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "mount": self.mount}
