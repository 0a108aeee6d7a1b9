"""The Local loop host: the agent loop runs in this process, over any chat endpoint.

>>> from managedloop.providers import Local
>>> provider = Local(model="llama3.2", base_url="http://127.0.0.1:11434/v1", api_key="-")

The model is reached through a *chat function* (:class:`ChatFunction`): by default OpenAI
Chat Completions over HTTP (streaming or not), ``anthropic:<model>`` for the Messages API,
or any ``async (ChatRequest) -> ChatResponse`` passed as ``Local(chat=...)`` —
:class:`managedloop.testing.ScriptedChatModel` is one that needs no server, and
:class:`LlamaCppChat` runs a real GGUF model in this process (extra ``local-model``).
"""

from managedloop.providers.local._connection import (
    DUPLICATE_DIRECTIVE,
    LocalConnection,
    corrective_text,
    duplicate_text,
    final_turn_text,
    is_transient,
)
from managedloop.providers.local._llama_cpp import LlamaCppChat
from managedloop.providers.local._provider import Local, set_testing
from managedloop.providers.local._types import (
    ChatFunction,
    ChatRequest,
    ChatResponse,
    History,
)

__all__ = [
    "DUPLICATE_DIRECTIVE",
    "ChatFunction",
    "ChatRequest",
    "ChatResponse",
    "History",
    "LlamaCppChat",
    "Local",
    "LocalConnection",
    "corrective_text",
    "duplicate_text",
    "final_turn_text",
    "is_transient",
    "set_testing",
]
