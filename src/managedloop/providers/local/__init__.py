"""The Local loop host: the agent loop runs in this process, over any chat endpoint.

>>> from managedloop.providers import Local
>>> provider = Local(model="llama3.2", base_url="http://127.0.0.1:11434/v1", api_key="-")

The model is reached through a *chat function* (:class:`ChatFunction`): by default OpenAI
Chat Completions over HTTP (streaming or not), ``anthropic:<model>`` for the Messages API,
or any ``async (ChatRequest) -> ChatResponse`` passed as ``Local(chat=...)`` —
:class:`managedloop.testing.ScriptedChatModel` is one that needs no server, and
:class:`LlamaCppChat` runs a real GGUF model in this process (extra ``local-model``).

``Local(profile=...)`` picks what the HTTP client sends to servers that disagree on
details (:mod:`managedloop.providers.local._profiles` has the table). ``model_config`` keys
are sent verbatim as request-body keys (``temperature``, ``max_tokens``, ``tool_choice``,
``top_p``, ``seed``, ``response_format``...), merged over the agent spec's
``model_config``, except: ``model``, ``api_key``, ``base_url`` and ``metadata`` in the
spec's ``model_config`` are read by the library, not sent; ``model``, ``messages``,
``tools`` and ``stream`` are always the library's; ``stream_options`` is merged into the
streamed request's (never sent unstreamed); ``parallel_tool_calls`` is dropped for
profiles whose server does not support it. :func:`redact_url` masks a URL's userinfo, for
showing a ``base_url`` in a message.

The bytes go through a transport (:class:`AsyncTransport`, one method, like httpx's):
:class:`HttpTransport` by default, :class:`AiohttpTransport` beside it, and
:class:`managedloop.testing.MockTransport` for tests; ``Local(proxy=..., trust_env=...,
verify=..., client_cert=...)`` configure the default one.
"""

from managedloop.providers.local._connection import (
    DUPLICATE_DIRECTIVE,
    LocalConnection,
    corrective_text,
    duplicate_text,
    final_turn_text,
    is_transient,
)
from managedloop.providers.local._http import redact_url
from managedloop.providers.local._llama_cpp import LlamaCppChat
from managedloop.providers.local._profiles import PROFILES, Profile
from managedloop.providers.local._provider import Local, set_testing
from managedloop.providers.local._tls import InsecureTLSWarning
from managedloop.providers.local._transports import (
    AiohttpTransport,
    AsyncTransport,
    HttpRequest,
    HttpResponse,
    HttpTransport,
)
from managedloop.providers.local._types import (
    ChatFunction,
    ChatRequest,
    ChatResponse,
    History,
    text_of,
)

__all__ = [
    "DUPLICATE_DIRECTIVE",
    "PROFILES",
    "AiohttpTransport",
    "AsyncTransport",
    "ChatFunction",
    "ChatRequest",
    "ChatResponse",
    "History",
    "HttpRequest",
    "HttpResponse",
    "HttpTransport",
    "InsecureTLSWarning",
    "LlamaCppChat",
    "Local",
    "LocalConnection",
    "Profile",
    "corrective_text",
    "duplicate_text",
    "final_turn_text",
    "is_transient",
    "redact_url",
    "set_testing",
    "text_of",
]
