"""One HTTP/1.1 client connection: an ``asyncio.Protocol`` that parses one response at a time.

The parser is fed from ``data_received`` and keeps its place between calls (a head split
over reads, a body still arriving, a chunk size line cut in two), so that no coroutine
and no stream reader sits between the socket and the caller: the caller awaits one
future, settled by the parser when the response is whole. The chunked parser is one
small method per state (size line, data, trailers), called from a loop.

The pool that owns connections and the request side live in ``_http11.py``.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Literal, cast

from ._base import HTTPResponse, TransportError

__all__ = ["MAX_BODY_BYTES", "MAX_HEAD_BYTES", "Connection", "Key", "Pending"]

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 256 * 1024 * 1024
_MAX_SIZE_LINE = 1024
_HEX_DIGITS = b"0123456789abcdefABCDEF"

#: (scheme, host, port): the connections that can serve a request.
Key = tuple[str, str, int]


class Pending:
    """One request on a connection: the future its caller awaits, and its deadline timer."""

    __slots__ = ("future", "timer")

    def __init__(self, future: asyncio.Future[HTTPResponse]) -> None:
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


class _Malformed(Exception):
    """The response breaks HTTP/1.1 framing; the connection cannot be trusted any more."""


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; parses one response at a time from ``data_received``."""

    def __init__(self, key: Key) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = True
        self.idle_since = 0.0
        self.pending: Pending | None = None
        self._buf = bytearray()
        self._reset()

    def _reset(self) -> None:
        self._status = 0
        self._headers: dict[str, str] = {}
        self._started = False  # a status line other than 1xx has been parsed
        self._framing: Literal["length", "chunked", "close"] = "length"
        self._remaining = 0  # body bytes still expected ("length")
        self._body = bytearray()
        self._chunk_left = -1  # bytes left in the current chunk; -1: a size line is next
        self._trailers = False
        self._scan = 0  # where to resume the search for the end of the head

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.pending is None:
            # Bytes nobody asked for: the connection's framing cannot be trusted.
            self.reusable = False
            self.abort()
            return
        self._buf += data
        try:
            self._parse()
        except _Malformed as exc:
            self._fail(TransportError("other", str(exc), response_started=self._started))
            self.abort()

    def eof_received(self) -> bool:
        self.reusable = False
        return False  # let the transport close; connection_lost settles the request

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self.pending is None:
            return
        if self._started and self._framing == "close":
            self._finish(bytes(self._body))
            return
        if self._started:
            detail = "connection dropped while reading the response body"
        else:
            detail = "connection dropped before the response started"
        if exc is not None:
            detail += f" ({type(exc).__name__})"
        self._fail(TransportError("disconnected", detail, response_started=self._started))

    # -- requests ------------------------------------------------------------------------

    def abort(self) -> None:
        self.reusable = False
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True

    def start(self, data: bytes, pending: Pending) -> None:
        self._reset()
        self._buf.clear()
        self.pending = pending
        assert self.transport is not None
        self.transport.write(data)

    def _fail(self, exc: TransportError) -> None:
        pending, self.pending = self.pending, None
        if pending is not None and not pending.future.done():
            pending.future.set_exception(exc)

    def _finish(self, body: bytes) -> None:
        pending, self.pending = self.pending, None
        if self._buf:
            self.reusable = False  # bytes beyond the response: unframed, do not reuse
        encoding = self._headers.get("content-encoding", "").strip().lower()
        if encoding and encoding != "identity":
            try:
                body = _decompress(body, encoding)
            except (zlib.error, ValueError) as exc:
                self.reusable = False
                if pending is not None and not pending.future.done():
                    error = TransportError("other", str(exc), response_started=True)
                    pending.future.set_exception(error)
                return
        if pending is not None and not pending.future.done():
            pending.future.set_result(HTTPResponse(self._status, self._headers, body))

    def timed_out(self, timeout: float) -> None:
        """The request's deadline passed: fail it and drop the connection."""
        if self.pending is None:
            return  # answered in this very tick; the caller has not resumed yet
        started = self._started
        where = "reading the response body" if started else "waiting for a response"
        self._fail(
            TransportError(
                "timeout", f"timed out after {timeout:g} s {where}", response_started=started
            )
        )
        self.abort()

    # -- parsing -------------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buf
        while not self._started:
            end = buf.find(b"\r\n\r\n", self._scan)
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    raise _Malformed(f"response head longer than {MAX_HEAD_BYTES} bytes")
                self._scan = max(0, len(buf) - 3)
                return
            head = bytes(buf[:end])
            del buf[: end + 4]
            self._scan = 0
            self._head(head)
        if self._framing == "length":
            remaining = self._remaining
            if not self._body and len(buf) >= remaining:
                # The usual case: the whole body arrived with (or right after) the head.
                body = bytes(buf[:remaining])
                del buf[:remaining]
                self._remaining = 0
                self._finish(body)
                return
            take = min(remaining, len(buf))
            if take:
                self._body += buf[:take]
                del buf[:take]
                self._remaining -= take
            if self._remaining == 0:
                self._finish(bytes(self._body))
        elif self._framing == "chunked":
            if self._chunks():
                self._finish(bytes(self._body))
        else:  # read until the server closes
            self._body += buf
            buf.clear()
            if len(self._body) > MAX_BODY_BYTES:
                raise _Malformed(f"response body longer than {MAX_BODY_BYTES} bytes")

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")  # latin-1 decodes any byte
        version, status = _status_line(lines[0])
        headers = _header_lines(lines[1:])
        if status < 200:
            return  # an interim response (100 Continue, 103 Early Hints): the real one follows
        self._status = status
        self._headers = headers
        self._started = True
        self._frame(version, status, headers)

    def _frame(self, version: str, status: int, headers: dict[str, str]) -> None:
        """How the body is delimited, and whether the connection outlives this response."""
        connection = headers.get("connection", "").lower()
        if "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection):
            self.reusable = False
        if status in (204, 304):
            self._framing, self._remaining = "length", 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing = "chunked"
        elif "content-length" in headers:
            raw = headers["content-length"]
            if not raw.isdigit() or not raw.isascii():
                raise _Malformed(f"invalid Content-Length {raw[:40]!r}")
            self._remaining = int(raw)
            if self._remaining > MAX_BODY_BYTES:
                raise _Malformed(f"response body longer than {MAX_BODY_BYTES} bytes")
            self._framing = "length"
        else:
            self._framing = "close"
            self.reusable = False

    # Chunked bodies: each state below consumes what it can from the buffer and returns
    # None (more bytes needed), False (go on with the next state) or True (body complete).

    def _chunks(self) -> bool:
        """Consume chunked framing from the buffer; True once the last chunk has arrived."""
        buf = self._buf
        while True:
            if self._trailers:
                step = self._chunk_trailer(buf)
            elif self._chunk_left < 0:
                step = self._chunk_size(buf)
            else:
                step = self._chunk_data(buf)
            if step is not False:
                return step is True

    def _chunk_size(self, buf: bytearray) -> bool | None:
        end = buf.find(b"\r\n")
        if end < 0:
            if len(buf) > _MAX_SIZE_LINE:
                raise _Malformed("chunk size line too long")
            return None
        line = bytes(buf[:end]).split(b";", 1)[0].strip()
        del buf[: end + 2]
        size = _hex_size(line)
        if size == 0:
            self._trailers = True
        elif len(self._body) + size > MAX_BODY_BYTES:
            raise _Malformed(f"response body longer than {MAX_BODY_BYTES} bytes")
        else:
            self._chunk_left = size
        return False

    def _chunk_data(self, buf: bytearray) -> bool | None:
        if self._chunk_left > 0:
            take = min(self._chunk_left, len(buf))
            self._body += buf[:take]
            del buf[:take]
            self._chunk_left -= take
            if self._chunk_left:
                return None
        if len(buf) < 2:
            return None
        if buf[:2] != b"\r\n":
            raise _Malformed("chunk not followed by CRLF")
        del buf[:2]
        self._chunk_left = -1
        return False

    def _chunk_trailer(self, buf: bytearray) -> bool | None:
        end = buf.find(b"\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                raise _Malformed("chunked trailers too long")
            return None
        del buf[: end + 2]
        return end == 0  # the empty line after the trailers ends the body


def _status_line(line: str) -> tuple[str, int]:
    """The version and status of ``HTTP/1.1 200 OK``."""
    parts = line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3:
        raise _Malformed(f"not an HTTP/1.x status line: {line[:80]!r}")
    code = parts[1]
    if not code.isdigit() or not code.isascii() or int(code) < 100:
        raise _Malformed(f"not an HTTP status code: {code!r}")
    return parts[0], int(code)


def _header_lines(lines: list[str]) -> dict[str, str]:
    """Header lines as a dict with lowercase names; repeated headers joined with ", "."""
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _Malformed(f"malformed response header line: {line[:80]!r}")
        name = name.lower()
        value = value.strip()
        if name in headers and name != "set-cookie":
            headers[name] = headers[name] + ", " + value
        else:
            headers[name] = value
    return headers


def _hex_size(line: bytes) -> int:
    """A chunk size: bare hexadecimal digits (``int(..., 16)`` alone takes "0x", "+", "_")."""
    if not line or line.strip(_HEX_DIGITS):
        raise _Malformed(f"invalid chunk size {line[:20]!r}")
    return int(line, 16)


def _decompress(body: bytes, encoding: str) -> bytes:
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        try:
            return zlib.decompress(body)
        except zlib.error:  # raw deflate without the zlib header, as some servers send
            return zlib.decompress(body, -zlib.MAX_WBITS)
    raise ValueError(f"unsupported Content-Encoding {encoding!r}")
