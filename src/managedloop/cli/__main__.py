"""``python -m managedloop.cli``: the same command as ``managedloop`` (kept from when the
command was the module ``managedloop/cli.py``)."""

from managedloop.cli import main

if __name__ == "__main__":  # pragma: no cover - run as a script, tested in a subprocess
    raise SystemExit(main())
