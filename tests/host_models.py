"""A model id each host serves, for the tests whose one spec runs on every host.

Bedrock names Anthropic's models by its own ids (``[<geo>.]anthropic.claude-…``) and
refuses a Claude API id (``claude-haiku-4-5``) with a ValidationException, and the
AgentCore emulator does as Bedrock does. So a spec shared across hosts gets its model from
here, per host, rather than one Claude id for all (which would need a looser emulator).

``MODELS[host]`` is the same model on each host: Claude Haiku 4.5 (the Claude API alias
``claude-haiku-4-5``; its Bedrock id through the ``us.`` cross-region profile).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import managedloop as ml

__all__ = ["BEDROCK_MODEL", "CLAUDE_MODEL", "MODELS", "for_host", "model_for"]

CLAUDE_MODEL = "claude-haiku-4-5"
BEDROCK_MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
MODELS: dict[str, str] = {
    "claude": CLAUDE_MODEL,
    "agentcore": BEDROCK_MODEL,
    "local": CLAUDE_MODEL,  # a chat endpoint serves whatever name it is given
}


def _host(host: Any) -> str:
    """``host`` as a host name: a name already, or a provider (its ``name``)."""
    name = host if isinstance(host, str) else getattr(host, "name", None)
    if name not in MODELS:
        raise KeyError(f"no test model for host {host!r}")
    return str(name)


def model_for(host: Any) -> str:
    """The model id ``host`` (a host name or a provider) serves."""
    return MODELS[_host(host)]


def for_host(spec: ml.AgentSpec, host: Any) -> ml.AgentSpec:
    """``spec`` with the model ``host`` serves (a spec without a model is left as it is)."""
    if spec.model is None:
        return spec
    return dataclasses.replace(spec, model=model_for(host))
