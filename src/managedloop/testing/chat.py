"""Local-host test kit: a scripted chat model and a loopback Chat Completions emulator.

:class:`ScriptedChatModel` is a chat function (``Local(chat=ScriptedChatModel(script))``):
no server, no HTTP, the fastest way to test an agent's tools. :class:`ChatEmulator` serves
the same script as a real HTTP server on ``127.0.0.1`` (a free port), so the production
HTTP client is what gets tested:

>>> import managedloop as ml
>>> from managedloop.providers import Local
>>> from managedloop.testing import ChatEmulator, call, say
>>> @ml.tool
... def get_weather(city: str) -> str:
...     '''Current weather for a city.'''
...     return f"Sunny in {city}"
>>> agent = ml.AgentSpec(name="weather", tools=[get_weather])
>>> with ChatEmulator([call("get_weather", {"city": "Paris"}), say("Sunny.")]) as emu:
...     provider = Local(model="m", base_url=emu.base_url, api_key=emu.api_key)
...     result = ml.run_sync(provider, agent=agent, prompt="Weather in Paris?")
>>> emu.requests[1].tool_results[0].text
'Sunny in Paris'
>>> result.text
'Sunny.'

The emulator serves ``POST /v1/chat/completions`` (JSON, or SSE with ``stream: true``,
``data: [DONE]`` and ``stream_options.include_usage``), ``POST /v1/messages`` (the Anthropic
Messages API, non-streaming, for ``anthropic:`` models) and ``GET /v1/models``. It checks
the key (``Authorization: Bearer`` / ``x-api-key``; 401 otherwise). Each request plays the
script step whose index is the number of assistant messages in the request, so any number
of concurrent conversations work. A script step that raises (an ``assert`` on what the
model was sent, or running out of steps) answers HTTP 400 and is re-raised when the
``with`` block exits, so a failed script assertion fails the test.

:class:`ChatFaults` injects failures, bounded and deterministic, counted over requests in
arrival order: HTTP statuses with ``Retry-After``, slow answers and slow chunks, malformed
bodies, and connections dropped mid-body or mid-stream; and the ways real servers differ
(redirects, an error object mid-stream, ``stream: true`` ignored, no ``finish_reason``,
tool-call names repeated in every chunk, a 500 for ``null`` content, an empty stream for
a streamed tool call chosen under ``tool_choice: "auto"``).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from managedloop.errors import APIStatusError, UnsupportedError
from managedloop.hosts import ToolInputDelta
from managedloop.providers.local import ChatRequest, ChatResponse
from managedloop.results import fast_builder
from managedloop.testing._chat_render import (
    HistoryReader,
    completion_body,
    definitions,
    messages_api_request,
    model_request,
    render_completion,
    render_messages_response,
    sse_chunks,
)
from managedloop.testing._loopback import MAX_BODY, LoopbackServer
from managedloop.testing.script import Fail, Grade, ModelRequest, Reply, ScriptedAgent, Step
from managedloop.tools import ToolDefinition

__all__ = ["ChatEmulator", "ChatFaults", "ScriptedChatModel"]

DEFAULT_CHUNK_SIZE = 8  # characters per streamed chunk: small enough to see several deltas


class ScriptedChatModel:
    """A chat function that plays a script (see :mod:`managedloop.testing.script`).

    ``requests`` records what the model was sent at each step. A :class:`Fail` step raises
    :class:`~managedloop.APIStatusError` with status 500 (transient: the loop retries it).
    A step that raises (a failed ``assert`` on the request, an exhausted script) fails the
    run with :class:`~managedloop.ProviderError` whose ``__cause__`` is the step's exception;
    ``errors`` keeps every such exception. Streamed (``Local(stream=True)``), it hands an
    answer's text to ``on_delta`` and each tool call's arguments to ``on_tool_delta`` in
    pieces of ``chunk_size`` characters.
    """

    def __init__(
        self,
        script: Sequence[Step] | None = None,
        *,
        agent: ScriptedAgent | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        self.agent = agent if agent is not None else ScriptedAgent(script)
        self.chunk_size = chunk_size
        self.errors: list[BaseException] = []
        self._tools: Any = None  # the tools list last seen, and its definitions
        self._definitions: list[ToolDefinition] = []
        self._reader = HistoryReader()

    @property
    def requests(self) -> list[ModelRequest]:
        return self.agent.requests

    def __repr__(self) -> str:
        return f"ScriptedChatModel(steps={len(self.agent.script or ())})"

    async def __call__(self, request: ChatRequest) -> ChatResponse:
        # The definitions are read once per tools list (the loop sends the same list every
        # turn), the history only where it grew; the record is built when a test reads it.
        tools = request.tools
        if tools is not self._tools:
            self._tools, self._definitions = tools, definitions(tools)
        agent = self.agent
        try:
            turn, record = self._reader.read(request.messages, self._definitions, request.model)
            step = agent.play(turn, record)
        except Exception as exc:
            self.errors.append(exc)
            raise
        if type(step) is not Reply:  # most steps are replies: no isinstance chain
            if isinstance(step, Fail):
                raise APIStatusError(
                    f"scripted failure: {step.message}",
                    status=500,
                    body=step.message,
                    kind=step.kind,
                )
            if isinstance(step, Grade):
                raise UnsupportedError("a chat model cannot grade outcomes (Grade step)")
        message, finish, usage = render_completion(step, agent, request.model)
        if request.on_delta is not None and (content := message["content"]):
            for start in range(0, len(content), self.chunk_size):
                request.on_delta(content[start : start + self.chunk_size])
        if request.on_tool_delta is not None and "tool_calls" in message:
            self._stream_calls(message["tool_calls"], request.on_tool_delta)
        return _response(message, finish, usage)

    def _stream_calls(self, calls: Sequence[Mapping[str, Any]], emit: Any) -> None:
        """Each call's arguments in ``chunk_size`` pieces, as a streaming server sends them."""
        size = self.chunk_size
        for call in calls:
            fn = call["function"]
            arguments, name = fn["arguments"], fn["name"]
            for start in range(0, len(arguments), size):
                emit(ToolInputDelta(call["id"], name, arguments[start : start + size]))


