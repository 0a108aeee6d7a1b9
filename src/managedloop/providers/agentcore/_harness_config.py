"""What a harness is configured with besides its prompt, model and inline tools.

``AgentSpec.host_tools`` on AgentCore are the harness's **server tool configs**: tools the
harness runs itself, each a ``HarnessTool`` as the service takes it (``{"type", "name",
"config": {<union member>: {...}}}``) of one of four types: ``remote_mcp`` (an MCP server
by URL, with optional ``headers`` and ``outboundAuth``: ``awsIam`` or ``none``),
``agentcore_gateway`` (a gateway by ARN, ``outboundAuth`` ``awsIam``/``none``/``oauth``),
``agentcore_browser`` and ``agentcore_code_interpreter`` (the AWS built-in, or a custom
one by ARN). :func:`remote_mcp`, :func:`gateway`, :func:`browser` and
:func:`code_interpreter` build them. ``inline_function`` is not a host tool (the spec's
``tools`` are) and Claude's toolsets have no AgentCore meaning: both are refused.

``AgentSpec.harness_config`` holds the harness settings in CreateHarness's own member
names (:data:`HARNESS_KEYS`). Four of them also exist per invocation
(:data:`INVOKE_KEYS`: ``skills``, ``allowedTools``, ``maxIterations``, ``maxTokens``) and
are sent on each ``InvokeHarness`` when a spec is run against an existing harness; the
others only exist on the harness and are refused there (provision the spec instead).

Every body built from a spec is checked against botocore's own input shape
(:func:`check_shape`) before any request, so a wrong type, a missing member or a bad
pattern fails as ``InvalidOptionsError(code="invalid_harness_config")`` naming the host.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from managedloop.errors import InvalidOptionsError
from managedloop.providers.agentcore._botocore import default_session
from managedloop.provisioning.specs import AgentSpec

__all__ = [
    "HARNESS_KEYS",
    "HOST_TOOL_TYPES",
    "INVOKE_KEYS",
    "browser",
    "check_shape",
    "code_interpreter",
    "gateway",
    "harness_settings",
    "host_tools",
    "remote_mcp",
]

HOST_TOOL_TYPES: dict[str, str] = {
    "remote_mcp": "remoteMcp",
    "agentcore_gateway": "agentCoreGateway",
    "agentcore_browser": "agentCoreBrowser",
    "agentcore_code_interpreter": "agentCoreCodeInterpreter",
}
"""Host tool type -> its ``HarnessToolConfiguration`` union member."""

INVOKE_KEYS = ("skills", "allowedTools", "maxIterations", "maxTokens")
HARNESS_KEYS = (
    *INVOKE_KEYS,
    "memory",
    "truncation",
    "hooks",
    "environmentArtifact",
    "authorizerConfiguration",
)

HOST = "agentcore"
_VALUE_RE = re.compile(r", value: .*?(, type: |, valid |$)", re.MULTILINE)


def remote_mcp(
    name: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    outbound_auth: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A remote MCP server the harness calls (``outbound_auth``: ``{"awsIam": {"service":
    ..., "region": ...}}`` or ``{"none": {}}``)."""
    config: dict[str, Any] = {"url": url}
    if headers:
        config["headers"] = dict(headers)
    if outbound_auth is not None:
        config["outboundAuth"] = dict(outbound_auth)
    return {"type": "remote_mcp", "name": name, "config": {"remoteMcp": config}}


def gateway(
    name: str, gateway_arn: str, *, outbound_auth: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """An AgentCore gateway (``outbound_auth``: ``{"awsIam": {}}``, ``{"none": {}}`` or
    ``{"oauth": {"providerArn": ..., "scopes": [...]}}``)."""
    config: dict[str, Any] = {"gatewayArn": gateway_arn}
    if outbound_auth is not None:
        config["outboundAuth"] = dict(outbound_auth)
    return {"type": "agentcore_gateway", "name": name, "config": {"agentCoreGateway": config}}


def browser(name: str = "browser", *, browser_arn: str | None = None) -> dict[str, Any]:
    """The AgentCore browser (the AWS one unless ``browser_arn`` names a custom one)."""
    config = {"browserArn": browser_arn} if browser_arn else {}
    return {"type": "agentcore_browser", "name": name, "config": {"agentCoreBrowser": config}}


def code_interpreter(
    name: str = "code_interpreter", *, code_interpreter_arn: str | None = None
) -> dict[str, Any]:
    """The AgentCore code interpreter (the AWS one unless an ARN names a custom one)."""
    config = {"codeInterpreterArn": code_interpreter_arn} if code_interpreter_arn else {}
    return {
        "type": "agentcore_code_interpreter",
        "name": name,
        "config": {"agentCoreCodeInterpreter": config},
    }


def host_tools(spec: AgentSpec) -> list[dict[str, Any]]:
    """The spec's ``host_tools`` as harness tools (verbatim), each checked for its type."""
    out: list[dict[str, Any]] = []
    for tool in spec.host_tools:
        kind = tool.get("type")
        member = HOST_TOOL_TYPES.get(kind) if isinstance(kind, str) else None
        if member is None:
            raise InvalidOptionsError(
                f"host tool type {kind!r}: the agentcore host runs "
                f"{', '.join(HOST_TOOL_TYPES)} (custom tools go in AgentSpec.tools)",
                code="unsupported_host_tool",
                option="host_tools",
                host=HOST,
            )
        config = tool.get("config")
        if isinstance(config, Mapping) and set(config) != {member}:
            raise InvalidOptionsError(
                f"a {kind} host tool's config is {{{member!r}: {{...}}}}, got {sorted(config)!r}",
                code="invalid_harness_config",
                option="host_tools",
                host=HOST,
            )
        out.append(dict(tool))
    return out


def harness_settings(spec: AgentSpec) -> dict[str, Any]:
    """``spec.harness_config``, its keys checked (the shapes are :func:`check_shape`'s)."""
    unknown = sorted(set(spec.harness_config) - set(HARNESS_KEYS))
    if unknown:
        raise InvalidOptionsError(
            f"harness_config takes {', '.join(HARNESS_KEYS)}; unknown: {', '.join(unknown)}",
            code="invalid_harness_config",
            option="harness_config",
            host=HOST,
        )
    return dict(spec.harness_config)


@functools.cache
def _validator() -> Any:
    from botocore.validate import ParamValidator

    return ParamValidator()


@functools.cache
def _input_shape(service: str, operation: str) -> Any:
    """botocore's input shape (loaded once: every session open checks against it)."""
    model = default_session().get_service_model(service)
    return model.operation_model(operation).input_shape


def check_shape(service: str, operation: str, params: Mapping[str, Any], *, option: str) -> None:
    """Refuse ``params`` botocore would refuse for ``operation`` (its own validator on the
    operation's input shape), before any request, naming the host."""
    report = _validator().validate(dict(params), _input_shape(service, operation))
    if report.has_errors():
        # botocore's report quotes the offending values; some (MCP headers, a URL) are
        # secrets, so only the parameter paths and the rules stay.
        text = _VALUE_RE.sub(r"\1", report.generate_report())
        raise InvalidOptionsError(
            f"the agentcore host would refuse this {operation} request: {text}",
            code="invalid_harness_config",
            option=option,
            host=HOST,
            operation=operation,
        )
