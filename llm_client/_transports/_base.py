"""What a transport is: the interface the client calls, and the request and response it passes.

A transport sends one request and returns the whole response, or raises
:class:`TransportError` (defined with the package's other exceptions) saying what went
wrong in terms the retry logic needs: could not connect, timed out (before or after the
response started), or the connection dropped.
Whole bodies, not streams: a chat completion is one small JSON reply, and a whole body
keeps the interface to three methods that a test double can implement in ten lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from .._exceptions import TransportError as TransportError

__all__ = ["HTTPRequest", "HTTPResponse", "Transport", "TransportError"]


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


class Transport(Protocol):
    """What :class:`~llm_client.ModelClient` needs of a transport.

    ``open`` is awaited once, inside the running loop, before any ``send``: pools and
    sessions are made there, never at construction, so nothing binds to a loop early.
    ``send`` is called concurrently (up to the client's ``max_concurrency``) and returns
    the whole response within ``timeout`` seconds or raises :class:`TransportError`; a
    cancelled ``send`` must not leave a half-read connection to be reused. ``aclose``
    closes every connection; the client awaits it once, shielded.
    """

    async def open(self) -> None: ...

    async def send(self, request: HTTPRequest, *, timeout: float) -> HTTPResponse: ...

    async def aclose(self) -> None: ...
