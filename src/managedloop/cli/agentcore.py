"""The Bedrock AgentCore part of the ``managedloop`` command (see :mod:`managedloop.cli`).

* ``managedloop demo`` provisions the demo agent as a harness on a fresh
  :class:`~managedloop.testing.AgentCoreEmulator` (real botocore, SigV4, event-stream
  frames over loopback), runs it, and tears the harness down;
* ``managedloop run --provider agentcore`` drives the real service. Credentials and region
  come from the AWS chain (``AWS_*`` env, ``--profile``, SSO, instance roles...), never from
  a flag. Give ``--harness-arn``, or ``--execution-role-arn`` to provision one from the
  command line's spec;
* ``managedloop emulate agentcore --port N`` serves the emulator and prints what a client
  needs (endpoint, region, keys, a ready harness ARN, an accepted execution role).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from managedloop.provisioning.specs import AgentSpec
from managedloop.results import SessionResult
from managedloop.testing.script import Step

__all__ = ["LABEL", "add_run_arguments", "demo", "emulate", "provider_for_run"]

LABEL = "Bedrock AgentCore"
DEMO_PROVISION_TIMEOUT = 30.0  # seconds; the emulator's harness is READY in ~50 ms


def demo(agent: AgentSpec, prompt: str, script: Sequence[Step] | None = None) -> SessionResult:
    """Provision ``agent`` on a fresh emulator playing ``script`` (default: the emulator's
    own), run it once, tear it down."""
    from managedloop import provision_sync, teardown_sync
    from managedloop.providers.agentcore import BedrockAgentCore
    from managedloop.session import run_sync
    from managedloop.testing.agentcore import AgentCoreEmulator

    with AgentCoreEmulator(script) as emu, BedrockAgentCore(**emu.client_kwargs) as provider:
        handle = provision_sync(
            provider,
            agent,
            execution_role_arn=emu.execution_role_arn,
            timeout=DEMO_PROVISION_TIMEOUT,
        )
        provider.harness_arn = handle.harness_arn
        try:
            return run_sync(provider, agent=agent, prompt=prompt)
        finally:
            teardown_sync(provider, handle)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("agentcore host (credentials: the AWS chain)")
    group.add_argument("--harness-arn", help="the harness to invoke")
    group.add_argument(
        "--execution-role-arn", help="provision a harness from the spec (when no --harness-arn)"
    )
    group.add_argument("--runtime-session-id", help="pin the runtime session (33-100 chars)")
    group.add_argument("--session-id", help="reattach to an existing runtime session")
    group.add_argument("--endpoint-name", default="DEFAULT", help="sent as qualifier")
    group.add_argument("--region", help="AWS region (default: the chain's, else us-east-1)")
    group.add_argument("--profile", help="an AWS profile from ~/.aws/config")
    group.add_argument("--endpoint-url", help="a custom endpoint (e.g. an emulator)")
    group.add_argument("--model", help="per-invocation model id override")
    group.add_argument("--timeout-seconds", type=int, help="server-side cap per invoke")
    group.add_argument("--max-iterations", type=int, help="server-side cap per invoke")
    group.add_argument("--max-tokens", type=int, help="server-side cap per invoke")
    group.add_argument("--idle-timeout", type=float, default=300.0, help="seconds of silence")


def provider_for_run(args: argparse.Namespace) -> object:
    from managedloop.providers.agentcore import BedrockAgentCore

    session = None
    if getattr(args, "profile", None):
        import botocore.session

        session = botocore.session.Session(profile=args.profile)
    provider = BedrockAgentCore(
        harness_arn=getattr(args, "harness_arn", None),
        runtime_session_id=getattr(args, "runtime_session_id", None),
        session_id=getattr(args, "session_id", None),
        endpoint_name=getattr(args, "endpoint_name", "DEFAULT"),
        model=getattr(args, "model", None),
        timeout_seconds=getattr(args, "timeout_seconds", None),
        max_iterations=getattr(args, "max_iterations", None),
        max_tokens=getattr(args, "max_tokens", None),
        idle_timeout=getattr(args, "idle_timeout", 300.0),
        session=session,
        region_name=getattr(args, "region", None),
        endpoint_url=getattr(args, "endpoint_url", None),
    )
    role = getattr(args, "execution_role_arn", None)
    if provider.harness_arn is None and role:
        from managedloop import provision_sync
        from managedloop.cli.render import Out, Progress

        spec = AgentSpec(name=args.name, system_prompt=args.system)
        # the harness and its endpoint becoming READY, on stderr (JSON lines with --json)
        progress = Progress(Out(out=sys.stdout, json=bool(getattr(args, "json", False))))
        try:
            handle = provision_sync(
                provider,
                spec,
                execution_role_arn=role,
                endpoint_name=provider.endpoint_name,
                progress=progress,
            )
        finally:
            progress.close()
        provider.harness_arn = handle.harness_arn
    return provider


def emulate(host: str, port: int, *, json: bool = False) -> None:
    """Serve the AgentCore emulator on ``127.0.0.1:port`` until interrupted (Ctrl-C)."""
    from managedloop.cli.local import announce
    from managedloop.testing.agentcore import AgentCoreEmulator

    del host  # the emulator always binds loopback
    emu = AgentCoreEmulator(port=port).start()  # EmulatorStartError: the caller reports it
    try:
        info = {
            **emu.client_kwargs,
            "harness_arn": emu.harness_arn,
            "execution_role_arn": emu.execution_role_arn,
        }
        title = f"{LABEL} emulator (botocore: endpoint_url + keys; both planes)"
        announce(title, info, json=json)
        emu.serve_forever()
    finally:
        emu.stop()
