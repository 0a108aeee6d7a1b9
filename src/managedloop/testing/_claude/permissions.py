"""Permission policies in the Claude emulator (cma-wire.md §10).

An agent's host-run toolsets (``agent_toolset_20260401``, ``mcp_toolset``) are stored in
their *resolved* form, as the API returns them (every field the SDK's response types
require: ``default_config{enabled, permission_policy}``, ``configs[]{name, type, enabled,
permission_policy}``). A built-in tool use is then evaluated against the resolved policy:

* ``always_allow`` (the built-in default): runs, ``evaluated_permission: "allow"``;
* ``always_ask``: held, ``evaluated_permission: "ask"``, ``evaluation: {type: always_ask}``;
* ``auto``: the emulator reaches no judgement, so it holds the use as the service does
  then: ``evaluation: {type: auto, evaluated_permission: {type: ask, reason_code:
  indeterminate}}``.

A held use idles the session on ``requires_action`` naming it until a
``user.tool_confirmation`` allows (the tool runs) or denies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["evaluate", "resolve_tools"]

AGENT_TOOLSET = "agent_toolset_20260401"
_DEFAULT = {AGENT_TOOLSET: "always_allow", "mcp_toolset": "always_ask"}


def _policy(value: Any, fallback: str) -> dict[str, Any]:
    if isinstance(value, Mapping) and isinstance(value.get("type"), str):
        return {"type": value["type"]}
    return {"type": fallback}


def _resolve(toolset: Mapping[str, Any]) -> dict[str, Any]:
    kind = toolset["type"]
    given = toolset.get("default_config")
    given = given if isinstance(given, Mapping) else {}
    default = _policy(given.get("permission_policy"), _DEFAULT[kind])
    enabled = given.get("enabled")
    out: dict[str, Any] = {
        "type": kind,
        "default_config": {
            "enabled": enabled if isinstance(enabled, bool) else True,
            "permission_policy": default,
        },
        "configs": [],
    }
    if kind == "mcp_toolset":
        out["mcp_server_name"] = toolset.get("mcp_server_name")
    for config in toolset.get("configs") or []:
        if not isinstance(config, Mapping) or not isinstance(config.get("name"), str):
            continue
        on = config.get("enabled")
        entry: dict[str, Any] = {
            "name": config["name"],
            "enabled": on if isinstance(on, bool) else out["default_config"]["enabled"],
            "permission_policy": _policy(config.get("permission_policy"), default["type"]),
        }
        if kind == AGENT_TOOLSET:
            entry["type"] = config["name"]
        out["configs"].append(entry)
    return out


def resolve_tools(value: Any) -> list[Any]:
    """An agent's ``tools`` as stored and returned: toolsets resolved, others as given."""
    if not isinstance(value, list):
        return []
    return [
        _resolve(t) if isinstance(t, Mapping) and t.get("type") in _DEFAULT else t for t in value
    ]


def evaluate(tools: Any, name: str) -> tuple[str, dict[str, Any]]:
    """``(evaluated_permission, evaluation)`` for a built-in tool use of ``name``."""
    policy = "always_allow"
    for toolset in tools if isinstance(tools, list) else []:
        if not isinstance(toolset, Mapping) or toolset.get("type") != AGENT_TOOLSET:
            continue
        policy = toolset["default_config"]["permission_policy"]["type"]
        for config in toolset.get("configs") or []:
            if config.get("name") == name:
                policy = config["permission_policy"]["type"]
    if policy == "always_ask":
        return "ask", {"type": "always_ask"}
    if policy == "auto":
        judged = {"type": "ask", "reason_code": "indeterminate"}
        return "ask", {"type": "auto", "evaluated_permission": judged}
    return "allow", {"type": "always_allow"}
