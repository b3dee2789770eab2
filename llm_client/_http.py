"""A lean HTTP/1.1 client transport on asyncio protocols: the default of ModelClient.

Why not aiohttp on the hot path: a chat completion is one small POST and one small JSON
reply over a kept-alive connection, and aiohttp's general machinery (cookie jar, URL
objects, header multidicts, payload registry, tracing, middlewares, a timer context per
request) costs ~150 µs of CPU per request on the 2-core CI machine, where this transport
costs ~25 µs. With a judge run at hundreds of calls per second sharing the loop with the
engine, that difference is most of the client's CPU.

What it does: keep-alive connection pools per (scheme, host, port), at most ``limit``
connections in all (callers beyond wait FIFO); TLS for https with the system's default
trust store; ``Content-Length``, chunked and read-until-close bodies; gzip/deflate bodies;
1xx interim responses skipped. What it does not: proxies (like the aiohttp transport with
``trust_env=False``), redirects (an API endpoint that redirects a POST is misconfigured;
the 3xx comes back as a status), HTTP/2, request pipelining.

Every failure is a :class:`TransportError` saying whether the response had started, which
the client needs to tell a body timeout from a connect failure.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections import deque
from collections.abc import Mapping
from typing import Literal, cast
from urllib.parse import urlsplit

from ._transport import HTTPRequest, HTTPResponse, TransportError

__all__ = ["HTTPTransport"]

#: An idle pooled connection older than this is closed instead of reused: a server that
#: closes idle keep-alive connections (uvicorn, hence vLLM, after 5 s) could otherwise
#: close one just as a request is written to it.
KEEPALIVE_S = 4.0
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 256 * 1024 * 1024

_Key = tuple[str, str, int]


class _Pending:
    """One request on a connection: the future its caller awaits, and its deadline timer."""

    __slots__ = ("future", "timer")

    def __init__(self, future: asyncio.Future[HTTPResponse]) -> None:
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; parses one response at a time from ``data_received``."""

    def __init__(self, key: _Key) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = True
        self.idle_since = 0.0
        self.pending: _Pending | None = None
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

    def start(self, data: bytes, pending: _Pending) -> None:
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
        try:
            text = head.decode("latin-1")
        except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes any byte
            raise _Malformed("undecodable response head") from None
        lines = text.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3:
            raise _Malformed(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        if not parts[1].isdigit() or not parts[1].isascii():
            raise _Malformed(f"not an HTTP status code: {parts[1]!r}")
        status = int(parts[1])
        if status < 100:
            raise _Malformed(f"not an HTTP status code: {parts[1]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise _Malformed(f"malformed response header line: {line[:80]!r}")
            name = name.lower()
            value = value.strip()
            if name in headers and name != "set-cookie":
                headers[name] = headers[name] + ", " + value
            else:
                headers[name] = value
        if 100 <= status < 200:
            return  # an interim response (100 Continue, 103 Early Hints): the real one follows
        self._status = status
        self._headers = headers
        self._started = True
        connection = headers.get("connection", "").lower()
        if "close" in connection or (parts[0] == "HTTP/1.0" and "keep-alive" not in connection):
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

    def _chunks(self) -> bool:
        """Consume chunked framing from the buffer; True once the last chunk has arrived."""
        buf = self._buf
        while True:
            if self._trailers:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD_BYTES:
                        raise _Malformed("chunked trailers too long")
                    return False
                del buf[: end + 2]
                if end == 0:
                    return True  # the empty line after the trailers
                continue
            if self._chunk_left < 0:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > 1024:
                        raise _Malformed("chunk size line too long")
                    return False
                line = bytes(buf[:end]).split(b";", 1)[0].strip()
                del buf[: end + 2]
                try:
                    size = int(line, 16)
                except ValueError:
                    raise _Malformed(f"invalid chunk size {line[:20]!r}") from None
                if size < 0 or line.startswith((b"-", b"+", b"0x", b"0X")):
                    raise _Malformed(f"invalid chunk size {line[:20]!r}")
                if size == 0:
                    self._trailers = True
                    continue
                if len(self._body) + size > MAX_BODY_BYTES:
                    raise _Malformed(f"response body longer than {MAX_BODY_BYTES} bytes")
                self._chunk_left = size
            if self._chunk_left > 0:
                take = min(self._chunk_left, len(buf))
                self._body += buf[:take]
                del buf[:take]
                self._chunk_left -= take
                if self._chunk_left:
                    return False
            if len(buf) < 2:
                return False
            if buf[:2] != b"\r\n":
                raise _Malformed("chunk not followed by CRLF")
            del buf[:2]
            self._chunk_left = -1


class _Malformed(Exception):
    pass


def _decompress(body: bytes, encoding: str) -> bytes:
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        try:
            return zlib.decompress(body)
        except zlib.error:  # raw deflate without the zlib header, as some servers send
            return zlib.decompress(body, -zlib.MAX_WBITS)
    raise ValueError(f"unsupported Content-Encoding {encoding!r}")


class _Target:
    """A parsed URL and the request head built for it (the headers end with the length)."""

    __slots__ = ("head", "host", "key", "port", "ssl")

    def __init__(self, method: str, url: str, headers: Mapping[str, str]) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise TransportError(
                "other", f"unsupported URL scheme in {url!r}", response_started=False
            )
        host = parts.hostname
        if not host:
            raise TransportError("other", f"no host in URL {url!r}", response_started=False)
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            raise TransportError(
                "other", f"invalid port in {url!r}", response_started=False
            ) from None
        self.host = host
        self.port = port
        self.ssl = scheme == "https"
        self.key: _Key = (scheme, host, port)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{port}"
        lines = [f"{method} {path} HTTP/1.1", f"Host: {netloc}"]
        given = {name.lower() for name in headers}
        for name, value in headers.items():
            if _unsafe(name) or _unsafe(value) or name.lower() in ("host", "content-length"):
                raise TransportError(
                    "other",
                    f"header {name!r} is not allowed or holds a line break",
                    response_started=False,
                )
            lines.append(f"{name}: {value}")
        if "accept-encoding" not in given:
            lines.append("Accept-Encoding: gzip, deflate")
        if "user-agent" not in given:
            lines.append("User-Agent: skynet-eval-llm-client")
        lines.append("Content-Length: ")
        self.head = "\r\n".join(lines).encode("latin-1")


def _unsafe(text: str) -> bool:
    return "\r" in text or "\n" in text or "\0" in text


class HTTPTransport:
    """The default transport of :class:`~llm_client.ModelClient`: lean HTTP/1.1 keep-alive.

    ``limit`` caps open connections across all hosts (the client's ``max_concurrency``);
    callers beyond it wait in FIFO order for a connection. Created in the running loop by
    :meth:`open`; :meth:`aclose` closes every connection.
    """

    def __init__(self, *, limit: int = 64) -> None:
        if limit < 1:
            raise ValueError(f"`limit` must be at least 1, got {limit}")
        self._limit = limit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: dict[_Key, list[_Connection]] = {}
        self._count = 0  # open or opening connections
        self._all: set[_Connection] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._targets: dict[tuple[str, str, tuple[tuple[str, str], ...]], _Target] = {}
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    async def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._closed = False

    def _target(self, request: HTTPRequest) -> _Target:
        cache_key = (request.method, request.url, tuple(request.headers.items()))
        target = self._targets.get(cache_key)
        if target is None:
            if len(self._targets) >= 64:
                self._targets.clear()
            target = self._targets[cache_key] = _Target(
                request.method, request.url, request.headers
            )
        return target

    async def send(self, request: HTTPRequest, *, timeout: float) -> HTTPResponse:
        loop = self._loop
        if loop is None or self._closed:
            raise RuntimeError("HTTPTransport.send() outside open() ... aclose()")
        target = self._target(request)
        body = request.body
        data = b"%b%d\r\n\r\n%b" % (target.head, len(body), body)
        deadline = loop.time() + timeout
        conn = self._checkout(target.key, loop)
        if conn is None:
            conn = await self._connect(target, loop, deadline, timeout)
        pending = _Pending(loop.create_future())
        # One timer per request, failing the future rather than cancelling the task:
        # cheaper than a timeout scope, and the caller's own cancellation stays its own.
        pending.timer = loop.call_at(deadline, conn.timed_out, timeout)
        try:
            conn.start(data, pending)
            response = await pending.future
        except BaseException:
            conn.abort()
            raise
        finally:
            pending.timer.cancel()
            self._checkin(conn, loop)
        return response

    # -- the pool ------------------------------------------------------------------------

    def _checkout(self, key: _Key, loop: asyncio.AbstractEventLoop) -> _Connection | None:
        idle = self._idle.get(key)
        if idle:
            stale = loop.time() - KEEPALIVE_S
            while idle:
                conn = idle.pop()  # the most recently used: least likely closed by the server
                if not conn.closed and conn.idle_since > stale:
                    return conn
                self._drop(conn)
        return None

    def _checkin(self, conn: _Connection, loop: asyncio.AbstractEventLoop) -> None:
        conn.pending = None
        if conn.closed or not conn.reusable or self._closed:
            self._drop(conn)
            return
        conn.idle_since = loop.time()
        if self._waiters:
            # A caller waits for a slot: hand over by dropping into the idle pool and
            # waking it; it will pick this connection if it has the same key.
            self._idle.setdefault(conn.key, []).append(conn)
            self._wake()
            return
        self._idle.setdefault(conn.key, []).append(conn)

    def _drop(self, conn: _Connection) -> None:
        conn.abort()
        if conn in self._all:  # idempotent: aclose() may drop a connection its call drops
            self._all.remove(conn)
            self._count -= 1
            self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(
        self, target: _Target, loop: asyncio.AbstractEventLoop, deadline: float, timeout: float
    ) -> _Connection:
        while self._count >= self._limit:
            # Full: take an idle connection to another host, or wait for a slot.
            other = next((conns for conns in self._idle.values() if conns), None)
            if other is not None:
                self._drop(other.pop())
                continue
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                raise TransportError(
                    "timeout",
                    f"timed out after {timeout:g} s waiting for a free connection",
                    response_started=False,
                ) from None
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # pass the slot we were given to the next waiter
                else:
                    waiter.cancel()
                raise
            conn = self._checkout(target.key, loop)
            if conn is not None:
                return conn
        self._count += 1
        try:
            context = self._ssl_context() if target.ssl else None
            async with asyncio.timeout_at(deadline):
                _, protocol = await loop.create_connection(
                    lambda: _Connection(target.key),
                    target.host,
                    target.port,
                    ssl=context,
                    server_hostname=target.host if context is not None else None,
                )
        except TimeoutError:
            self._count -= 1
            self._wake()
            raise TransportError(
                "connect",
                f"timed out after {timeout:g} s connecting to {target.host}:{target.port}",
                response_started=False,
            ) from None
        except OSError as exc:
            self._count -= 1
            self._wake()
            raise TransportError(
                "connect",
                f"cannot connect to {target.host}:{target.port}: {exc}",
                response_started=False,
            ) from None
        except BaseException:
            self._count -= 1
            self._wake()
            raise
        self._all.add(protocol)
        return protocol

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def aclose(self) -> None:
        """Close every connection; calls still in flight fail as disconnected."""
        self._closed = True
        self._idle = {}
        for conn in list(self._all):
            self._drop(conn)  # a call in flight on it fails as disconnected
        for waiter in self._waiters:
            waiter.cancel()
        self._waiters.clear()
        # Let the aborted transports run connection_lost before the loop may close.
        await asyncio.sleep(0)
