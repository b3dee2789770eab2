"""A transport without sockets for unit tests: a function plays the server (httpx's idea)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from ._base import HTTPRequest, HTTPResponse, TransportError

__all__ = ["Handler", "MockTransport"]

Handler = Callable[[HTTPRequest], "HTTPResponse | Awaitable[HTTPResponse]"]


class MockTransport:
    """Answers every request with ``handler(request)`` (sync or async), no sockets.

    The handler may raise :class:`TransportError` to play a network failure; ``timeout``
    is enforced around it as a timeout before the response started.
    """

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.requests: list[HTTPRequest] = []
        self.closed = False

    async def open(self) -> None:
        self.closed = False

    async def send(self, request: HTTPRequest, *, timeout: float) -> HTTPResponse:
        self.requests.append(request)
        try:
            async with asyncio.timeout(timeout):
                result = self._handler(request)
                if inspect.isawaitable(result):
                    result = await result
        except TimeoutError:
            raise TransportError(
                "timeout", f"no response within {timeout:g} s", response_started=False
            ) from None
        assert isinstance(result, HTTPResponse)
        headers = {k.lower(): v for k, v in result.headers.items()}
        return HTTPResponse(result.status, headers, result.body)

    async def aclose(self) -> None:
        self.closed = True
