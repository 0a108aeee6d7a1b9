"""Self-hosted sandboxes in one process: ``ml.run`` on a ``SelfHostedEnvironment``.

The session's built-in tool uses are served by the in-process worker (the SDK's
``EnvironmentWorker.handle_item`` under our poll loop) and answered with
``user.tool_result``; the custom ``@tool`` by the loop; all in this process.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

import managedloop as ml
from managedloop.errors import InvalidOptionsError
from managedloop.providers import ClaudeManagedAgents
from managedloop.providers.claude import SelfHostedEnvironment
from managedloop.providers.claude._wire import normalize
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


async def run_sandboxed(
    emu: ClaudeEmulator, workdir: Path, spec: ml.AgentSpec = SPEC, **options: object
) -> tuple[ml.SessionResult, str]:
    async with strict_client(emu) as client:
        env_id, key = await self_hosted_env(client, emu)
        sandbox = SelfHostedEnvironment(
            environment_id=env_id, environment_key=key, workdir=workdir, **options
        )
        provider = ClaudeManagedAgents(client=client, environment=sandbox, reconnect_backoff=0.0)
        result = await ml.run(provider, agent=spec, prompt="work in the sandbox")
        return result, env_id


async def test_builtin_and_custom_tools_run_here_each_answered_once(tmp_path: Path) -> None:
    with ClaudeEmulator(SCRIPT) as emu:
        result, env_id = await run_sandboxed(emu, tmp_path)
        sid = result.session_id
        assert sid is not None
        assert result.terminal == ml.Terminal.END_TURN
        assert result.text == "done"
        uses = tool_uses(emu, sid)
        # Seven uses: every built-in once plus the custom tool; each answered exactly once.
        assert sorted(u["name"] for u in uses.values()) == sorted(
            ["write", "get_weather", "edit", "bash", "read", "glob", "grep"]
        )
        answers = answers_per_use(emu, sid)
        assert answers == dict.fromkeys(uses, 1)
        # The built-in tools ran here, in the work directory.
        assert (tmp_path / "note.txt").read_text() == "hi sandbox\n"
        by_name = {uses[i]["name"]: r for i, r in sandbox_results(emu, sid).items()}
        assert set(by_name) == {"write", "edit", "bash", "read", "glob", "grep"}
        assert not any(r["is_error"] for r in by_name.values())
        assert "hi sandbox\nfrom-bash" in result_text(by_name["bash"])
        assert "hi sandbox" in result_text(by_name["read"])
        assert "note.txt" in result_text(by_name["glob"])
        assert "sandbox" in result_text(by_name["grep"])
        # The custom tool was the loop's, answered as a custom result.
        custom = [e for e in emu.sent_events(sid) if e["type"] == "user.custom_tool_result"]
        assert [result_text(e) for e in custom] == ["Sunny in Paris"]
        # The session ran on the self-hosted environment; its item was claimed and stopped.
        assert emu.session(sid).environment_id == env_id
        (item,) = emu.work.of_session(sid)
        assert item.state == "stopped"


async def test_builtin_tool_use_is_not_a_host_approval(tmp_path: Path) -> None:
    """The misclassification: a self-hosted ``agent.tool_use`` named by requires_action
    was an ApprovalRequest, and approving it sent a ``user.tool_confirmation``."""
    script = [Reply(tool_calls=[builtin("bash", command="echo ok")]), say("done")]
    asked: list[object] = []

    def confirm(request: ml.ApprovalRequest) -> ml.Approve:
        asked.append(request)
        return ml.Approve()

    with ClaudeEmulator(script) as emu:
        async with strict_client(emu) as client:
            env_id, key = await self_hosted_env(client, emu)
            sandbox = SelfHostedEnvironment(
                environment_id=env_id, environment_key=key, workdir=tmp_path
            )
            provider = ClaudeManagedAgents(client=client, environment=sandbox)
            result = await ml.run(provider, agent=SPEC, prompt="go", confirm=confirm)
        assert result.terminal == ml.Terminal.END_TURN
        assert asked == []
        sent = [e["type"] for e in emu.sent_events(result.session_id)]
        assert "user.tool_confirmation" not in sent
        assert sent.count("user.tool_result") == 1


def test_normalize_does_not_hold_an_allowed_sandbox_use() -> None:
    use = {"id": "sevt_1", "type": "agent.tool_use", "name": "bash", "input": {}}
    idle = {
        "id": "sevt_2",
        "type": "session.status_idle",
        "stop_reason": {"type": "requires_action", "event_ids": ["sevt_1"]},
    }
    allowed = normalize([{**use, "evaluated_permission": "allow"}, idle])
    asked = normalize([{**use, "evaluated_permission": "ask"}, idle])
    assert allowed.host_approvals == []
    assert allowed.custom_tool_uses == []
    assert [a.tool_use.id for a in asked.host_approvals] == ["sevt_1"]


@pytest.mark.parametrize(
    "path",
    ["../outside.txt", "/etc/passwd", "escape/secret.txt", "link-dir/secret.txt"],
)
async def test_paths_outside_the_workdir_are_refused(tmp_path: Path, path: str) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not read")
    os.symlink(outside, workdir / "link-dir")  # a symlinked directory escaping the workdir
    os.symlink(outside / "secret.txt", workdir / "escape")
    script = [
        Reply(tool_calls=[builtin("read", file_path=path)]),
        Reply(tool_calls=[builtin("write", file_path=path, content="x")]),
        say("done"),
    ]
    with ClaudeEmulator(script) as emu:
        result, _ = await run_sandboxed(emu, workdir)
        assert result.terminal == ml.Terminal.END_TURN
        results = list(sandbox_results(emu, result.session_id or "").values())
        assert len(results) == 2
        for r in results:
            assert r["is_error"] is True
            assert "outside the session's working directory" in result_text(r)
    assert (outside / "secret.txt").read_text() == "do not read"
    assert not (tmp_path / "outside.txt").exists()


async def test_the_api_key_never_reaches_the_tool_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = [Reply(tool_calls=[builtin("bash", command="env")]), say("done")]
    with ClaudeEmulator(script) as emu:
        # The key under names the SDK's own scrub does not know, and the SDK's own name.
        monkeypatch.setenv("MY_CLAUDE_KEY", emu.api_key)
        monkeypatch.setenv("ANTHROPIC_API_KEY", emu.api_key)
        monkeypatch.setenv("MANAGEDLOOP_API_KEY", emu.api_key)
        monkeypatch.setenv("HARMLESS", "visible")
        result, env_id = await run_sandboxed(emu, tmp_path)
        (env_result,) = sandbox_results(emu, result.session_id or "").values()
        text = result_text(env_result)
        assert "HARMLESS=visible" in text
        assert emu.api_key not in text
        assert emu.work.environment_key(env_id) not in text
        assert "MY_CLAUDE_KEY" not in text
        assert "ANTHROPIC_API_KEY" not in text


async def test_a_hung_tool_call_times_out_with_an_error_result(tmp_path: Path) -> None:
    # The marker ($0 of the sh) finds the process should it outlive the timeout; it is this
    # test run's own, so another suite running the same test at once is not mistaken for it.
    marker = f"hung-tool-marker-{uuid.uuid4().hex}"
    script = [
        Reply(tool_calls=[builtin("bash", command=f"sh -c 'sleep 600; :' {marker}")]),
        say("done"),
    ]
    with ClaudeEmulator(script) as emu:
        result, _ = await run_sandboxed(emu, tmp_path, tool_timeout=0.5)
        (r,) = sandbox_results(emu, result.session_id or "").values()
        assert r["is_error"] is True
        assert "timed out after 0.5" in result_text(r)
        assert result.terminal == ml.Terminal.END_TURN
    # The command was killed with its shell, not left running.
    alive = [
        p for p in Path("/proc").iterdir() if p.name.isdigit() and marker.encode() in _cmdline(p)
    ]
    assert alive == []


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


async def test_output_is_capped(tmp_path: Path) -> None:
    script = [Reply(tool_calls=[builtin("bash", command="printf 'x%.0s' $(seq 1 500)")]), say("ok")]
    with ClaudeEmulator(script) as emu:
        result, _ = await run_sandboxed(emu, tmp_path, max_output=100)
        (r,) = sandbox_results(emu, result.session_id or "").values()
        text = result_text(r)
        assert text.startswith("x" * 100)
        assert "[output cut at 100 characters]" in text
        assert "x" * 101 not in text


def test_options_are_checked_and_the_key_is_secret(tmp_path: Path) -> None:
    key = "envkey-very-secret-value"
    sandbox = SelfHostedEnvironment(environment_id="env_1", environment_key=key, workdir=tmp_path)
    assert key not in repr(sandbox)
    assert key not in str(sandbox)
    provider = ClaudeManagedAgents(api_key="sk-x", environment=sandbox)
    assert key not in repr(provider)
    with pytest.raises(InvalidOptionsError) as bad:
        SelfHostedEnvironment(environment_id="env_1", environment_key=key, workdir=tmp_path / "no")
    assert bad.value.context["option"] == "workdir"
    for option, value in (("tool_timeout", -1), ("max_output", 0), ("environment_key", "")):
        kwargs: dict[str, object] = {"environment_key": key, option: value}
        with pytest.raises(InvalidOptionsError) as bad:
            SelfHostedEnvironment(environment_id="env_1", workdir=tmp_path, **kwargs)  # type: ignore[arg-type]
        assert bad.value.context["option"] == option
        assert key not in str(bad.value)
    with pytest.raises(InvalidOptionsError):
        SelfHostedEnvironment(environment_id="../env", environment_key=key, workdir=tmp_path)


async def test_a_custom_tool_named_like_a_builtin_is_refused(tmp_path: Path) -> None:
    @ml.tool
    def bash(command: str) -> str:
        """Not the sandbox's bash."""
        return command

    spec = ml.AgentSpec(name="clash", tools=[bash], host_tools=[])
    with ClaudeEmulator([say("never")]) as emu:
        with pytest.raises(InvalidOptionsError) as bad:
            await run_sandboxed(emu, tmp_path, spec=spec)
        assert bad.value.code == "tool_name_collision"


