"""Transports: how a request reaches the server. The client sees only :class:`Transport`.

Two real ones, for two kinds of server: :class:`HTTPTransport`, a lean HTTP/1.1 keep-alive
client for plain-HTTP servers reached directly (vLLM, llama.cpp, Ollama, the simulator),
where the client's CPU per call bounds throughput; :class:`AiohttpTransport` for HTTPS
providers and proxies. :class:`MockTransport` plays a server from a function, for tests.
"""

from ._aiohttp import AiohttpTransport as AiohttpTransport
from ._base import HTTPRequest as HTTPRequest
from ._base import HTTPResponse as HTTPResponse
from ._base import Transport as Transport
from ._base import TransportError as TransportError
from ._http11 import HTTPTransport as HTTPTransport
from ._mock import MockTransport as MockTransport

__all__ = [
    "AiohttpTransport",
    "HTTPRequest",
    "HTTPResponse",
    "HTTPTransport",
    "MockTransport",
    "Transport",
    "TransportError",
]
