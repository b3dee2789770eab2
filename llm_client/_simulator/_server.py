"""The simulator's HTTP/1.1 server, small, on an ``asyncio.Protocol``.

Why not aiohttp's web server: the simulator stands in for a provider in benchmarks, and
its CPU per request must stay well under the client's, or the benchmark measures the
simulator. This server does only what the simulator needs: keep-alive, pipelined requests
answered in order, ``Content-Length`` or ``chunked`` request bodies, ``Expect:
100-continue``, ``Connection: close``, 400/413/431 for bad requests, replies written in
one ``write`` with ``Content-Length``. Handlers are plain functions called with the
connection and the request; they answer now or later (:meth:`HttpConnection.call_later`)
with :meth:`HttpConnection.send`, or drop the connection with :meth:`HttpConnection.abort`.
No coroutine or task per request: a timer per delayed reply is all the loop carries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, cast

__all__ = ["JSON", "TEXT", "HttpConnection", "HttpRequest", "HttpServer"]

_log = logging.getLogger(__name__)

#: Header lines for the usual content types, prebuilt.
JSON = b"Content-Type: application/json\r\n"
TEXT = b"Content-Type: text/plain; charset=utf-8\r\n"

_MAX_HEAD = 64 * 1024  # bytes of request line and headers
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_STATUS_LINES = {code: f"HTTP/1.1 {code} {text}\r\n".encode() for code, text in _REASONS.items()}
_KEEP_END = b"\r\n"
_CLOSE_END = b"Connection: close\r\n\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_HEX = frozenset("0123456789abcdefABCDEF")


class HttpRequest:
    """One parsed request; ``body`` is None when it was larger than the server allows."""

    __slots__ = ("body", "headers", "method", "path", "query")

    def __init__(
        self, method: str, path: str, query: str, headers: dict[str, str], body: bytes | None
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers  # names in lower case
        self.body = body


Handler = Callable[["HttpConnection", HttpRequest], None]


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class HttpConnection(asyncio.Protocol):
    """One client connection; at most one request is handled at a time (in order)."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._busy = False  # a request was handed to the handler and not answered yet
        self._parsing = False
        self._keep = True  # keep the connection after the current reply
        self._discard = False  # input after a refused body is ignored until we close
        self._closed = False
        self._head: tuple[str, str, str, dict[str, str], int, int] | None = None
        self._continued = False
        self._timer: asyncio.TimerHandle | None = None
        #: Called once when the current request ends: answered, dropped or disconnected.
        self.on_done: Callable[[], None] | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; same methods.
        self._transport = cast(asyncio.Transport, transport)
        self._server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._closed or self._discard:
            return
        self._buf += data
        if not self._busy and not self._parsing:
            self._parse()

    def eof_received(self) -> bool:
        # As aiohttp's server does: the client's EOF closes the connection, and a request in
        # progress ends unanswered (a client that gave up is not served).
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._server.connections.discard(self)
        self._end_request()

    # -- for handlers --------------------------------------------------------------------

    @property
    def transport(self) -> asyncio.Transport | None:
        return self._transport

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback(*args)`` after ``delay`` seconds unless the connection goes first."""
        self._timer = self._server.loop.call_later(delay, self._fire, callback, args)

    def send(self, status: int, body: bytes, headers: bytes = JSON) -> None:
        """Answer the current request; ``headers`` are whole ``Name: value\\r\\n`` lines."""
        transport = self._transport
        if self._closed or transport is None:
            self._end_request()
            return
        keep = self._keep and not self._server.closing
        status_line = _STATUS_LINES.get(status) or f"HTTP/1.1 {status} Status\r\n".encode()
        transport.write(
            b"%b%bContent-Length: %d\r\n%b%b"
            % (status_line, headers, len(body), _KEEP_END if keep else _CLOSE_END, body)
        )
        self._end_request()
        if not keep:
            self._close()
        elif self._buf and not self._parsing:
            self._parse()

    def abort(self) -> None:
        """Drop the connection without an answer (a reset, as a crashed server does)."""
        self._closed = True
        if self._transport is not None:
            self._transport.abort()
        self._end_request()

    # -- inside --------------------------------------------------------------------------

    def _fire(self, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        self._timer = None
        if not self._closed:
            self._server.run(self, callback, *args)

    def _end_request(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        done, self.on_done = self.on_done, None
        if self._busy:
            self._busy = False
            self._server.request_ended()
        if done is not None:
            done()

    def _close(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.close()  # after what was written

    def _parse(self) -> None:
        self._parsing = True
        try:
            while not self._busy and not self._closed and not self._discard and self._buf:
                try:
                    request = self._next_request()
                except _BadRequest as exc:
                    self._refuse(exc.status, str(exc))
                    return
                if request is None:
                    return
                self._busy = True
                self._server.request_started()
                self._server.run(self, self._server.handler, self, request)
        finally:
            self._parsing = False

    def _refuse(self, status: int, message: str) -> None:
        self._keep = False
        self._discard = True
        self._busy = True
        self._server.request_started()
        self.send(status, f"{status}: {message}".encode(), TEXT)

    def _next_request(self) -> HttpRequest | None:
        """The next whole request in the buffer, or None until more bytes arrive."""
        if self._head is None:
            self._head = self._take_head()
            if self._head is None:
                return None
            self._continued = False
        method, target, version, headers, start, length = self._head
        framed = self._take_body(start, length, headers)
        if framed is None:
            return None
        body, used = framed
        del self._buf[:used]
        self._head = None
        connection = headers.get("connection", "").lower()
        if version == "HTTP/1.1":
            self._keep = self._keep and "close" not in connection
        else:
            self._keep = self._keep and "keep-alive" in connection
        path, _, query = target.partition("?")
        return HttpRequest(method, path, query, headers, body)

    def _take_head(self) -> tuple[str, str, str, dict[str, str], int, int] | None:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _MAX_HEAD:
                raise _BadRequest(431, "request line and headers too large")
            if buf[:2] == b"\r\n":  # tolerated empty lines between requests
                del buf[:2]
            return None
        if end > _MAX_HEAD:
            raise _BadRequest(431, "request line and headers too large")
        return self._read_head(bytes(buf[:end]).decode("latin-1"), end + 4)

    def _take_body(
        self, start: int, length: int, headers: dict[str, str]
    ) -> tuple[bytes | None, int] | None:
        """The body (None: too large, refused) and the bytes the request used; None: wait."""
        buf = self._buf
        if length >= 0:
            if length > self._server.max_body_bytes:
                self._keep, self._discard = False, True
                return None, len(buf)
            if len(buf) - start < length:
                self._maybe_continue(headers)
                return None
            return bytes(buf[start : start + length]), start + length
        chunked = self._dechunk(start)
        if chunked is None:
            self._maybe_continue(headers)
            return None
        if chunked[0] is None:
            self._keep, self._discard = False, True
            return None, len(buf)
        return chunked

    def _read_head(self, head: str, start: int) -> tuple[str, str, str, dict[str, str], int, int]:
        lines = head.split("\r\n")
        while lines and not lines[0]:
            del lines[0]
        parts = lines[0].split(" ") if lines else []
        if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[0].isalpha():
            raise _BadRequest(400, "malformed request line")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip() or " " in name:
                raise _BadRequest(400, f"malformed header line {line[:60]!r}")
            name = name.lower()
            value = value.strip()
            if name in headers and name in ("content-length", "transfer-encoding", "host"):
                raise _BadRequest(400, f"repeated {name} header")
            headers[name] = value
        coding = headers.get("transfer-encoding")
        if coding is not None:
            if coding.lower() != "chunked" or "content-length" in headers:
                raise _BadRequest(400, f"unsupported transfer-encoding {coding!r}")
            return parts[0], parts[1], parts[2], headers, start, -1
        raw = headers.get("content-length", "0")
        if not raw.isdigit() or not raw.isascii():
            raise _BadRequest(400, f"invalid content-length {raw[:30]!r}")
        return parts[0], parts[1], parts[2], headers, start, int(raw)

    def _maybe_continue(self, headers: dict[str, str]) -> None:
        if not self._continued and headers.get("expect", "").lower() == "100-continue":
            self._continued = True
            if self._transport is not None:
                self._transport.write(_CONTINUE)

    def _dechunk(self, pos: int) -> tuple[bytes | None, int] | None:
        """The body from ``pos`` and where it ends; None: not all here; (None, _): too large."""
        buf = self._buf
        limit = self._server.max_body_bytes
        parts: list[bytes] = []
        total = 0
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if len(buf) - pos > 1024:
                    raise _BadRequest(400, "chunk size line too long")
                return None
            size_text = bytes(buf[pos:eol]).split(b";", 1)[0].strip().decode("latin-1")
            if not size_text or not set(size_text) <= _HEX or len(size_text) > 16:
                raise _BadRequest(400, f"invalid chunk size {size_text[:20]!r}")
            size = int(size_text, 16)
            pos = eol + 2
            if size == 0:
                # Trailer lines (ignored) up to an empty line.
                while True:
                    eol = buf.find(b"\r\n", pos)
                    if eol < 0:
                        return None
                    if eol == pos:
                        return b"".join(parts), eol + 2
                    pos = eol + 2
            total += size
            if total > limit:
                return None, len(buf)
            if len(buf) < pos + size + 2:
                return None
            if buf[pos + size : pos + size + 2] != b"\r\n":
                raise _BadRequest(400, "chunk not followed by CRLF")
            parts.append(bytes(buf[pos : pos + size]))
            pos += size + 2


class HttpServer:
    """Listens on ``host:port`` and hands each request to ``handler(connection, request)``."""

    def __init__(self, handler: Handler, *, max_body_bytes: int) -> None:
        self.handler = handler
        self.max_body_bytes = max_body_bytes
        self.connections: set[HttpConnection] = set()
        self.closing = False
        self.loop = asyncio.get_running_loop()
        self._server: asyncio.AbstractServer | None = None
        self._busy = 0
        self._idle: asyncio.Event | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen; the port bound (``port`` 0 picks a free one)."""
        self._server = await self.loop.create_server(
            lambda: HttpConnection(self), host, port, backlog=1024
        )
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1])

    def run(self, conn: HttpConnection, callback: Callable[..., None], *args: Any) -> None:
        """Call a handler step; a failure answers 500 rather than leaving the client hanging."""
        try:
            callback(*args)
        except Exception:
            _log.exception("simulator handler failed")
            if conn._busy and not conn._closed:
                conn._keep = False
                conn.send(500, b"500: Internal Server Error", TEXT)

    def request_started(self) -> None:
        self._busy += 1

    def request_ended(self) -> None:
        self._busy -= 1
        if self._busy == 0 and self._idle is not None:
            self._idle.set()

    async def close(self, grace: float = 0.5) -> None:
        """Stop listening, let requests in progress finish for ``grace`` seconds, then drop."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            if not conn._busy:
                conn._close()
        if self._busy:
            self._idle = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace)
        for conn in list(self.connections):
            conn.abort()
        self.connections.clear()
        if self._server is not None:
            await self._server.wait_closed()
