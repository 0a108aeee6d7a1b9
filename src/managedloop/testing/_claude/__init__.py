"""The Claude Managed Agents emulator (re-exported by :mod:`managedloop.testing.claude`)."""

from managedloop.testing._claude.faults import ClaudeFaults
from managedloop.testing._claude.server import ClaudeEmulator, RecordedRequest, credential_id

__all__ = ["ClaudeEmulator", "ClaudeFaults", "RecordedRequest", "credential_id"]