_ChatResponseB = fast_builder(ChatResponse, ("message", "finish_reason", "usage"))


def _response(message: dict[str, Any], finish: str, usage: dict[str, Any] | None) -> ChatResponse:
    """``ChatResponse(message=..., finish_reason=..., usage=...)``, faster (one per scripted
    turn; see :mod:`managedloop.results` on the fast constructors)."""
    response: Any = _ChatResponseB()
    response.message = message
    response.finish_reason = finish
    response.usage = usage
    response.__class__ = ChatResponse
    return response  # type: ignore[no-any-return]


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatFaults:
    """Failures the emulator injects, each consumed once by requests in arrival order.

    A request takes at most one of ``statuses`` / ``drop`` / ``malformed`` (in that order of
    precedence); ``slow`` delays apply on top.
    """

    statuses: Sequence[int] = ()
    """Answer the first ``len(statuses)`` requests with these HTTP statuses, in order."""
    retry_after: str | float | None = None
    """``Retry-After`` header on those answers (seconds, or an HTTP date)."""
    drop: int = 0
    """Cut this many answers off mid-body (JSON) or mid-stream (SSE) and close the socket."""
    drop_after: int = 2
    """SSE frames sent before a streamed answer is cut off."""
    malformed: int = 0
    """Answer this many requests with HTTP 200 and a body that is not a chat completion."""
    slow: int = 0
    """Delay this many answers by ``delay`` seconds before the first byte."""
    delay: float = 0.0
    chunk_delay: float = 0.0
    """Seconds between streamed frames (every stream)."""
    reject_null_content: bool = False
    """Answer HTTP 500 with a long pydantic validation message, as llama.cpp's Python server
    does, to any request holding an assistant message whose ``content`` is ``null``."""
    stream_error: int = 0
    """Send this many streamed answers as one chunk, then ``data: {"error": ...}`` (of
    ``stream_error_type``) and ``[DONE]``, as vLLM and llama.cpp do when generation fails."""
    stream_error_type: str = "server_error"
    ignore_stream: bool = False
    """Answer ``stream: true`` requests with a plain JSON body (servers that ignore it)."""
    omit_finish_reason: bool = False
    """Leave the ``finish_reason`` key out of JSON answers (some servers do)."""
    redirect: int = 0
    """Answer this many requests with ``307`` to ``redirect_to`` (before any other fault)."""
    redirect_to: str = ""
    stream_names: Literal["once", "every_chunk", "split"] = "once"
    """How a streamed tool call's ``id`` and name arrive (every stream): once in its first
    chunk (OpenAI), whole in every chunk (llama.cpp's server) or split in two parts."""
    no_auto_tool_stream: bool = False
    """Play llama-cpp-python's server (0.3.x, ``chatml-function-calling``) on a streamed
    request with ``tools`` and ``tool_choice: "auto"`` whose answer is a tool call: HTTP 200
    with its SSE headers, then an empty chunked body that ends cleanly (``0\r\n\r\n``),
    and the connection closed (uvicorn closes it after the exception), as the server raises
    "Automatic streaming tool choice is not supported" after sending the headers. A text
    answer streams as usual, as there."""


