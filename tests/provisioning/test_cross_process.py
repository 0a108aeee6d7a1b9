"""Two separate Python processes sharing one store call ``ensure_agent`` on the same spec:
one agent is created (issue 10 acceptance; the emulator's request log is the witness).

The store is built by ``SHARED_STORE`` (a ``module:factory`` the child process imports,
called with the shared path): the persistent stores of ``managedloop.stores``.

The two processes start together and race: whichever loses the create gets a 409 and
adopts the winner's agent by its exact name, so even two *misses* make one agent.

No §9 line: the reference assumed a single writer.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.testing import ClaudeEmulator

ROOT = Path(__file__).resolve().parents[2]
SHARED_STORE = ["managedloop.stores:FileStore", "managedloop.stores:SQLiteStore"]

CHILD = textwrap.dedent(
    """
    import importlib, sys, anthropic
    import managedloop as ml
    from managedloop.providers import ClaudeManagedAgents

    base_url, key, factory, path = sys.argv[1:5]
    module, _, name = factory.partition(":")
    store = getattr(importlib.import_module(module), name)(path)
    spec = ml.AgentSpec(name="support_bot", system_prompt="You triage support tickets.")

    async def main():
        async with anthropic.AsyncAnthropic(base_url=base_url, api_key=key) as client:
            handle = await ml.ensure_agent(ClaudeManagedAgents(client=client), spec, store=store)
            print(handle.agent_id)

    import anyio
    anyio.run(main)
    """
)


@pytest.mark.parametrize("factory", SHARED_STORE)
def test_two_processes_one_agent(tmp_path: Path, factory: str) -> None:
    with ClaudeEmulator() as emu:
        args = [
            emu.base_url,
            emu.api_key,
            factory,
            str(tmp_path / ("store.json" if "FileStore" in factory else "store.sqlite3")),
        ]
        children = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, *args],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outs = [c.communicate(timeout=50) for c in children]
        for child, (_, err) in zip(children, outs, strict=True):
            assert child.returncode == 0, err
        ids = {out.strip() for out, _ in outs}
        agents = [a for a in emu.state.agents.values() if a["name"].startswith("support_bot_")]
        assert len(agents) == 1
        assert ids == {agents[0]["id"]}
        # A third reader of the same file afterwards is a pure store hit: no request at all.
        module, _, name = factory.partition(":")
        store = getattr(importlib.import_module(module), name)(args[3])
        seen = len(emu.requests)
        spec = ml.AgentSpec(name="support_bot", system_prompt="You triage support tickets.")
        provider = ClaudeManagedAgents(api_key=emu.api_key, base_url=emu.base_url)
        handle = ml.ensure_agent_sync(provider, spec, store=store)
        assert handle.id == agents[0]["id"]
        assert len(emu.requests) == seen
