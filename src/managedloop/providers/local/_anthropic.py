"""The ``anthropic:`` chat function: the Messages API through the official ``anthropic`` SDK.

The Local history stays neutral (OpenAI-shaped); each call converts it to Messages shape:

* ``system`` messages become the ``system`` parameter (joined by blank lines);
* an assistant message's ``tool_calls`` become ``tool_use`` blocks (arguments decoded);
* ``tool`` messages become ``tool_result`` blocks in a user turn; an error payload
  (``{"error": ..., "isError": true}``) sets ``is_error``;
* consecutive messages of one role merge into one turn (the API wants alternation).

The response converts back: text blocks joined, ``tool_use`` blocks as ``tool_calls`` with
JSON arguments; ``stop_reason`` maps to a finish reason (``end_turn``/``stop_sequence`` →
``stop``, ``tool_use`` → ``tool_calls``, ``max_tokens`` → ``length``, ``refusal`` →
``content_filter``; other values pass through); usage to ``prompt_tokens`` /
``completion_tokens``. The SDK's own retries are off: the connection's policy retries.

One SDK client per connection: its HTTP pool is bound to the event loop of the run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from managedloop.config import Secret
from managedloop.errors import (
    APIStatusError,
    AuthenticationError,
    ConfigError,
    TransportError,
)
from managedloop.handler import is_error_payload
from managedloop.providers.local._http import parse_retry_after
from managedloop.providers.local._types import (
    ChatRequest,
    ChatResponse,
    decode_arguments,
    excerpt,
)

__all__ = ["AnthropicChat", "from_messages_response", "to_messages_request"]

DEFAULT_MAX_TOKENS = 4096  # the Messages API requires max_tokens; override in model_config

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def _tool_result(message: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": message.get("tool_call_id"),
        "content": text,
    }
    if is_error_payload(text):
        block["is_error"] = True
    return block


def to_messages_request(request: ChatRequest) -> dict[str, Any]:
    """Keyword arguments for ``messages.create`` from a neutral request."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in request.messages:
        role = message.get("role")
        if role == "system":
            system.append(str(message.get("content") or ""))
            continue
        blocks: list[dict[str, Any]]
        if role == "tool":
            role, blocks = "user", [_tool_result(message)]
        elif role == "assistant":
            blocks = []
            if message.get("content"):
                blocks.append({"type": "text", "text": str(message["content"])})
            for call in message.get("tool_calls") or ():
                fn = call.get("function") or {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id"),
                        "name": fn.get("name", ""),
                        "input": decode_arguments(fn.get("arguments")),
                    }
                )
        else:
            role = "user"
            content = message.get("content")
            blocks = (
                list(content)
                if isinstance(content, list)
                else [{"type": "text", "text": str(content or "")}]
            )
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    options = dict(request.options)
    kwargs: dict[str, Any] = {
        "model": request.model,
        "messages": turns,
        "max_tokens": options.pop("max_tokens", DEFAULT_MAX_TOKENS),
        **options,
    }
    if system:
        kwargs["system"] = "\n\n".join(system)
    if request.tools:
        kwargs["tools"] = [
            {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "input_schema": t["function"].get("parameters") or {"type": "object"},
            }
            for t in request.tools
        ]
    return kwargs


def from_messages_response(body: Mapping[str, Any]) -> ChatResponse:
    """A neutral response from a Messages API response (as a dict)."""
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in body.get("content") or ():
        if block.get("type") == "text":
            text.append(block.get("text", ""))
        elif block.get("type") == "tool_use":
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {
                        "name": block.get("name", ""),
                        # null stays null: decode_tool_input makes it an input error
                        # (``or {}`` would run the tool with its defaults)
                        "arguments": json.dumps(block.get("input")),
                    },
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = calls
    stop = body.get("stop_reason")
    usage = body.get("usage") or {}
    return ChatResponse(
        message=message,
        finish_reason=_FINISH.get(stop, stop) if isinstance(stop, str) else None,
        usage={
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
        }
        if isinstance(usage.get("input_tokens"), int)
        else None,
    )


class AnthropicChat:
    """A chat function over ``anthropic.AsyncAnthropic().messages.create``."""

    gen_ai_provider = "anthropic"  # what telemetry names (LocalConnection.gen_ai_provider)

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: Secret | None,
        timeout: float,
        headers: Mapping[str, str],
    ) -> None:
        try:
            import anthropic
        except ImportError:  # pragma: no cover - the extra is installed in dev
            raise ConfigError(
                "anthropic: models need the anthropic SDK: pip install 'managedloop[claude]'",
                code="missing_dependency",
            ) from None
        if api_key is None:
            raise ConfigError(
                "anthropic: models need an API key: Local(api_key=...) or ANTHROPIC_API_KEY",
                key="api_key",
            )
        self._anthropic = anthropic
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key.reveal(),
            base_url=base_url,
            timeout=timeout,
            max_retries=0,
            default_headers=dict(headers) or None,
        )

    def __repr__(self) -> str:
        return "AnthropicChat()"

    async def __call__(self, request: ChatRequest) -> ChatResponse:
        sdk = self._anthropic
        try:
            message = await self._client.messages.create(**to_messages_request(request))
        except sdk.APIStatusError as exc:
            kind = AuthenticationError if exc.status_code == 401 else APIStatusError
            body = excerpt(str(exc.body))
            retry_after = exc.response.headers.get("retry-after")
            raise kind(
                f"the Messages API answered HTTP {exc.status_code}: {body}",
                status=exc.status_code,
                body=body,
                retry_after=parse_retry_after(retry_after),
            ) from None
        except sdk.APIConnectionError as exc:
            raise TransportError(
                f"the Messages API request failed: {type(exc).__name__}",
                cause=type(exc).__name__,
            ) from None
        response = from_messages_response(message.model_dump())
        if request.on_delta is not None and response.message.get("content"):
            request.on_delta(response.message["content"])  # no token streaming on this path
        return response

    async def aclose(self) -> None:
        await self._client.close()