async def test_a_failing_heartbeat_loses_nothing(tmp_path: Path) -> None:
    """The first claim's heartbeats fail: the lease is given up; the item is reclaimed
    (its lease lapsed: ``expire_leases``) and the worker claims it again."""
    script = [Reply(tool_calls=[builtin("bash", command="echo once >> log.txt")]), say("done")]
    with ClaudeEmulator(script) as emu:
        emu.work.fail_heartbeats = 1
        emu.work.heartbeat_status = 412  # a refused claim: the SDK treats the lease as lost
        emu.work.clock = lambda: 0.0  # no lease lapses by itself
        import anyio

        async def expire_when_refused() -> None:
            while emu.work.fail_heartbeats:
                await anyio.sleep(0.01)
            emu.work.expire_leases()

        async with anyio.create_task_group() as tg:
            tg.start_soon(expire_when_refused)
            result, _ = await run_sandboxed(emu, tmp_path)
        sid = result.session_id or ""
        assert result.terminal == ml.Terminal.END_TURN
        assert (tmp_path / "log.txt").read_text() == "once\n"
        assert sum(answers_per_use(emu, sid).values()) == 1
        assert [i.polls for i in emu.work.of_session(sid)] == [2]


async def test_a_hanging_poll_is_abandoned_and_retried(tmp_path: Path) -> None:
    script = [Reply(tool_calls=[builtin("bash", command="echo ok")]), say("done")]
    with ClaudeEmulator(script) as emu:
        emu.work.hang_polls = 1
        result, _ = await run_sandboxed(emu, tmp_path, poll_timeout=0.2)
        assert result.terminal == ml.Terminal.END_TURN
        assert emu.work.polls >= 2
        assert sum(answers_per_use(emu, result.session_id or "").values()) == 1


