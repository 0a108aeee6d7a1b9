"""Self-hosted sandboxes served by a separate ``managedloop worker`` process.

The session runs here (``ml.run`` on the bare environment id: its custom tool is answered
here); the built-in tools run in the worker process. Faults: the worker SIGKILLed in the
middle of a tool call and a second one started (the item is reclaimed: finished once,
nothing lost), and SIGTERM in the middle of a call (the call finishes, its result is
posted, the worker exits 0). Every wait is bounded and none is a timing margin: the tests
wait for what the worker did (a file, a recorded request), not for time to pass.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.testing import ClaudeEmulator
from managedloop.testing.script import Reply, say
from selfhosted_kit import (
    SCRIPT,
    SPEC,
    answers_per_use,
    builtin,
    result_text,
    sandbox_results,
    self_hosted_env,
    strict_client,
    tool_uses,
)

pytestmark = pytest.mark.anyio
WAIT = 60.0  # seconds: a bound on each wait (a hang fails the test), never a margin


class Workers:
    """Starts ``managedloop worker`` processes; kills any left at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self, emu: ClaudeEmulator, env_id: str, workdir: Path, *extra: str
    ) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
        env["ANTHROPIC_ENVIRONMENT_KEY"] = emu.work.environment_key(env_id)
        env["ANTHROPIC_API_KEY"] = emu.api_key  # present, and must not reach a tool
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "managedloop",
                "worker",
                env_id,
                "--workdir",
                str(workdir),
                "--base-url",
                emu.base_url,
                *extra,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: the kill reaches its shells
        )
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(WAIT)
            if proc.stdout:
                proc.stdout.close()
            if proc.stderr:
                proc.stderr.close()


@pytest.fixture
def workers() -> Iterator[Workers]:
    w = Workers()
    yield w
    w.close()


async def until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(WAIT):
        while not condition():
            await anyio.sleep(0.02)


async def run_on(emu: ClaudeEmulator, env_id: str, spec: ml.AgentSpec = SPEC) -> ml.SessionResult:
    async with strict_client(emu) as client:
        provider = ClaudeManagedAgents(client=client, environment=env_id, reconnect_backoff=0.0)
        return await ml.run(provider, agent=spec, prompt="work in the sandbox")


async def test_a_worker_process_serves_the_builtin_tools(tmp_path: Path, workers: Workers) -> None:
    with ClaudeEmulator(SCRIPT) as emu:
        async with strict_client(emu) as client:
            env_id, _ = await self_hosted_env(client, emu)
        proc = workers.start(emu, env_id, tmp_path, "--max-idle", "0")
        result = await run_on(emu, env_id)
        sid = result.session_id or ""
        assert result.terminal == ml.Terminal.END_TURN
        assert result.text == "done"
        uses = tool_uses(emu, sid)
        assert len(uses) == 7
        assert answers_per_use(emu, sid) == dict.fromkeys(uses, 1)
        assert (tmp_path / "note.txt").read_text() == "hi sandbox\n"
        # The built-in results were posted by the worker (its bearer), not by this process.
        posts = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/events")]
        builtin_posts = [r for r in posts if r.json["events"][0]["type"] == "user.tool_result"]
        assert builtin_posts
        assert {r.credential for r in builtin_posts}.isdisjoint(
            {r.credential for r in posts if r.json["events"][0]["type"] == "user.message"}
        )
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=WAIT)
        assert proc.returncode == 0, err
        assert "drained" in out
        assert emu.work.environment_key(env_id) not in out + err
        assert emu.api_key not in out + err


