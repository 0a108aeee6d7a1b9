"""The session loop: a sans-IO state machine (``machine``), the turn driver (``driver``:
``run``, ``run_sync``) and live sessions (``live``: ``start``)."""

from managedloop.session.driver import run, run_sync
from managedloop.session.live import LiveSession, start
from managedloop.session.machine import GuardInput

__all__ = ["GuardInput", "LiveSession", "run", "run_sync", "start"]
