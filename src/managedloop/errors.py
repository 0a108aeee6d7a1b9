"""The one exception tree of managedloop.

Outcomes are data (a :class:`~managedloop.SessionResult`), failures are exceptions. Every
exception the library raises derives from :class:`ManagedLoopError` and carries a stable
``code`` (a short snake_case string that never changes between releases) plus structured
``context``, so callers branch on data rather than on message text::

    ManagedLoopError                      code varies; .context holds the details
    ├── ConfigError                       missing_configuration, invalid_configuration
    ├── InvalidOptionsError (ValueError)  invalid_opts, invalid_turn_guard, outcome_unsupported,
    │                                     invalid_session_id, invalid_name, ...
    ├── ToolDefinitionError (TypeError)   invalid_tool_definition
    ├── ToolError                         raised *by a tool* to return an error result
    ├── ModelRetry                        raised *by an output validator*: re-ask the model
    ├── McpError                          mcp_unavailable, mcp_protocol (an MCP server's tools)
    ├── SessionTimeoutError (TimeoutError) timeout   (carries .partial_result)
    ├── UnsupportedError                  unsupported, not_supported
    ├── ProviderError                     a host failed (after retries)
    │   ├── TransportError                transport_error, stream_dropped, stream_idle_timeout,
    │   │                                 early_termination
    │   ├── APIStatusError                http_error (.status, .body)
    │   │   └── AuthenticationError       authentication_error
    │   ├── MalformedResponseError        malformed_chat_response, malformed_event, bad_frame
    │   └── HostStreamError               harness_stream_error, command_stream_error, session_error
    ├── ProvisioningError                 harness_ready_timeout, endpoint_failed, name conflicts
    ├── StoreError                        invalid_key, not_json, store_unavailable, store_corrupt
    ├── WebhookVerificationError          bad_signature, stale_webhook, malformed_webhook
    └── ArtifactError                     not_found, invalid_name, command_failed, bad_base64, ...

Messages and context never contain secrets: values that are secret are wrapped in
:class:`managedloop.config.Secret` before they reach any code that can raise.
"""

from __future__ import annotations

from typing import Any, ClassVar

from managedloop.results import SessionResult

__all__ = [
    "APIStatusError",
    "ArtifactError",
    "AuthenticationError",
    "ConfigError",
    "HostStreamError",
    "InvalidOptionsError",
    "MalformedResponseError",
    "ManagedLoopError",
    "McpError",
    "ModelRetry",
    "ProviderError",
    "ProvisioningError",
    "SessionTimeoutError",
    "StoreError",
    "ToolDefinitionError",
    "ToolError",
    "TransportError",
    "UnsupportedError",
    "WebhookVerificationError",
]


class ManagedLoopError(Exception):
    """Root of every exception managedloop raises.

    ``code`` is stable and machine-readable; ``context`` holds structured details (never
    secrets). ``partial_result`` is the :class:`SessionResult` accumulated so far when a
    session failed part-way (text, tool uses, usage and events are never thrown away).
    """

    default_code: ClassVar[str] = "error"

    def __init__(
        self,
        message: str = "",
        *,
        code: str | None = None,
        partial_result: SessionResult | None = None,
        **context: Any,
    ) -> None:
        self.code: str = code or self.default_code
        self.context: dict[str, Any] = context
        self.partial_result: SessionResult | None = partial_result
        super().__init__(message or self.code)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.code

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class ConfigError(ManagedLoopError):
    """A configuration value is missing or malformed."""

    default_code = "missing_configuration"


class InvalidOptionsError(ManagedLoopError, ValueError):
    """An option is invalid; raised before any request is sent."""

    default_code = "invalid_opts"


class ToolDefinitionError(ManagedLoopError, TypeError):
    """A tool cannot be defined (duplicate name, a parameter type with no JSON schema...)."""

    default_code = "invalid_tool_definition"


class ToolError(ManagedLoopError):
    """Raise from a tool to hand the model an error result (``is_error=True``) with this text."""

    default_code = "tool_error"


class ModelRetry(ManagedLoopError):  # noqa: N818 (the name pydantic-ai users know)
    """Raise from an ``output_validator=`` function to reject a typed output the model
    produced: the message goes back to the model, which is asked again (``output_retries``
    bounds how often); ``ml.ModelRetry("the date must be in the future")``."""

    default_code = "model_retry"


class McpError(ManagedLoopError):
    """An MCP server could not be started, reached or listed (``Toolset.from_mcp``, or opening
    its tools for a session). A failed *call* is an error result for the model instead."""

    default_code = "mcp_error"


class SessionTimeoutError(ManagedLoopError, TimeoutError):
    """``run`` exceeded its ``timeout``; everything it started was torn down first."""

    default_code = "timeout"


class UnsupportedError(ManagedLoopError):
    """The host does not support this operation (e.g. ``send_event`` on a request/response host)."""

    default_code = "unsupported"


class ProviderError(ManagedLoopError):
    """A loop host failed (after the retries its policy allows)."""

    default_code = "provider_error"


class TransportError(ProviderError):
    """The connection failed, dropped, went silent or ended early."""

    default_code = "transport_error"


class APIStatusError(ProviderError):
    """The host answered with a non-success HTTP status."""

    default_code = "http_error"

    @property
    def status(self) -> int | None:
        status = self.context.get("status")
        return status if isinstance(status, int) else None


class AuthenticationError(APIStatusError):
    """Credentials are missing, invalid or about to expire."""

    default_code = "authentication_error"


class MalformedResponseError(ProviderError):
    """The host sent something that does not parse as its protocol."""

    default_code = "malformed_response"


class HostStreamError(ProviderError):
    """The host reported an error inside its event stream (exception frame, session.error)."""

    default_code = "host_stream_error"


class ProvisioningError(ManagedLoopError):
    """Provisioning (create/wait/adopt/teardown of agents, environments, harnesses) failed."""

    default_code = "provision_failed"


class StoreError(ManagedLoopError):
    """A store (``managedloop.stores``) refused a key or value, or could not be read or written."""

    default_code = "store_error"


class ArtifactError(ManagedLoopError):
    """A session artifact operation failed or was refused."""

    default_code = "artifact_error"


class WebhookVerificationError(ManagedLoopError):
    """A webhook delivery was refused (``managedloop.webhooks``): its signature does not
    match, its timestamp is outside the tolerance, or its headers or body are malformed.
    Nothing was run or changed."""

    default_code = "bad_signature"
