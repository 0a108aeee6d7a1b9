"""The AgentCore loopback emulator (re-exported by :mod:`managedloop.testing.agentcore`).

``server`` (lifecycle, routing, the data plane's streams) stands on ``control`` (the
control-plane routes), ``turns`` (an invoke body read and a scripted step rendered as
frames), ``shell`` (real commands), ``state`` (harnesses, endpoints, sessions), ``faults``,
``clock``, ``responses`` (error answers), and the wire helpers ``eventstream`` (frame
encoder) and ``sigv4`` (signature check).
"""

from managedloop.testing._agentcore.clock import ManualClock
from managedloop.testing._agentcore.faults import AgentCoreFaults
from managedloop.testing._agentcore.server import ROUTES, AgentCoreEmulator, RecordedRequest

__all__ = ["ROUTES", "AgentCoreEmulator", "AgentCoreFaults", "ManualClock", "RecordedRequest"]
