"""HTTP transports: the aiohttp one, and a mock one for unit tests without sockets.

A transport sends one request and returns the whole response, or raises
:class:`TransportError` saying what went wrong in terms the retry logic needs: could not
connect, timed out (before or after the response started), or the connection dropped.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Literal, Protocol

__all__ = [
    "AiohttpTransport",
    "HTTPRequest",
    "HTTPResponse",
    "MockTransport",
    "Transport",
    "TransportError",
]

TransportErrorKind = Literal["connect", "timeout", "disconnected", "other"]


class HTTPRequest:
    """One request. Its repr hides the headers, which carry the API key."""

    __slots__ = ("body", "headers", "method", "url")

    def __init__(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"HTTPRequest({self.method} {self.url}, {len(self.body)} bytes)"


class HTTPResponse:
    """A whole response. ``headers`` look-ups are case-insensitive for lowercase names."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def __repr__(self) -> str:
        return f"HTTPResponse({self.status}, {len(self.body)} bytes)"


class TransportError(Exception):
    """No usable response. ``response_started``: the status line had arrived."""

    def __init__(self, kind: TransportErrorKind, detail: str, *, response_started: bool) -> None:
        self.kind = kind
        self.detail = detail
        self.response_started = response_started
        super().__init__(f"{kind}: {detail}")


class Transport(Protocol):
    """What :class:`~llm_client.ModelClient` needs of a transport."""

    async def open(self) -> None: ...

    async def send(self, request: HTTPRequest, *, timeout: float) -> HTTPResponse: ...

    async def aclose(self) -> None: ...


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


class AiohttpTransport:
    """aiohttp with one connection pool per client, created in the running loop.

    ``limit`` caps open connections (the client's ``max_concurrency``): the governor caps
    requests in flight already, the pool limit makes a leaked connection visible rather
    than silently growing.
    """

    def __init__(self, *, limit: int = 64) -> None:
        self._limit = limit
        self._session: object | None = None

    async def open(self) -> None:
        import aiohttp

        connector = aiohttp.TCPConnector(limit=self._limit, limit_per_host=self._limit)
        # Timeouts are ours (asyncio.timeout in send), so that "before the response
        # started" can be told apart from "while reading the body".
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=True,  # honour HTTPS_PROXY / NO_PROXY, as providers' users expect
            raise_for_status=False,
        )

    async def send(self, request: HTTPRequest, *, timeout: float) -> HTTPResponse:
        import aiohttp

        session = self._session
        if not isinstance(session, aiohttp.ClientSession):
            raise RuntimeError("AiohttpTransport.send() before open()")
        started = False
        try:
            async with (
                asyncio.timeout(timeout),
                session.request(
                    request.method, request.url, data=request.body, headers=request.headers
                ) as resp,
            ):
                started = True
                body = await resp.read()
                return HTTPResponse(resp.status, resp.headers, body)
        except TimeoutError:
            where = "reading the response body" if started else "waiting for a response"
            raise TransportError(
                "timeout", f"timed out after {timeout:g} s {where}", response_started=started
            ) from None
        except aiohttp.ClientConnectorError as exc:
            # str(exc) names host and port and the OS error; never headers.
            raise TransportError("connect", str(exc), response_started=False) from None
        except (
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            aiohttp.ClientPayloadError,
            ConnectionError,
        ) as exc:
            raise TransportError(
                "disconnected",
                f"connection dropped ({type(exc).__name__})",
                response_started=started,
            ) from None
        except aiohttp.ClientError as exc:
            raise TransportError(
                "other", f"{type(exc).__name__}: {exc}", response_started=started
            ) from None

    async def aclose(self) -> None:
        import aiohttp

        session, self._session = self._session, None
        if isinstance(session, aiohttp.ClientSession):
            await session.close()