class _FaultState:
    __slots__ = ("drop", "faults", "malformed", "redirect", "requests", "slow", "stream_error")

    def __init__(self, faults: ChatFaults) -> None:
        self.faults = faults
        self.requests = 0
        self.drop = faults.drop
        self.malformed = faults.malformed
        self.slow = faults.slow
        self.redirect = faults.redirect
        self.stream_error = faults.stream_error

    def take(self, name: str) -> bool:
        """Consume one of the ``redirect`` / ``stream_error`` faults, if any are left."""
        left: int = getattr(self, name)
        if left > 0:
            setattr(self, name, left - 1)
        return left > 0

    def next(self) -> tuple[int | None, str | None, float]:
        """(status to answer with, "drop" | "malformed" | None, delay) for the next request."""
        index = self.requests
        self.requests += 1
        delay = 0.0
        if self.slow > 0:
            self.slow -= 1
            delay = self.faults.delay
        if index < len(self.faults.statuses):
            return self.faults.statuses[index], None, delay
        if self.drop > 0:
            self.drop -= 1
            return None, "drop", delay
        if self.malformed > 0:
            self.malformed -= 1
            return None, "malformed", delay
        return None, None, delay


_AUTO: Any = object()


def _error(
    status: int, message: str, kind: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "code": kind}},
        status=status,
        headers=headers,
    )


