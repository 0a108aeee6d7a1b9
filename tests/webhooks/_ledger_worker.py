"""A child process for ``test_ledger_processes`` (run as a script, not collected).

``python _ledger_worker.py BACKEND TARGET PROC N``: prints ``ready``, waits for a line on
stdin, then tries to admit deliveries ``d0``..``d<N-1>`` and to claim tool uses
``t0``..``t<N-1>`` on the shared store, and prints the JSON list of what it won.
"""

from __future__ import annotations

import json
import sys

import anyio

from managedloop.stores import FileStore, SQLiteStore, Store
from managedloop.webhooks._ledger import Ledger


async def contend(store: Store, proc: int, n: int) -> list[str]:
    ledger = Ledger(store, "hooks:", lambda: 1000.0)
    won = []
    for i in range(n):
        if await ledger.admit(ledger.delivery_key(f"d{i}"), "sesn_1", 3600.0):
            won.append(f"d{i}")
        if await ledger.claim(ledger.tool_key("sesn_1", f"t{i}"), f"hook-{proc}"):
            won.append(f"t{i}")
    return won


def main() -> None:
    backend, target, proc, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = FileStore(target) if backend == "file" else SQLiteStore(target)
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(anyio.run(contend, store, proc, n)), flush=True)
    store.close()


if __name__ == "__main__":
    main()
