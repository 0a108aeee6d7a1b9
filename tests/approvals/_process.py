"""One side of a cross-process approval round trip, run as its own Python process.

``python _process.py <config.json>``: ``phase`` ``park`` runs the agent until it parks on
``approval_required`` and writes ``result.to_dict()`` to ``out``; ``resume`` reads that
JSON from ``parked``, resumes with the decisions in ``decisions`` (tool-use id ->
``"approve"`` or a deny message) and writes the final result to ``out``. Every tool run
appends a line to ``log`` (the parent checks nothing ran twice).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

import managedloop as ml

CONFIG: dict[str, Any] = json.loads(Path(sys.argv[1]).read_text())


def _log(line: str) -> None:
    with open(CONFIG["log"], "a", encoding="utf-8") as f:
        f.write(line + "\n")


@ml.tool(requires_approval=True)
def transfer(amount: int) -> str:
    """Move money (needs a decision)."""
    _log(f"transfer {amount}")
    return f"moved {amount}"


@ml.tool
def balance() -> str:
    """The balance."""
    _log("balance")
    return "42"


AGENT = ml.AgentSpec(name="bank", system_prompt="Use tools.", tools=[transfer, balance])


def _decisions() -> dict[str, ml.Approve | ml.Deny]:
    return {
        tid: ml.Approve() if value == "approve" else ml.Deny(value)
        for tid, value in CONFIG["decisions"].items()
    }


async def main() -> None:
    host = CONFIG["host"]
    client: Any = None
    provider: Any
    if host == "local":
        from managedloop.providers import Local

        provider = Local(model="m", base_url=CONFIG["base_url"], api_key=CONFIG["api_key"])
    elif host == "claude":
        import anthropic

        from managedloop.providers import ClaudeManagedAgents

        client = anthropic.AsyncAnthropic(base_url=CONFIG["base_url"], api_key=CONFIG["api_key"])
        handle = CONFIG["handle"]
        provider = ClaudeManagedAgents(client=client, agent=handle, environment=handle)
    else:
        from managedloop.providers import BedrockAgentCore

        provider = BedrockAgentCore(harness_arn=CONFIG["harness_arn"], **CONFIG["client_kwargs"])
    try:
        if CONFIG["phase"] == "park":
            result = await ml.run(provider, agent=AGENT, prompt="pay people", timeout=30)
        else:
            parked = json.loads(Path(CONFIG["parked"]).read_text())
            result = await ml.run(
                provider, agent=AGENT, resume=parked, approvals=_decisions(), timeout=30
            )
    finally:
        if client is not None:
            await client.close()
    Path(CONFIG["out"]).write_text(json.dumps(result.to_dict()))


if __name__ == "__main__":
    anyio.run(main)
