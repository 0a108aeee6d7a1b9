"""The Local host's part of the ``managedloop`` command (see :mod:`managedloop.cli`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from managedloop.config import MISSING
from managedloop.providers.local._provider import Local
from managedloop.provisioning.specs import AgentSpec
from managedloop.results import SessionResult

if TYPE_CHECKING:
    from managedloop.testing.script import Step

__all__ = ["LABEL", "add_run_arguments", "demo", "emulate", "provider_for_run"]

LABEL = "Local"
DEMO_MODEL = "emulator"


def demo(agent: AgentSpec, prompt: str, script: Sequence[Step] | None = None) -> SessionResult:
    """Run ``agent`` on the Local host against a fresh loopback chat emulator playing
    ``script`` (``None``: the emulator's default, each tool once with example arguments)."""
    from managedloop.session import run_sync
    from managedloop.testing.chat import ChatEmulator

    with ChatEmulator(script) as emu:
        provider = Local(model=DEMO_MODEL, base_url=emu.base_url, api_key=emu.api_key)
        return run_sync(provider, agent=agent, prompt=prompt)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("local host")
    group.add_argument(
        "--base-url", help="OpenAI-compatible endpoint up to /v1 (default: $OPENAI_BASE_URL)"
    )
    group.add_argument("--model", required=True, help="model id; anthropic:<id> for Claude")
    group.add_argument(
        "--api-key", help="sent as a bearer token (default: $OPENAI_API_KEY; prefer the env)"
    )
    group.add_argument("--no-stream", action="store_true", help="wait for whole responses")
    group.add_argument("--max-retries", type=int, default=3)


def provider_for_run(args: argparse.Namespace) -> Local:
    return Local(
        model=args.model,
        base_url=args.base_url if args.base_url is not None else MISSING,
        api_key=args.api_key if args.api_key is not None else MISSING,
        stream=not args.no_stream,
        max_retries=args.max_retries,
    )


def emulate(host: str, port: int) -> None:
    """Serve the chat emulator on ``127.0.0.1:port`` until interrupted."""
    from managedloop.testing.chat import ChatEmulator

    emu = ChatEmulator(port=port).start()
    try:
        print(f"{LABEL} chat emulator (OpenAI Chat Completions)", flush=True)
        print(f"base_url={emu.base_url}", flush=True)
        print(f"anthropic_base_url={emu.anthropic_base_url}", flush=True)
        print(f"api_key={emu.api_key}", flush=True)
        print("Ctrl-C to stop.", flush=True)
        emu.serve_forever()
    finally:
        emu.stop()
