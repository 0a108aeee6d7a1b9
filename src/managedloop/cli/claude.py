"""The Claude Managed Agents part of the ``managedloop`` command (see :mod:`managedloop.cli`).

* ``managedloop demo`` runs the demo agent on this host through :class:`ClaudeEmulator`
  (the real ``anthropic`` SDK over loopback), provisioning the agent on the fly;
* ``managedloop run --provider claude`` drives the real service: credentials come from
  ``ANTHROPIC_API_KEY`` or ``ANTHROPIC_BEARER_TOKEN_FILE`` (never a command-line flag, so a
  key never lands in shell history); without ``--claude-agent-id`` the agent is
  provisioned from the command line's spec (named ``<name>_<digest8>``) and reused;
* ``managedloop emulate claude --port N`` serves the emulator for your own tests.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import anyio

from managedloop.config import MISSING
from managedloop.providers.claude import DEFAULT_MODEL, ClaudeManagedAgents
from managedloop.provisioning.specs import AgentSpec
from managedloop.results import SessionResult
from managedloop.testing.script import Step

__all__ = ["LABEL", "add_run_arguments", "demo", "emulate", "provider_for_run"]

LABEL = "Claude Managed Agents"


def demo(agent: AgentSpec, prompt: str, script: Sequence[Step] | None = None) -> SessionResult:
    """Run ``agent`` on a fresh loopback Claude emulator playing ``script`` (default: the
    emulator's own); provisions, runs, returns."""
    from managedloop.session import run_sync
    from managedloop.testing.claude import ClaudeEmulator

    with ClaudeEmulator(script) as emu:
        provider = ClaudeManagedAgents(
            api_key=emu.api_key, bearer_token_file=None, base_url=emu.base_url
        )
        try:
            return run_sync(provider, agent=agent, prompt=prompt)
        finally:
            anyio.run(provider.aclose)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("claude host (auth: $ANTHROPIC_API_KEY or a bearer file)")
    group.add_argument("--claude-agent-id", help="an existing agent (default: provision one)")
    group.add_argument("--claude-environment-id", help="an existing environment")
    group.add_argument(
        "--model", default=DEFAULT_MODEL, help=f"model for a provisioned agent ({DEFAULT_MODEL})"
    )
    group.add_argument("--base-url", help="API base URL (default: https://api.anthropic.com)")
    group.add_argument(
        "--bearer-token-file",
        help="a JSON file {access_token, expires_at} (default: $ANTHROPIC_BEARER_TOKEN_FILE)",
    )


def provider_for_run(args: argparse.Namespace) -> ClaudeManagedAgents:
    bearer = getattr(args, "bearer_token_file", None)
    return ClaudeManagedAgents(
        agent=getattr(args, "claude_agent_id", None),
        environment=getattr(args, "claude_environment_id", None),
        base_url=args.base_url if getattr(args, "base_url", None) else MISSING,
        bearer_token_file=bearer if bearer else MISSING,
        api_key=None if bearer else MISSING,
    )


def emulate(host: str, port: int, *, json: bool = False) -> None:
    """Serve the Claude emulator on ``127.0.0.1:port`` until interrupted (Ctrl-C)."""
    from managedloop.cli.local import announce
    from managedloop.testing.claude import ClaudeEmulator

    del host  # the host's name; the emulator always binds loopback
    emu = ClaudeEmulator(port=port).start()  # EmulatorStartError: the caller reports it
    try:
        title = f"{LABEL} emulator (anthropic SDK: base_url + api_key)"
        announce(title, {"base_url": emu.base_url, "api_key": emu.api_key}, json=json)
        emu.serve_forever()
    finally:
        emu.stop()
