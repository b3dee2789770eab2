"""Real HTTP servers nobody here wrote (aiohttp.web, uvicorn), and both real transports.

Each server serves the same routes, written with its own means (aiohttp's compression and
streaming responses; raw ASGI messages for uvicorn, whose h11 layer picks the framing):

* ``/echo``: 200, ``Content-Length``, a JSON body with the length and sha256 of the
  request body it received;
* ``/chunked``, ``/gzip``, ``/gzip-chunked``, ``/deflate``, ``/large``: ``PAYLOAD`` (or
  ``LARGE``) chunked, compressed, or both;
* ``/close``: ``PAYLOAD`` with ``Connection: close``;
* ``/slow-head``: no status line until the test ends; ``/slow-body``: the head and part of
  the body, then nothing until the test ends.

Every request records the client's port, so a test can tell a reused connection from a
new one.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web
from aiohttp.hdrs import CONTENT_TYPE
from aiohttp.web_response import ContentCoding

from llm_client import AiohttpTransport, HTTPTransport, Transport

#: A reply the size of a long chat completion, with enough variety to compress unevenly.
PAYLOAD = json.dumps(
    {
        "id": "chatcmpl-1",
        "choices": [{"message": {"content": " ".join(f"word{i}" for i in range(400))}}],
    }
).encode()
LARGE = PAYLOAD * 1200  # about 4 MB: many reads, many chunks


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


class RealServer:
    """A running server: its URL, the client port of each request, and the release of
    the handlers that stall."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.port = 0
        self.client_ports: list[int] = []
        self.release = asyncio.Event()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def _echo(body: bytes) -> bytes:
    return json.dumps({"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}).encode()


# -- aiohttp.web ---------------------------------------------------------------------------


def _aiohttp_app(state: RealServer) -> web.Application:
    async def stream(
        request: web.Request, data: bytes, size: int, coding: ContentCoding | None = None
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={CONTENT_TYPE: "application/json"})
        response.enable_chunked_encoding()
        if coding is not None:
            response.enable_compression(force=coding)
        await response.prepare(request)
        for piece in pieces(data, size):
            await response.write(piece)
        await response.write_eof()
        return response

    def whole(data: bytes, coding: ContentCoding | None = None, **headers: str) -> web.Response:
        response = web.Response(body=data, content_type="application/json", headers=headers)
        if coding is not None:
            response.enable_compression(force=coding)
        return response

    async def slow_body(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={CONTENT_TYPE: "application/json"})
        response.content_length = len(PAYLOAD)
        await response.prepare(request)
        await response.write(PAYLOAD[:100])
        await state.release.wait()
        await response.write(PAYLOAD[100:])
        return response

    async def slow_head(request: web.Request) -> web.StreamResponse:
        await state.release.wait()
        return whole(PAYLOAD)

    async def close(request: web.Request) -> web.StreamResponse:
        response = whole(PAYLOAD)
        response.force_close()  # sends `Connection: close` and closes after the reply
        return response

    routes: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
        "/chunked": lambda request: stream(request, PAYLOAD, 700),
        "/large": lambda request: stream(request, LARGE, 64 * 1024),
        "/gzip-chunked": lambda request: stream(request, PAYLOAD, 700, ContentCoding.gzip),
        "/close": close,
        "/slow-head": slow_head,
        "/slow-body": slow_body,
    }
    wholes = {
        "/gzip": lambda: whole(PAYLOAD, ContentCoding.gzip),
        "/deflate": lambda: whole(PAYLOAD, ContentCoding.deflate),
    }

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        state.client_ports.append(peer[1] if peer else 0)
        path = request.path
        if path == "/echo":
            return whole(_echo(body))
        if path in wholes:
            return wholes[path]()
        if path in routes:
            return await routes[path](request)
        raise web.HTTPNotFound()

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


@asynccontextmanager
async def aiohttp_server(keepalive_s: float) -> AsyncIterator[RealServer]:
    state = RealServer("aiohttp.web")
    runner = web.AppRunner(_aiohttp_app(state), keepalive_timeout=keepalive_s, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.port = runner.addresses[0][1]
    try:
        yield state
    finally:
        state.release.set()
        await runner.cleanup()


# -- uvicorn -------------------------------------------------------------------------------

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


def _asgi_app(state: RealServer) -> Callable[[dict[str, Any], Receive, Send], Awaitable[None]]:
    async def start(send: Send, *headers: tuple[bytes, bytes]) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), *headers],
            }
        )

    async def whole(send: Send, data: bytes, *headers: tuple[bytes, bytes]) -> None:
        await start(send, (b"content-length", str(len(data)).encode()), *headers)
        await send({"type": "http.response.body", "body": data})

    async def stream(send: Send, data: bytes, size: int, *headers: tuple[bytes, bytes]) -> None:
        await start(send, *headers)  # no length: h11 frames the body chunked
        for piece in pieces(data, size):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        state.client_ports.append(scope["client"][1])
        path = scope["path"]
        gz = (b"content-encoding", b"gzip")
        if path == "/echo":
            await whole(send, _echo(body))
        elif path == "/chunked":
            await stream(send, PAYLOAD, 700)
        elif path == "/large":
            await stream(send, LARGE, 64 * 1024)
        elif path == "/gzip":
            await whole(send, gzip.compress(PAYLOAD), gz)
        elif path == "/gzip-chunked":
            await stream(send, gzip.compress(PAYLOAD), 700, gz)
        elif path == "/deflate":
            await whole(send, zlib.compress(PAYLOAD), (b"content-encoding", b"deflate"))
        elif path == "/close":
            await whole(send, PAYLOAD, (b"connection", b"close"))
        elif path == "/slow-head":
            await state.release.wait()
            await whole(send, PAYLOAD)
        elif path == "/slow-body":
            await start(send, (b"content-length", str(len(PAYLOAD)).encode()))
            await send({"type": "http.response.body", "body": PAYLOAD[:100], "more_body": True})
            await state.release.wait()
            await send({"type": "http.response.body", "body": PAYLOAD[100:]})
        else:
            await whole(send, b"not found")

    return app


@asynccontextmanager
async def uvicorn_server(keepalive_s: float) -> AsyncIterator[RealServer]:
    import uvicorn

    state = RealServer("uvicorn")
    config = uvicorn.Config(
        _asgi_app(state),
        host="127.0.0.1",
        port=0,
        http="h11",
        ws="none",
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_keep_alive=keepalive_s,  # type: ignore[arg-type]  # typed int, used as a float by a timer
    )
    server = uvicorn.Server(config)
    # startup()/shutdown() rather than serve(): serve() takes over SIGINT and SIGTERM.
    config.load()
    server.lifespan = config.lifespan_class(config)
    await server.startup()
    state.port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        state.release.set()
        server.force_exit = True  # do not wait out connections a test left open
        await server.shutdown()


SERVERS = {"aiohttp.web": aiohttp_server, "uvicorn": uvicorn_server}


@pytest.fixture(params=sorted(SERVERS))
def start_server(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``async with start_server(keepalive_s=...) as server``, for each real server."""
    make = SERVERS[request.param]

    def start(keepalive_s: float = 60.0) -> Any:
        return make(keepalive_s)

    return start


@pytest.fixture(params=["http11", "aiohttp"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    """Each real transport, open."""
    opened: Transport = (
        HTTPTransport(limit=8) if request.param == "http11" else AiohttpTransport(limit=8)
    )
    await opened.open()
    try:
        yield opened
    finally:
        await opened.aclose()
