"""The provisioning lifecycle on Claude Managed Agents, end to end, offline.

Run it: ``python examples/ensure_tag_prune.py``. It starts a ``ClaudeEmulator`` on
127.0.0.1 (no key, no network); against the real API drop the emulator and build the
provider from your configuration (``ClaudeManagedAgents()`` reads ``ANTHROPIC_API_KEY``).

The Docker model: the spec is the Dockerfile, its digest the image digest, ``ensure_*`` a
cached build, a tag a movable pointer, prune an explicit GC.
"""

from __future__ import annotations

import managedloop as ml
from managedloop.providers import ClaudeManagedAgents
from managedloop.stores import MemoryStore
from managedloop.testing import ClaudeEmulator


@ml.tool
def lookup_ticket(ticket_id: str) -> str:
    """Fetch a support ticket by id."""
    return f"Ticket {ticket_id}: printer on fire, priority high"


def main() -> None:
    # A store keeps handles and tags. MemoryStore lives with this process; a persistent
    # store (a file or SQLite database) lets a cron job or a second process reuse them.
    store = MemoryStore()
    with ClaudeEmulator() as emu:
        provider = ClaudeManagedAgents(api_key=emu.api_key, base_url=emu.base_url)

        # 1. Build the environment image once. A flat mapping works: unknown keys go into
        #    config; runtimes are installed by the agent on first need (handle.bootstrap).
        env = ml.ensure_environment_sync(
            provider,
            {
                "type": "cloud",
                "networking": {"type": "limited", "allowed_hosts": ["pypi.org"]},
                "runtimes": [{"lang": "python", "version": "3.12.7"}],
            },
            name="support_env",
            store=store,
        )
        print("environment:", env.name)
        assert env.bootstrap is not None  # the install script + its system-prompt block

        # 2. Build the agent once: named <base>_<digest8>, content-addressed.
        spec = ml.AgentSpec(
            name="support_bot",
            system_prompt="You triage support tickets.\n\n" + env.bootstrap.instructions,
            tools=[lookup_ticket],
        )
        agent = ml.ensure_agent_sync(provider, spec, store=store)
        print("agent:", agent.name)

        # A second ensure of the same spec is a store hit: the same handle, no request.
        before = len(emu.requests)
        assert ml.ensure_agent_sync(provider, spec, store=store) == agent
        assert len(emu.requests) == before

        # 3. Pin it for production, resolve the pin later (never a silent fallback).
        ml.tag_sync("support_bot", "prod", agent, store=store)
        prod = ml.resolve_sync("support_bot:prod", store=store)
        assert prod == agent

        # 4. Run a session on the handles (the environment goes on the provider).
        runner = ClaudeManagedAgents(api_key=emu.api_key, base_url=emu.base_url, environment=env)
        result = ml.run_sync(runner, agent=prod, prompt="Triage ticket T-1", handler=spec.toolset())
        print("run:", result.terminal.value, "-", result.text)

        # 5. A new version of the spec is a new agent; the old one stays until pruned.
        v2 = ml.AgentSpec(
            name="support_bot", system_prompt="You triage tickets, tersely.", tools=[lookup_ticket]
        )
        newer = ml.ensure_agent_sync(provider, v2, store=store)
        assert newer.name != agent.name
        report = ml.prune_agents_sync(provider, "support_bot", keep=1, store=store, dry_run=True)
        print("prune would archive:", report.archived, "keeps:", report.kept)
        # The tagged version is kept even beyond keep=1: nothing to archive here.
        assert report.archived == []
        assert report.kept == [newer.name, agent.name]


if __name__ == "__main__":
    main()
