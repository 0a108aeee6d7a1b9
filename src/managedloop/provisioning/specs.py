"""Agent and environment specs: what to run, independent of where.

A spec is a frozen value. Its *identity* (``digest``) is a SHA-256 over a canonical JSON
encoding (sorted keys, no whitespace, UTF-8) of the content that defines behaviour:
``system_prompt``, the tools' definitions, ``terminal_tool``, ``model`` and
``model_config``. The ``name`` is the base name, not identity content.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from managedloop.errors import InvalidOptionsError
from managedloop.tools import Tool, ToolDefinition, Toolset, definitions_of, tools_of

__all__ = ["AgentSpec", "EnvironmentSpec", "canonical_json", "digest_of"]


def canonical_json(value: Any) -> bytes:
    """The canonical encoding digests are computed over."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    ).encode()


def digest_of(value: Any) -> str:
    """Hex SHA-256 of the canonical encoding."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


@dataclass(frozen=True, kw_only=True)
class AgentSpec:
    """An agent: prompt, tools, model. Hosts that keep agents server-side need a ``name``."""

    name: str | None = None
    system_prompt: str | None = None
    tools: Sequence[Any] = ()
    """``@tool`` functions (implementations run here), toolsets (``Toolset.from_mcp``) and/or
    bare ``ToolDefinition`` s."""
    model: str | None = None
    model_config: dict[str, Any] = field(default_factory=dict)
    """Host-specific model settings, passed through verbatim."""
    terminal_tool: str | None = None
    """The tool that finishes the agent's work (see ``require_terminal_tool``)."""
    description: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise InvalidOptionsError("AgentSpec.name must be a non-empty string", option="name")
        object.__setattr__(self, "tools", tuple(self.tools))
        defs = definitions_of(self._tools)  # fails early on bad or duplicate tools
        if self.terminal_tool is not None and self.terminal_tool not in {d.name for d in defs}:
            raise InvalidOptionsError(
                f"terminal_tool {self.terminal_tool!r} is not one of the agent's tools",
                option="terminal_tool",
            )

    @functools.cached_property
    def _tools(self) -> tuple[Tool[..., Any] | ToolDefinition, ...]:
        # Plain functions wrapped once: deriving a schema costs ~0.3 ms, and every run asks
        # for the definitions and the toolset. (cached_property writes the instance dict,
        # which a frozen dataclass allows; it is no field, so eq, hash and repr ignore it.)
        return tools_of(self.tools)  # a Toolset (MCP tools) gives its tools

    def tool_definitions(self) -> list[ToolDefinition]:
        return definitions_of(self._tools)

    def toolset(self) -> Toolset:
        """The implementations among ``tools`` (bare definitions have none)."""
        return Toolset([t for t in self._tools if not isinstance(t, ToolDefinition)])

    def identity(self) -> dict[str, Any]:
        """The content the digest covers."""
        return {
            "system_prompt": self.system_prompt,
            "tools": [d.to_dict() for d in self.tool_definitions()],
            "terminal_tool": self.terminal_tool,
            "model": self.model,
            "model_config": self.model_config,
        }

    @property
    def digest(self) -> str:
        return digest_of(self.identity())

    def require_name(self) -> str:
        if not self.name:
            raise InvalidOptionsError(
                "this host keeps agents server-side: AgentSpec needs a name", option="name"
            )
        return self.name


@dataclass(frozen=True, kw_only=True)
class EnvironmentSpec:
    """Where an agent runs (a sandbox image). ``config`` goes to the host verbatim."""

    name: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        return {"config": self.config}

    @property
    def digest(self) -> str:
        return digest_of(self.identity())
