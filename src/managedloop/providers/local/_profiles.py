"""Compatibility profiles: what the Local host's HTTP client sends to a given server.

OpenAI-compatible servers disagree on details that cannot all be detected from their
answers. What *can* be detected is handled for every server, whatever the profile:

* a streamed tool call's ``id`` and name sent once, whole in every chunk, or split;
* a server that ignores ``stream: true`` and answers one JSON body;
* a missing ``finish_reason`` (read like ``null``);
* no usage reported (``SessionResult.usage.raw == []``: "not reported", not zero).

The rest is a :class:`Profile`, chosen by name (``Local(profile="llama.cpp")``) or given
whole (``Local(profile=Profile(...))``). The default is meant to work as written against
OpenAI's API and llama.cpp's servers; the suite runs it against ``python -m
llama_cpp.server`` (llama-cpp-python 0.3.36, ``chatml-function-calling``), streamed and
not, and against emulations of the other servers' differences:

========== ============== ============== ============== ===================== ==================
profile    empty content  include_usage  tool_choice    parallel_tool_calls   auto tools stream
========== ============== ============== ============== ===================== ==================
default    ``""``         asked for      ``"auto"``     forwarded             streamed, fallback
openai     ``""``         asked for      not sent       forwarded             streamed, fallback
llama.cpp  ``""``         asked for      ``"auto"``     dropped               sent unstreamed
vllm       ``""``         asked for      not sent       forwarded             streamed, fallback
ollama     ``""``         asked for      not sent       dropped               streamed, fallback
========== ============== ============== ============== ===================== ==================

* *empty content*: an assistant message with tool calls and no text is sent with
  ``content: ""`` (llama.cpp's Python server answers HTTP 500 to ``null``); a profile with
  ``null_content=True`` sends ``null``.
* *include_usage*: streamed requests carry ``stream_options: {"include_usage": true}``.
* *tool_choice*: sent when tools are offered and ``model_config`` sets none. llama.cpp's
  Python server ignores ``tools`` without it; vLLM refuses ``"auto"`` unless started with
  ``--enable-auto-tool-choice``.
* *parallel_tool_calls*: a ``parallel_tool_calls`` key in ``model_config`` is sent, or
  dropped (with a debug log) for servers that do not support it.
* *auto tools stream*: how a streamed call (``Local(stream=True)``) that offers tools with
  ``tool_choice: "auto"`` (the profile's or ``model_config``'s) goes out. llama-cpp-python's
  server cannot stream it once the model picks a tool: it answers HTTP 200
  ``text/event-stream`` and then an empty body (it raised "Automatic streaming tool choice
  is not supported" after sending the headers). *sent unstreamed*: such a call is sent
  without ``stream`` and its text handed to ``on_delta`` once, as for a server that
  ignores ``stream: true``; calls without tools, or with a named ``tool_choice``, still
  stream. *streamed, fallback*: it is streamed, and a stream that ends cleanly before its
  first ``data:`` line is taken as this server's answer: the call is re-sent unstreamed at
  once, on a new connection (the server closes the old one), not as a retry (nothing was
  received, so nothing ran), and every later such call of the provider goes unstreamed.
  The trade-off: any server that ends such a stream with no data (one that closes an
  HTTP/1.0 body early too) loses streaming for these calls, never a call. A stream cut
  mid-body, or one with data but no ``[DONE]``, is still a dropped stream, retried.

Anthropic (``anthropic:<model>``) and custom chat functions ignore the profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from managedloop.errors import InvalidOptionsError

__all__ = ["PROFILES", "Profile", "resolve_profile"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    """What to send to one kind of server (see the module docstring's table)."""

    name: str = "custom"
    null_content: bool = False
    """Send ``content: null`` (not ``""``) on assistant messages carrying tool calls."""
    include_usage: bool = True
    """Ask for usage on streamed requests (``stream_options.include_usage``)."""
    tool_choice: str | None = None
    """``tool_choice`` sent when tools are offered and ``model_config`` sets none."""
    parallel_tool_calls: bool = True
    """Forward a ``parallel_tool_calls`` key from ``model_config`` (else drop it)."""
    stream_auto_tools: bool = True
    """Stream a call that offers tools with ``tool_choice: "auto"``, falling back to
    unstreamed once the server shows it cannot; ``False`` never streams such a call."""


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(name="default", tool_choice="auto"),
        Profile(name="openai"),
        Profile(
            name="llama.cpp",
            tool_choice="auto",
            parallel_tool_calls=False,
            stream_auto_tools=False,
        ),
        Profile(name="vllm"),
        Profile(name="ollama", parallel_tool_calls=False),
    )
}


def resolve_profile(value: Any) -> Profile:
    """A :class:`Profile` from ``Local(profile=...)``: ``None`` (the default), a name, or a
    :class:`Profile`; anything else is ``invalid_opts``."""
    if value is None:
        return PROFILES["default"]
    if isinstance(value, Profile):
        return value
    if isinstance(value, str) and value in PROFILES:
        return PROFILES[value]
    raise InvalidOptionsError(
        f"profile must be one of {', '.join(sorted(PROFILES))} or a Profile, got {value!r}",
        option="profile",
    )
