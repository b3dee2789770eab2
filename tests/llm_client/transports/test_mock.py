"""MockTransport: a function plays the server, with no sockets."""

from __future__ import annotations

import asyncio

import pytest

from llm_client import HTTPRequest, HTTPResponse, MockTransport, TransportError


def request(body: bytes = b"{}") -> HTTPRequest:
    return HTTPRequest("POST", "https://example.invalid/v1/chat/completions", {}, body)


class TestMockTransport:
    async def test_sync_and_async_handlers(self) -> None:
        """A plain or a coroutine handler answers; header names come back lowercased and
        every request is kept for the test to read."""

        def sync(req: HTTPRequest) -> HTTPResponse:
            return HTTPResponse(200, {"X-Seen": str(len(req.body))}, b"sync")

        async def coro(req: HTTPRequest) -> HTTPResponse:
            await asyncio.sleep(0)
            return HTTPResponse(201, {"X-Seen": str(len(req.body))}, b"async")

        for handler, status, body in ((sync, 200, b"sync"), (coro, 201, b"async")):
            transport = MockTransport(handler)
            await transport.open()
            response = await transport.send(request(b"abc"), timeout=5)
            await transport.aclose()
            assert (response.status, response.body) == (status, body)
            assert response.headers == {"x-seen": "3"}
            assert [r.body for r in transport.requests] == [b"abc"] and transport.closed

    async def test_handler_plays_a_network_failure(self) -> None:
        """A TransportError raised by the handler reaches the caller as it is."""

        def drop(req: HTTPRequest) -> HTTPResponse:
            raise TransportError("disconnected", "played drop", response_started=False)

        transport = MockTransport(drop)
        with pytest.raises(TransportError, match="played drop") as info:
            await transport.send(request(), timeout=5)
        assert info.value.kind == "disconnected"

    async def test_timeout_before_the_response(self) -> None:
        """A handler slower than the timeout is a timeout before the response started
        (tolerance: a 0.05 s timeout against a handler that never answers)."""
        never = asyncio.Event()

        async def stall(req: HTTPRequest) -> HTTPResponse:
            await never.wait()
            raise AssertionError("unreachable")

        with pytest.raises(TransportError) as info:
            await MockTransport(stall).send(request(), timeout=0.05)
        assert (info.value.kind, info.value.response_started) == ("timeout", False)
