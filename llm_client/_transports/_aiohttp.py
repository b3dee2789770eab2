"""The aiohttp transport: for HTTPS providers and proxies, where aiohttp's TLS and proxy
handling is what users expect; the lean HTTP/1.1 transport serves plain-HTTP servers.

aiohttp is imported when the transport opens, not with the package: a run against a local
server, and every worker process, never pays for its import.
"""

from __future__ import annotations

import asyncio

from ._base import HTTPRequest, HTTPResponse, TransportError

__all__ = ["AiohttpTransport"]


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