async def test_an_ask_tool_stays_a_host_approval_then_the_worker_runs_it(tmp_path: Path) -> None:
    script = [Reply(tool_calls=[builtin("bash", command="echo approved")]), say("done")]
    seen: list[str] = []

    def confirm(request: ml.ApprovalRequest) -> ml.Approve:
        seen.append(request.tool_use.name)
        return ml.Approve()

    with ClaudeEmulator(script, confirm_tools=["bash"]) as emu:
        async with strict_client(emu) as client:
            env_id, key = await self_hosted_env(client, emu)
            sandbox = SelfHostedEnvironment(
                environment_id=env_id, environment_key=key, workdir=tmp_path
            )
            provider = ClaudeManagedAgents(client=client, environment=sandbox)
            result = await ml.run(provider, agent=SPEC, prompt="go", confirm=confirm)
        assert seen == ["bash"]
        assert result.terminal == ml.Terminal.END_TURN
        (r,) = sandbox_results(emu, result.session_id or "").values()
        assert result_text(r).strip() == "approved"


async def test_a_parked_approval_resumed_later_is_served_by_a_new_worker(tmp_path: Path) -> None:
    """Park on an ``ask`` tool (no callback), resume with a decision in a new run: the
    reattached session gets its worker back, which runs the allowed call."""
    script = [Reply(tool_calls=[builtin("bash", command="echo resumed")]), say("done")]
    with ClaudeEmulator(script, confirm_tools=["bash"]) as emu:
        async with strict_client(emu) as client:
            env_id, key = await self_hosted_env(client, emu)
            sandbox = SelfHostedEnvironment(
                environment_id=env_id, environment_key=key, workdir=tmp_path
            )
            provider = ClaudeManagedAgents(client=client, environment=sandbox)
            parked = await ml.run(provider, agent=SPEC, prompt="go")
            assert parked.terminal is ml.Terminal.REQUIRES_ACTION
            assert parked.pending is not None
            (request,) = parked.pending.approvals
            again = ml.SessionResult.from_dict(parked.to_dict())
            done = await ml.run(
                provider, agent=SPEC, resume=again, approvals={request.id: ml.Approve()}
            )
        assert done.terminal is ml.Terminal.END_TURN
        (r,) = sandbox_results(emu, done.session_id or "").values()
        assert result_text(r).strip() == "resumed"
        assert sum(answers_per_use(emu, done.session_id or "").values()) == 1
