"""Worker processes started together: each prints ``ready`` once its imports are done,
waits for ``go`` on stdin (so all of them start their work at once), and prints its answer
when done. The multi-process store and webhook-ledger tests use it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parent.parent / "src")


def run_together(worker: Path, argvs: list[list[str]], *, timeout: float) -> list[tuple[int, str]]:
    """Start ``worker`` once per argument list, release them together, and return each
    one's exit code and output; a worker still running at the end is killed."""
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    children = [
        subprocess.Popen(
            [sys.executable, str(worker), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for argv in argvs
    ]
    try:
        for child in children:  # every child is up (imports done) before any starts
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outputs = [child.communicate(timeout=timeout)[0] for child in children]
        return [(child.returncode, out) for child, out in zip(children, outputs, strict=True)]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
