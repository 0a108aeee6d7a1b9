"""Another process deciding a held tool call: ``python decider.py ADDRESS WORKFLOW_ID
approve|deny [why]``. Prints the tool-use ids it decided."""

from __future__ import annotations

import asyncio
import os
import sys

from temporalio.client import Client

import managedloop as ml
from managedloop.contrib import temporal as mlt


async def main(address: str, workflow_id: str, verdict: str, why: str = "") -> None:
    client = await Client.connect(address)
    held = await mlt.pending(client, workflow_id)
    decision: ml.Approve | ml.Deny = ml.Approve() if verdict == "approve" else ml.Deny(why)
    ids = [r.tool_use.id or "" for r in held]
    await mlt.decide(client, workflow_id, dict.fromkeys(ids, decision))
    print(" ".join(ids))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
    # The Temporal client's Rust threads can crash CPython's teardown of a short-lived
    # process (temporalio/sdk-python#300, seen here as SIGSEGV): the work is done, skip it.
    sys.stdout.flush()
    os._exit(0)
