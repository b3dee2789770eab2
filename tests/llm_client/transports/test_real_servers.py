"""Both real transports (HTTPTransport, AiohttpTransport) against real servers nobody here
wrote (aiohttp.web, uvicorn): framing, compression, connection reuse and its end, timeouts."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import psutil
import pytest

from llm_client import HTTPRequest, Transport, TransportError
from tests._helpers import until

from .conftest import LARGE, PAYLOAD

pytestmark = pytest.mark.timeout(60)


def post(url: str, body: bytes = b"{}", **headers: str) -> HTTPRequest:
    return HTTPRequest("POST", url, {"Content-Type": "application/json", **headers}, body)


def open_ports() -> set[int]:
    """Local ports of this process's TCP sockets (a socket closed by us is gone)."""
    return {c.laddr.port for c in psutil.Process(os.getpid()).net_connections(kind="tcp")}


class TestFraming:
    async def test_request_body_arrives_whole(
        self, start_server: Any, transport: Transport
    ) -> None:
        """A 1 MB request body reaches the server byte for byte (Content-Length framing)."""
        body = os.urandom(1024 * 1024)
        async with start_server() as server:
            response = await transport.send(post(server.url("/echo"), body), timeout=30)
        assert response.status == 200
        assert json.loads(response.body) == {
            "length": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
        }

    @pytest.mark.parametrize("path", ["/chunked", "/large"])
    async def test_chunked_body(self, start_server: Any, transport: Transport, path: str) -> None:
        """A chunked reply (a few chunks, or 4 MB in 64 KB chunks) is reassembled, and the
        connection is reused for the next request."""
        expected = LARGE if path == "/large" else PAYLOAD
        async with start_server() as server:
            first = await transport.send(post(server.url(path)), timeout=30)
            second = await transport.send(post(server.url(path)), timeout=30)
        assert "chunked" in first.headers.get("transfer-encoding", "")
        assert first.body == second.body == expected
        assert len(set(server.client_ports)) == 1

    @pytest.mark.parametrize(
        ("path", "coding"),
        [("/gzip", "gzip"), ("/gzip-chunked", "gzip"), ("/deflate", "deflate")],
    )
    async def test_compressed_body_is_decoded(
        self, start_server: Any, transport: Transport, path: str, coding: str
    ) -> None:
        """A gzip or deflate body, whole or chunked, comes back decoded."""
        async with start_server() as server:
            response = await transport.send(post(server.url(path)), timeout=30)
        assert response.headers.get("content-encoding") == coding
        assert response.body == PAYLOAD

    async def test_expect_100_continue(self, start_server: Any, transport: Transport) -> None:
        """A request sent with ``Expect: 100-continue`` gets its final reply (aiohttp.web
        answers 100 Continue first: the interim response is skipped)."""
        async with start_server() as server:
            request = post(server.url("/echo"), b"x" * 5000, Expect="100-continue")
            response = await transport.send(request, timeout=30)
        assert response.status == 200 and json.loads(response.body)["length"] == 5000


class TestConnections:
    async def test_keep_alive_reuses_one_connection(
        self, start_server: Any, transport: Transport
    ) -> None:
        """Requests one after another share one kept-alive connection."""
        async with start_server() as server:
            for _ in range(5):
                response = await transport.send(post(server.url("/echo")), timeout=30)
                assert response.status == 200
        assert len(server.client_ports) == 5 and len(set(server.client_ports)) == 1

    async def test_connection_close_is_honoured(
        self, start_server: Any, transport: Transport
    ) -> None:
        """A reply with ``Connection: close`` is read whole; the next request opens a new
        connection."""
        async with start_server() as server:
            first = await transport.send(post(server.url("/close")), timeout=30)
            second = await transport.send(post(server.url("/echo")), timeout=30)
        assert first.headers.get("connection", "").lower() == "close"
        assert first.body == PAYLOAD and second.status == 200
        assert len(set(server.client_ports)) == 2

    async def test_idle_connection_closed_by_the_server(
        self, start_server: Any, transport: Transport
    ) -> None:
        """A kept-alive connection the server closes while idle (its keep-alive timeout,
        0.2 s) is not reused: the next request reconnects without an error."""
        async with start_server(keepalive_s=0.2) as server:
            first = await transport.send(post(server.url("/echo")), timeout=30)
            port = server.client_ports[0]
            # The server closes after 0.2 s idle; we go on once our end is closed too.
            await until(lambda: port not in open_ports())
            second = await transport.send(post(server.url("/echo")), timeout=30)
        assert first.status == second.status == 200
        assert len(server.client_ports) == 2 and server.client_ports[1] != port


class TestTimeouts:
    async def test_slow_headers(self, start_server: Any, transport: Transport) -> None:
        """A server slow to send its status line times out with response_started False,
        and the transport serves the next request on a fresh connection (tolerance: a
        0.3 s timeout)."""
        async with start_server() as server:
            with pytest.raises(TransportError) as info:
                await transport.send(post(server.url("/slow-head")), timeout=0.3)
            after = await transport.send(post(server.url("/echo")), timeout=30)
        assert (info.value.kind, info.value.response_started) == ("timeout", False)
        assert "waiting for a response" in info.value.detail
        assert after.status == 200 and len(set(server.client_ports)) == 2

    async def test_slow_body(self, start_server: Any, transport: Transport) -> None:
        """A server that stalls mid-body times out with response_started True; the
        half-read connection is not reused (tolerance: a 0.3 s timeout)."""
        async with start_server() as server:
            with pytest.raises(TransportError) as info:
                await transport.send(post(server.url("/slow-body")), timeout=0.3)
            after = await transport.send(post(server.url("/echo")), timeout=30)
        assert (info.value.kind, info.value.response_started) == ("timeout", True)
        assert "reading the response body" in info.value.detail
        assert after.status == 200 and len(set(server.client_ports)) == 2
