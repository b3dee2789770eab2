"""HTTPTransport, the lean HTTP/1.1 default transport, against scripted servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from llm_client import HTTPRequest, HTTPTransport, TransportError
from tests._helpers import until

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class _Server:
    def __init__(self, port: int) -> None:
        self.port = port
        self.connections = 0
        self.heads: list[bytes] = []

    def url(self, path: str = "/v1/chat/completions") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@asynccontextmanager
async def serve(replies: Callable[[int], list[bytes]]) -> AsyncIterator[_Server]:
    """A server answering its n-th request with ``replies(n)`` (written in pieces, to
    exercise incremental parsing); an empty list closes the connection."""
    state = _Server(0)
    handlers: set[asyncio.Task[None]] = set()
    writers: set[asyncio.StreamWriter] = set()
    stop = asyncio.Event()
    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        writers.add(writer)
        state.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                state.heads.append(head)
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                pieces = replies(served)
                served += 1
                if not pieces:
                    return
                for piece in pieces:
                    if piece == b"<pause>":
                        await stop.wait()
                        return
                    if piece == b"<close>":
                        return
                    writer.write(piece)
                    await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        stop.set()
        for writer in writers:
            writer.transport.abort()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


def ok(body: bytes = b'{"ok": true}', *extra: bytes) -> list[bytes]:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(
        body
    )
    return [head, *extra, b"\r\n", body[:3], body[3:]]


def post(server: _Server, body: bytes = b"{}") -> HTTPRequest:
    return HTTPRequest("POST", server.url(), {"Content-Type": "application/json"}, body)


@asynccontextmanager
async def transport(limit: int = 8) -> AsyncIterator[HTTPTransport]:
    t = HTTPTransport(limit=limit)
    await t.open()
    try:
        yield t
    finally:
        await t.aclose()


class TestHTTPTransport:
    async def test_content_length_reply_and_keep_alive(self) -> None:
        """A Content-Length reply arrives whole, headers lowercased, and the connection is
        reused for the next request."""
        async with (
            serve(lambda n: ok(b'{"n": %d}' % n, b"X-Thing: 1\r\n")) as server,
            transport() as t,
        ):
            first = await t.send(post(server), timeout=5)
            second = await t.send(post(server), timeout=5)
        assert (first.status, first.body, first.headers["x-thing"]) == (200, b'{"n": 0}', "1")
        assert second.body == b'{"n": 1}'
        assert server.connections == 1
        head = server.heads[0]
        assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
        assert b"Host: 127.0.0.1:%d\r\n" % server.port in head
        assert b"Content-Length: 2\r\n" in head

    async def test_chunked_with_extensions_and_trailers(self) -> None:
        """A chunked reply (chunk extensions, trailers, split across writes) is reassembled
        and the connection stays usable."""
        pieces = [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"5;ext=1\r\nhel",
            b"lo\r\n6\r\n world\r",
            b"\n0\r\nX-Trailer: y\r\n",
            b"\r\n",
        ]
        async with serve(lambda n: pieces) as server, transport() as t:
            one = await t.send(post(server), timeout=5)
            two = await t.send(post(server), timeout=5)
        assert one.body == two.body == b"hello world"
        assert server.connections == 1

    async def test_gzip_body_is_decoded(self) -> None:
        """A gzip-encoded body comes back decoded."""
        packed = gzip.compress(b'{"text": "PASS"}')
        reply = ok(packed, b"Content-Encoding: gzip\r\n")
        async with serve(lambda n: reply) as server, transport() as t:
            response = await t.send(post(server), timeout=5)
        assert response.body == b'{"text": "PASS"}'

    async def test_connection_close_and_read_until_close(self) -> None:
        """``Connection: close`` and a reply without a length (read until the server closes)
        are both read whole, and the next request opens a new connection."""
        close = b"HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 4\r\n\r\nbusy"
        unframed = b"HTTP/1.1 200 OK\r\n\r\nuntil the end"
        replies = {0: [close, b"<close>"], 1: [unframed, b"<close>"]}
        async with serve(lambda n: replies.get(n, [])) as server, transport() as t:
            first = await t.send(post(server), timeout=5)
            second = await t.send(post(server), timeout=5)
        assert (first.status, first.body) == (503, b"busy")
        assert (second.status, second.body) == (200, b"until the end")
        assert server.connections == 2

    async def test_interim_response_is_skipped(self) -> None:
        """A 100 Continue before the real reply is skipped."""
        pieces = [b"HTTP/1.1 100 Continue\r\n\r\n", *ok(b"{}")]
        async with serve(lambda n: pieces) as server, transport() as t:
            response = await t.send(post(server), timeout=5)
        assert (response.status, response.body) == (200, b"{}")

    async def test_timeouts_say_whether_the_response_started(self) -> None:
        """A server that never answers times out with response_started False; one that
        stalls after the head, with response_started True (tolerance: 0.2 s timeouts)."""
        stall = [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", b"<pause>"]
        async with serve(lambda n: [b"<pause>"]) as silent, transport() as t:
            with pytest.raises(TransportError) as before:
                await t.send(post(silent), timeout=0.2)
        async with serve(lambda n: stall) as stalled, transport() as t:
            with pytest.raises(TransportError) as during:
                await t.send(post(stalled), timeout=0.2)
        assert (before.value.kind, before.value.response_started) == ("timeout", False)
        assert (during.value.kind, during.value.response_started) == ("timeout", True)
        assert "reading the response body" in during.value.detail

    @pytest.mark.parametrize(
        "reply",
        [
            b"garbage\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ],
    )
    async def test_malformed_replies_are_transport_errors(self, reply: bytes) -> None:
        """A malformed status line, length, header or chunk is a TransportError, not a hang
        or another exception."""
        async with serve(lambda n: [reply, b"<pause>"]) as server, transport() as t:
            with pytest.raises(TransportError) as info:
                await t.send(post(server), timeout=5)
        assert info.value.kind == "other"

    async def test_dropped_connection(self) -> None:
        """A server that closes without answering gives a 'disconnected' TransportError."""
        async with serve(lambda n: []) as server, transport() as t:
            with pytest.raises(TransportError) as info:
                await t.send(post(server), timeout=5)
        assert (info.value.kind, info.value.response_started) == ("disconnected", False)

    async def test_connect_refused(self) -> None:
        """Nothing listening gives a 'connect' TransportError naming host and port."""
        async with serve(lambda n: ok()) as server:
            port = server.port
        async with transport() as t:
            with pytest.raises(TransportError) as info:
                await t.send(HTTPRequest("POST", f"http://127.0.0.1:{port}/x", {}, b""), timeout=5)
        assert info.value.kind == "connect" and f"127.0.0.1:{port}" in info.value.detail

    async def test_pool_limit_and_cancellation_free_the_slot(self) -> None:
        """With limit 1, concurrent requests share one connection in turn; a request
        cancelled mid-flight frees its slot (its connection is dropped) for the next one."""
        slow = {0: [b"<pause>"]}
        async with serve(lambda n: slow.get(n, ok())) as server, transport(limit=1) as t:
            stuck = asyncio.create_task(t.send(post(server), timeout=30))
            waiting = asyncio.create_task(t.send(post(server), timeout=30))
            await until(lambda: server.connections >= 1)
            stuck.cancel()
            with pytest.raises(asyncio.CancelledError):
                await stuck
            response = await asyncio.wait_for(waiting, 5)
            replies = await asyncio.gather(*(t.send(post(server), timeout=5) for _ in range(5)))
        assert response.status == 200 and all(r.status == 200 for r in replies)
        assert server.connections == 2  # the cancelled one, then one for all six others

    async def test_header_injection_refused(self) -> None:
        """A header value with a line break is refused before anything is sent."""
        async with serve(lambda n: ok()) as server, transport() as t:
            bad = HTTPRequest("POST", server.url(), {"Authorization": "Bearer a\r\nX: y"}, b"")
            with pytest.raises(TransportError) as info:
                await t.send(bad, timeout=5)
        assert info.value.kind == "other" and server.connections == 0

    def test_limit_validated(self) -> None:
        """A limit below 1 is refused with the parameter's name."""
        with pytest.raises(ValueError, match="`limit`"):
            HTTPTransport(limit=0)
