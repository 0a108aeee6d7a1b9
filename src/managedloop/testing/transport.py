"""A transport that answers from a function: unit tests of the Local host with no socket.

httpx's ``MockTransport``, for :class:`managedloop.providers.local.AsyncTransport`:

>>> import json
>>> import managedloop as ml
>>> from managedloop.providers import Local
>>> from managedloop.testing import MockResponse, MockTransport
>>> def answer(request):
...     assert request.url == "http://model.test/v1/chat/completions"
...     body = {"choices": [{"message": {"role": "assistant", "content": "hi"},
...                          "finish_reason": "stop"}]}
...     return MockResponse(200, json=body)
>>> transport = MockTransport(answer)
>>> provider = Local(model="m", base_url="http://model.test/v1", api_key="-",
...                  transport=transport)
>>> ml.run_sync(provider, agent=ml.AgentSpec(name="a"), prompt="hello").text
'hi'
>>> [json.loads(r.body)["messages"][-1]["content"] for r in transport.requests]
['hello']

The handler may be sync or async and may raise (a :class:`managedloop.TransportError`
is what a real transport raises for a failure worth retrying). A streamed answer is a
:class:`MockResponse` with ``chunks=[...]``: each chunk is handed out as it is, so a test
can split an event stream wherever it likes.
"""

from __future__ import annotations

import inspect
import json as _json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from managedloop.providers.local import AsyncTransport, HttpRequest, HttpResponse

__all__ = ["MockResponse", "MockTransport"]


class MockResponse:
    """An answer: ``status``, ``headers``, and a body given whole (``content`` or
    ``json``) or in ``chunks``."""

    __slots__ = ("_chunks", "headers", "released", "status")

    def __init__(
        self,
        status: int = 200,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes = b"",
        json: Any = None,
        chunks: Iterable[bytes] | None = None,
    ) -> None:
        self.status = status
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        if json is not None:
            content = _json.dumps(json).encode()
            self.headers.setdefault("content-type", "application/json")
        if chunks is not None:
            self.headers.setdefault("content-type", "text/event-stream")
        self._chunks = list(chunks) if chunks is not None else [content]
        self.released = False

    async def read(self) -> bytes:
        body, self._chunks = b"".join(self._chunks), []
        return body

    async def next_chunk(self) -> bytes:
        while self._chunks:
            piece = self._chunks.pop(0)
            if piece:
                return piece
        return b""

    def release(self) -> None:
        self.released = True


Handler = Callable[[HttpRequest], "HttpResponse | Awaitable[HttpResponse]"]


class MockTransport(AsyncTransport):
    """Answers each request with ``handler(request)``; keeps every request in
    :attr:`requests`."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[HttpRequest] = []
        self.closed = 0
        """How many times :meth:`aclose` was called."""

    def __repr__(self) -> str:
        return f"MockTransport({len(self.requests)} requests)"

    async def handle_request(self, request: HttpRequest) -> HttpResponse:
        self.requests.append(request)
        answer = self.handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer

    async def aclose(self) -> None:
        self.closed += 1