async def test_worker_killed_mid_tool_a_second_one_finishes_once(
    tmp_path: Path, workers: Workers
) -> None:
    # First run: marks that it started and hangs (killed there); the second run finishes.
    command = "if [ -e started ]; then echo finished >> log.txt; else touch started; sleep 1000; fi"
    script = [Reply(tool_calls=[builtin("bash", command=command)]), say("done")]
    with ClaudeEmulator(script) as emu:
        async with strict_client(emu) as client:
            env_id, _ = await self_hosted_env(client, emu)
        first = workers.start(emu, env_id, tmp_path, "--max-idle", "0")
        async with anyio.create_task_group() as tg:
            results: list[ml.SessionResult] = []

            async def session() -> None:
                results.append(await run_on(emu, env_id))

            tg.start_soon(session)
            await until((tmp_path / "started").exists)
            os.killpg(first.pid, signal.SIGKILL)  # the worker and its shell, mid-tool
            first.wait(WAIT)
            assert not sandbox_results(emu, emu.session().id)  # nothing was answered
            emu.work.expire_leases()  # its lease lapses (no heartbeat from a dead worker)
            workers.start(emu, env_id, tmp_path, "--max-idle", "0")
        (result,) = results
        sid = result.session_id or ""
        assert result.terminal == ml.Terminal.END_TURN
        assert (tmp_path / "log.txt").read_text() == "finished\n"
        (only,) = sandbox_results(emu, sid).values()
        assert only["is_error"] is False
        assert sum(answers_per_use(emu, sid).values()) == 1
        (item,) = emu.work.of_session(sid)
        # Offered to the first worker, then reclaimed for the second, which claimed it.
        assert item.polls >= 2
        assert item.worker_id != emu.requests[0].headers.get("anthropic-worker-id")
        await until(lambda: item.state == "stopped")  # the second worker let it go


async def test_sigterm_drains_the_running_call(tmp_path: Path, workers: Workers) -> None:
    command = "touch started; while [ ! -e go ]; do sleep 0.05; done; echo drained-call"
    script = [Reply(tool_calls=[builtin("bash", command=command)]), say("done")]
    with ClaudeEmulator(script) as emu:
        async with strict_client(emu) as client:
            env_id, _ = await self_hosted_env(client, emu)
        proc = workers.start(emu, env_id, tmp_path)
        async with anyio.create_task_group() as tg:
            results: list[ml.SessionResult] = []

            async def session() -> None:
                results.append(await run_on(emu, env_id))

            tg.start_soon(session)
            await until((tmp_path / "started").exists)
            proc.send_signal(signal.SIGTERM)

            def draining() -> None:
                assert proc.stderr is not None
                while "draining" not in proc.stderr.readline():
                    pass

            with anyio.fail_after(WAIT):
                await anyio.to_thread.run_sync(draining, abandon_on_cancel=True)
            assert not sandbox_results(emu, emu.session().id)  # still running: not cut
            (tmp_path / "go").touch()
        out, _ = proc.communicate(timeout=WAIT)
        assert proc.returncode == 0
        assert "drained" in out
        (result,) = results
        assert result.terminal == ml.Terminal.END_TURN
        (r,) = sandbox_results(emu, result.session_id or "").values()
        assert r["is_error"] is False
        assert result_text(r).strip() == "drained-call"
        (item,) = emu.work.of_session(result.session_id or "")
        assert item.state == "stopped"  # released by the drain, before the exit


def test_the_worker_command_refuses_a_missing_key_or_a_bad_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from managedloop.cli import main

    monkeypatch.delenv("ANTHROPIC_ENVIRONMENT_KEY", raising=False)
    assert main(["worker", "env_011", "--workdir", str(tmp_path)]) == 2
    assert "ANTHROPIC_ENVIRONMENT_KEY" in capsys.readouterr().err
    monkeypatch.setenv("ANTHROPIC_ENVIRONMENT_KEY", "envkey-secret-value-0123")
    assert main(["worker", "env_011", "--workdir", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "workdir" in err
    assert "envkey-secret-value-0123" not in err
    key_file = tmp_path / "key"
    key_file.write_text("")
    assert main(["worker", "env_011", "--environment-key-file", str(key_file)]) == 2


def test_the_worker_command_fails_on_a_refused_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from managedloop.cli import main

    with ClaudeEmulator() as emu:
        env = emu.call(
            lambda: emu.state.environments.setdefault(
                "env_selfhosted01", {"id": "env_selfhosted01", "config": {"type": "self_hosted"}}
            )
        )
        monkeypatch.setenv("ANTHROPIC_ENVIRONMENT_KEY", "envkey-wrong-0123456789")
        argv = ["worker", env["id"], "--workdir", str(tmp_path), "--base-url", emu.base_url]
        assert main(argv) == 1
    err = capsys.readouterr().err
    assert "invalid_environment_key" in err
    assert "envkey-wrong-0123456789" not in err
