"""The session loop: a sans-IO state machine (``machine``) and its async driver."""

from managedloop.session.driver import LiveSession, run, run_sync, start
from managedloop.session.machine import GuardInput

__all__ = ["GuardInput", "LiveSession", "run", "run_sync", "start"]
