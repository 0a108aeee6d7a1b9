"""``python -m managedloop``: the same command as the ``managedloop`` console script."""

from managedloop.cli import main

if __name__ == "__main__":  # pragma: no cover - run as a script, tested in a subprocess
    raise SystemExit(main())
