"""Internals of :mod:`managedloop.testing.agentcore` (the AgentCore loopback emulator)."""