class ChatEmulator(LoopbackServer):
    """A loopback OpenAI Chat Completions server driven by a script (see module docs).

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1`` (for ``Local(base_url=...)``).
        anthropic_base_url: ``http://127.0.0.1:<port>`` (for ``anthropic:`` models).
        api_key: The key the server expects (``None``: any or none).
        requests: What the model was sent, one :class:`ModelRequest` per step played.
        received: Every request body, as decoded JSON, in arrival order.
        errors: Exceptions raised by script steps (re-raised on exit).
        agent: The :class:`ScriptedAgent` playing the script.
        models: The model ids served (``models=[...]``); ``None``, the default, serves
            any. Another id is answered HTTP 404 ``model_not_found``, as OpenAI does.

    A start that fails raises :class:`~managedloop.testing.EmulatorStartError`.
    """

    label = "chat emulator"

    def __init__(
        self,
        script: Sequence[Step] | None = None,
        *,
        faults: ChatFaults | None = None,
        api_key: str | None = _AUTO,
        host: str = "127.0.0.1",
        port: int = 0,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        agent: ScriptedAgent | None = None,
        models: Sequence[str] | None = None,
    ) -> None:
        super().__init__(host=host, port=port)
        self.agent = agent if agent is not None else ScriptedAgent(script)
        # None: any model id is served (a local server's usual way). A list: any other id
        # is answered as OpenAI answers one, HTTP 404 with code model_not_found.
        self.models = None if models is None else tuple(models)
        self.faults = faults or ChatFaults()
        self.api_key: str | None = (
            "sk-emulator-" + secrets.token_hex(8) if api_key is _AUTO else api_key
        )
        self.chunk_size = chunk_size
        self.received: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self._state = _FaultState(self.faults)

    # -- lifecycle (start, stop, ``with``, ``async with``: see testing/_loopback.py) ----

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[ModelRequest]:
        return self.agent.requests

    def __repr__(self) -> str:
        return f"ChatEmulator(base_url={self.base_url!r})"

    def _on_exit(self, kind: type[BaseException] | None) -> None:
        if kind is None and self.errors:  # a failed script assertion fails the test
            raise self.errors[0]

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/v1/models", self._models)
        return app

    # -- handlers ----------------------------------------------------------------------

    def _authorized(self, request: web.Request, anthropic: bool) -> bool:
        if self.api_key is None:
            return True
        bearer = request.headers.get("Authorization") == f"Bearer {self.api_key}"
        if anthropic:  # SDK versions differ: x-api-key, or a bearer token
            return bearer or request.headers.get("x-api-key") == self.api_key
        return bearer

    async def _models(self, request: web.Request) -> web.StreamResponse:
        ids = self.models if self.models is not None else ("emulator",)
        return web.json_response({"object": "list", "data": [{"id": i} for i in ids]})

    async def _body(self, request: web.Request) -> dict[str, Any] | None:
        try:
            body = await request.json()
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def _play(self, model_req: ModelRequest) -> Reply | Fail | Grade | web.StreamResponse:
        try:
            return self.agent.next_step(model_req)
        except Exception as exc:  # a script assertion or an exhausted script
            self.errors.append(exc)
            return _error(400, f"{type(exc).__name__}: {exc}", "script_error")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request, anthropic=False):
            return _error(401, "Incorrect API key provided", "invalid_api_key")
        body = await self._body(request)
        if body is None:
            return _error(400, "the request body is not a JSON object", "invalid_request_error")
        self.received.append(body)
        if self.models is not None and body.get("model") not in self.models:
            text = (
                f"The model `{body.get('model')}` does not exist or you do not have access to it."
            )
            error = {"message": text, "type": "invalid_request_error", "param": None}
            return web.json_response({"error": {**error, "code": "model_not_found"}}, status=404)
        if self._state.take("redirect"):
            return web.Response(status=307, headers={"Location": self.faults.redirect_to})
        if self.faults.reject_null_content and _null_content(body):
            return _error(500, _NULL_CONTENT_ERROR, "internal_server_error")
        status, fault, delay = self._state.next()
        if delay:
            await asyncio.sleep(delay)
        if status is not None:
            retry_after = self.faults.retry_after
            headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
            return _error(status, f"injected HTTP {status}", "injected_fault", headers)
        step = self._play(model_request(body))
        if isinstance(step, web.StreamResponse):
            return step
        if isinstance(step, Fail):
            return _error(500, step.message, step.kind)
        if isinstance(step, Grade):
            return _error(400, "a chat model cannot grade outcomes", "script_error")
        model = body.get("model")
        message, finish, usage = render_completion(step, self.agent, model)
        if (
            self.faults.no_auto_tool_stream
            and body.get("stream")
            and body.get("tools")
            and body.get("tool_choice") == "auto"
            and message.get("tool_calls")
        ):
            return await self._empty_stream(request)
        if body.get("stream") and not self.faults.ignore_stream:
            options = body.get("stream_options") or {}
            frames = sse_chunks(
                message,
                finish,
                usage,
                model,
                chunk_size=self.chunk_size,
                include_usage=bool(options.get("include_usage")),
                name_style=self.faults.stream_names,
            )
            return await self._stream(request, frames, fault)
        if fault == "malformed":
            return web.Response(body=b'{"object":"chat.completion","choices":[]}')
        completion = completion_body(message, finish, usage, model)
        if self.faults.omit_finish_reason:
            del completion["choices"][0]["finish_reason"]
        data = json.dumps(completion).encode()
        if fault == "drop":
            return await self._drop(request, data)
        return web.Response(body=data, content_type="application/json")

    async def _stream(
        self, request: web.Request, frames: list[bytes], fault: str | None
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if fault == "malformed":
            frames = [frames[0], b"data: {this is not json\n\n", *frames[-1:]]
        elif self._state.take("stream_error"):
            kind = self.faults.stream_error_type
            error = {"error": {"message": f"injected {kind}", "type": kind, "code": None}}
            frames = [frames[0], b"data: " + json.dumps(error).encode() + b"\n\n", frames[-1]]
        for index, frame in enumerate(frames):
            if fault == "drop" and index == self.faults.drop_after:
                _cut(request)
                return resp
            if self.faults.chunk_delay and index:
                await asyncio.sleep(self.faults.chunk_delay)
            await resp.write(frame)
        await resp.write_eof()
        return resp

    async def _empty_stream(self, request: web.Request) -> web.StreamResponse:
        """What llama-cpp-python's server sends when its stream fails before the first
        chunk: its response headers (uvicorn adds date/server), the last chunk, and then
        uvicorn closes the keep-alive connection (an exception in the app)."""
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-store",
                "Connection": "keep-alive",
                "X-Accel-Buffering": "no",
            }
        )
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write_eof()
        _cut(request)
        return resp

    async def _drop(self, request: web.Request, data: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = len(data)
        await resp.prepare(request)
        await resp.write(data[: len(data) // 2])
        _cut(request)
        return resp

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request, anthropic=True):
            return web.json_response(
                {
                    "type": "error",
                    "error": {"type": "authentication_error", "message": "invalid x-api-key"},
                },
                status=401,
            )
        body = await self._body(request)
        if body is None:
            return _error(400, "the request body is not a JSON object", "invalid_request_error")
        self.received.append(body)
        status, _fault, delay = self._state.next()
        if delay:
            await asyncio.sleep(delay)
        if status is not None:
            retry_after = self.faults.retry_after
            headers = {"retry-after": str(retry_after)} if retry_after is not None else None
            return web.json_response(
                {"type": "error", "error": {"type": "api_error", "message": "injected"}},
                status=status,
                headers=headers,
            )
        step = self._play(messages_api_request(body))
        if isinstance(step, web.StreamResponse):
            return step
        if isinstance(step, Fail | Grade):
            message = step.message if isinstance(step, Fail) else "cannot grade"
            return web.json_response(
                {"type": "error", "error": {"type": "api_error", "message": message}},
                status=500 if isinstance(step, Fail) else 400,
            )
        return web.json_response(render_messages_response(step, self.agent, body.get("model")))


def _null_content(body: Mapping[str, Any]) -> bool:
    messages = body.get("messages")
    return isinstance(messages, list) and any(
        isinstance(m, Mapping) and m.get("role") == "assistant" and m.get("content") is None
        for m in messages
    )


# What llama-cpp-python's server says (HTTP 500) about a null assistant content: pydantic
# tries every message type of the union first, so the line naming the cause comes late.
_NULL_CONTENT_ERROR = (
    "5 validation errors for CreateChatCompletionRequest\n"
    + "".join(
        f"messages.2.{kind}.role\n  Input should be '{role}' [type=literal_error, "
        f"input_value='assistant', input_type=str]\n"
        "    For further information visit https://errors.pydantic.dev/2.9/v/literal_error\n"
        for kind, role in (
            ("ChatCompletionRequestSystemMessage", "system"),
            ("ChatCompletionRequestUserMessage", "user"),
            ("ChatCompletionRequestToolMessage", "tool"),
            ("ChatCompletionRequestFunctionMessage", "function"),
        )
    )
    + (
        "messages.2.ChatCompletionRequestAssistantMessage.content\n"
        "  Input should be a valid string [type=string_type, input_value=None, "
        "input_type=NoneType]\n"
        "    For further information visit https://errors.pydantic.dev/2.9/v/string_type"
    )
)


def _cut(request: web.Request) -> None:
    """Close the socket under a half-sent answer (the client sees a dropped connection)."""
    transport = request.transport
    if transport is not None:
        transport.close()
