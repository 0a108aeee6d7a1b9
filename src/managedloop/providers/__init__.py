"""Loop hosts. Each is imported on first use, so ``import managedloop`` stays SDK-free.

``Local`` (any OpenAI-compatible endpoint), ``ClaudeManagedAgents`` (the ``anthropic``
SDK, extra ``managedloop[claude]``), ``BedrockAgentCore`` (botocore, extra
``managedloop[agentcore]``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from managedloop.providers.agentcore import BedrockAgentCore
    from managedloop.providers.claude import ClaudeManagedAgents
    from managedloop.providers.local import Local

__all__ = ["BedrockAgentCore", "ClaudeManagedAgents", "Local"]

_WHERE = {
    "Local": "managedloop.providers.local",
    "ClaudeManagedAgents": "managedloop.providers.claude",
    "BedrockAgentCore": "managedloop.providers.agentcore",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'managedloop.providers' has no attribute {name!r}")
