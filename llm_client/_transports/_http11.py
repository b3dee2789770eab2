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

This module holds the pool and the request side; one connection and its response parser
are in ``_http11_connection.py``. Every failure is a :class:`TransportError` saying whether
the response had started, which the client needs to tell a body timeout from a connect
failure.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Mapping
from urllib.parse import urlsplit

from ._base import HTTPRequest, HTTPResponse, TransportError
from ._http11_connection import Connection, Key, Pending

__all__ = ["KEEPALIVE_S", "HTTPTransport"]

#: An idle pooled connection older than this is closed instead of reused: a server that
#: closes idle keep-alive connections (uvicorn, hence vLLM, after 5 s) could otherwise
#: close one just as a request is written to it.
KEEPALIVE_S = 4.0


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
        self.key: Key = (scheme, host, port)
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
        self._idle: dict[Key, list[Connection]] = {}
        self._count = 0  # open or opening connections
        self._all: set[Connection] = set()
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
        pending = Pending(loop.create_future())
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

    def _checkout(self, key: Key, loop: asyncio.AbstractEventLoop) -> Connection | None:
        idle = self._idle.get(key)
        if idle:
            stale = loop.time() - KEEPALIVE_S
            while idle:
                conn = idle.pop()  # the most recently used: least likely closed by the server
                # ``reusable`` too: a server's FIN (eof_received) precedes connection_lost.
                if not conn.closed and conn.reusable and conn.idle_since > stale:
                    return conn
                self._drop(conn)
        return None

    def _checkin(self, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
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

    def _drop(self, conn: Connection) -> None:
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
    ) -> Connection:
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
                    lambda: Connection(target.key),
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
