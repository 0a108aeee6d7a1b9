"""Permission policies for the host-run toolsets of a Claude agent (cma-wire.md §10).

An agent's built-in toolset (``agent_toolset_20260401``: bash, edit, read, write, glob,
grep, web_fetch, web_search) and each MCP toolset (``mcp_toolset``) carry a permission
policy, for the whole set (``default_config``) and per tool (``configs``):
``always_allow``, ``always_ask`` (the host holds every use for a ``user.tool_confirmation``)
or ``auto`` (the host judges each use; an ``ask`` verdict holds it). Custom tools are
never under a policy: use ``@tool(requires_approval=...)`` for those.

The builders return the wire dicts the agent create request takes; put them in
``AgentSpec(host_tools=[...])``. A use the host holds comes back to the loop as an
:class:`~managedloop.ApprovalRequest` with ``source="host"``, the host's verdict and its
``evaluation``: ``confirm=`` may decide it at once, else the request ends
``requires_action`` with reason ``approval_required`` and the decision in
``result.pending``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from managedloop.errors import InvalidOptionsError

__all__ = ["AGENT_TOOLSET", "POLICIES", "agent_toolset", "mcp_toolset"]

AGENT_TOOLSET = "agent_toolset_20260401"
BUILT_IN_TOOLS = ("bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search")
POLICIES = ("always_allow", "always_ask", "auto")

Policy = Literal["always_allow", "always_ask", "auto"]


def _policy(value: Any, option: str) -> dict[str, str]:
    if value not in POLICIES:
        raise InvalidOptionsError(
            f"{option} must be one of {', '.join(POLICIES)}, got {value!r}", option=option
        )
    return {"type": value}


def _configs(
    tools: Mapping[str, Policy] | None, option: str, known: tuple[str, ...] | None
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, policy in (tools or {}).items():
        if not isinstance(name, str) or not name or (known is not None and name not in known):
            allowed = f" (one of {', '.join(known)})" if known is not None else ""
            raise InvalidOptionsError(
                f"{option}: {name!r} is not a tool name{allowed}", option=option
            )
        out.append({"name": name, "permission_policy": _policy(policy, f"{option}[{name!r}]")})
    return out


def agent_toolset(
    policy: Policy | None = None, *, tools: Mapping[str, Policy] | None = None
) -> dict[str, Any]:
    """The built-in toolset, with a default ``policy`` and per-tool overrides
    (``tools={"bash": "always_ask"}``); ``None`` keeps the host's default."""
    toolset: dict[str, Any] = {"type": AGENT_TOOLSET}
    if policy is not None:
        toolset["default_config"] = {"permission_policy": _policy(policy, "policy")}
    configs = _configs(tools, "tools", BUILT_IN_TOOLS)
    if configs:
        toolset["configs"] = configs
    return toolset


def mcp_toolset(
    server: str, policy: Policy | None = None, *, tools: Mapping[str, Policy] | None = None
) -> dict[str, Any]:
    """The tools of the MCP server named ``server`` (in the agent's ``mcp_servers``), with
    a default ``policy`` (the host's default for MCP is ``always_ask``) and per-tool
    overrides."""
    if not isinstance(server, str) or not server:
        raise InvalidOptionsError("mcp_toolset needs the MCP server's name", option="server")
    toolset: dict[str, Any] = {"type": "mcp_toolset", "mcp_server_name": server}
    if policy is not None:
        toolset["default_config"] = {"permission_policy": _policy(policy, "policy")}
    configs = _configs(tools, "tools", None)
    if configs:
        toolset["configs"] = configs
    return toolset
