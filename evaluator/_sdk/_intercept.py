"""Routing an SDK's requests to the engine at the HTTP-client layer.

Every SDK ends in one of a few HTTP clients, which are patched here at the method that
sends a whole request and returns its response:

* ``httpx2`` (the official ``openai`` client here) and ``httpx`` (``litellm``, the
  ``anthropic`` client, older ``openai``): ``Client.send`` and ``AsyncClient.send``;
* dspy's vendored ``lm15`` transport (``dspy.LM`` sends through it, over raw sockets,
  not through litellm): ``StdlibTransport.stream`` and ``StdlibAsyncTransport._do_stream``.

Patching there routes each SDK after it has built its request (base URL, key, headers,
body and timeout as the user configured them) and before any socket is opened, and hands
it back a response of its own library that it parses, streams and raises from as usual.

A patched method does something only for user code (inside a user call, in a thread a
user call started, in a worker process: ``_owner.owner``) and outside the engine's own
I/O; any other request (a service embedding the engine, the engine's own clients) passes
through untouched. For user code:

* a model call (``POST`` to ``.../chat/completions``, ``/responses``, ``/messages``,
  ``/completions``, ``/embeddings``) goes to the call's bridge, which takes it to the
  engine's model client (a hop to the loop from a thread, a relay from a worker) and
  returns the provider's reply (:class:`llm_client.Forwarded`), metered into the example;
* any other request goes out as the SDK meant, and the example's cost is unmeasured (a
  note names the host): the engine cannot price what it does not see;
* a synchronous SDK call made on the engine's event loop (a sync client inside ``async
  def``) cannot wait for the loop it blocks: it goes out as meant, unmeasured, and the
  note says to use the async client.

The patches are applied while an Evaluator is open (reference-counted) and removed when
the last one closes; in a worker process they stay for the worker's life. A library is
patched when the Evaluator opens (``httpx``/``httpx2``: imported if installed; ``lm15``:
if dspy is already imported, as a user module that uses it has done by then).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import importlib
import importlib.util
import sys
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

from llm_client._exceptions import ModelClientError

from ._audit import is_engine_io
from ._owner import owner
from ._request import CannotRoute, SDKRequest

__all__ = ["MODEL_PATHS", "activate", "activate_in_worker", "deactivate", "model_path"]

#: The endpoints routed as model calls (the path's end, before any query).
MODEL_PATHS = ("/chat/completions", "/responses", "/messages", "/completions", "/embeddings")
_LM15 = "dspy._vendor.lm15.transports"
_lock = threading.Lock()
_active = 0
#: (class, name, original) of every patched method, to restore them.
_patched: list[tuple[type[Any], str, Callable[..., Any]]] = []
_NOT_ROUTED = "a request that is not a model call the engine routes"


def model_path(method: str, path: str) -> str | None:
    """The routed endpoint ``path`` ends with (a POST), or None."""
    if method.upper() != "POST":
        return None
    path = path.rstrip("/")
    for suffix in MODEL_PATHS:
        if path.endswith(suffix):
            return suffix
    return None


def _cancelled_text(exc: BaseException) -> str:
    if isinstance(exc, concurrent.futures.CancelledError):
        return "the evaluation was cancelled while this model call was in flight"
    return str(exc)


# -- the libraries, each as the routing needs it -------------------------------------------


class _Httpx:
    """``httpx`` and ``httpx2``: one API, two packages."""

    def __init__(self, module: Any) -> None:
        self.module = module

    @staticmethod
    def where(request: Any) -> tuple[str, str, str]:
        return request.method, request.url.host, request.url.path

    @staticmethod
    def sdk_request(request: Any, body: bytes) -> SDKRequest:
        timeout = request.extensions.get("timeout")
        read = timeout.get("read") if isinstance(timeout, dict) else None
        return SDKRequest(
            request.method,
            str(request.url),
            list(request.headers.multi_items()),
            body,
            float(read) if isinstance(read, int | float) and read > 0 else None,
        )

    def response(self, request: Any, forwarded: Any) -> Any:
        """The reply as the library's own ``Response``, its body already read (it streams
        from memory for ``stream=True``)."""
        response = self.module.Response(
            status_code=forwarded.status,
            headers=list(forwarded.headers.items()),
            content=forwarded.body,
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )
        response.elapsed = datetime.timedelta(
            milliseconds=forwarded.queued_ms + forwarded.latency_ms
        )
        return response

    def error(self, request: Any, exc: BaseException) -> BaseException:
        """No reply at all: the library's connection error (its SDK retries or raises its
        own connection error, as for a network failure)."""
        error: BaseException = self.module.ConnectError(_cancelled_text(exc), request=request)
        return error


class _Lm15:
    """dspy's vendored lm15 transports (``TransportRequest`` in, a streaming response out)."""

    def __init__(self, module: Any) -> None:
        self.module = module

    @staticmethod
    def where(request: Any) -> tuple[str, str, str]:
        parts = urlsplit(request.url)
        return request.method, parts.hostname or "", parts.path

    @staticmethod
    def sdk_request(request: Any, body: bytes) -> SDKRequest:
        read = request.read_timeout
        timeout = float(read) if isinstance(read, int | float) and read > 0 else None
        return SDKRequest(request.method, request.url, list(request.headers), body, timeout)

    def response(self, request: Any, forwarded: Any) -> Any:
        return self.module.TransportResponse(
            status=forwarded.status,
            reason="",
            headers=list(forwarded.headers.items()),
            http_version="HTTP/1.1",
            chunks=iter((forwarded.body,)),
            release=_released,
        )

    def aresponse(self, request: Any, forwarded: Any) -> Any:
        return self.module.AsyncTransportResponse(
            status=forwarded.status,
            reason="",
            headers=list(forwarded.headers.items()),
            http_version="HTTP/1.1",
            chunks=_chunks(forwarded.body),
            release=_areleased,
        )

    def error(self, request: Any, exc: BaseException) -> BaseException:
        error: BaseException = self.module.ConnectError(_cancelled_text(exc))
        return error


def _released(body_consumed: bool) -> None:
    """Nothing to give back: the reply was read whole by the engine."""


async def _areleased(body_consumed: bool) -> None:
    """As :func:`_released`."""


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    yield body


# -- the routing, the same for every library ------------------------------------------------


def _routable(adapter: Any, request: Any) -> tuple[Any, bool]:
    """The call's bridge when this request is the engine's to handle, and whether it is
    a model call."""
    if not _active or is_engine_io():
        return None, False
    ctx = owner()
    bridge = None if ctx is None else getattr(ctx, "llm", None)
    if bridge is None or not hasattr(bridge, "forward"):
        return None, False
    method, _, path = adapter.where(request)
    return bridge, model_path(method, path) is not None


def _unrouted(adapter: Any, bridge: Any, request: Any, why: str) -> None:
    note = getattr(bridge, "note_bypass", None)
    if note is not None:
        method, host, path = adapter.where(request)
        note(f"{why} ({method} {host}{path})")


def _sync_route(
    adapter: Any, original: Callable[..., Any], body: Callable[[Any], bytes]
) -> Callable[..., Any]:
    def routed(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        bridge, model_call = _routable(adapter, request)
        if bridge is None:
            return original(self, request, *args, **kwargs)
        if not model_call:
            _unrouted(adapter, bridge, request, _NOT_ROUTED)
            return original(self, request, *args, **kwargs)
        try:
            forwarded = bridge.forward(adapter.sdk_request(request, body(request)))
        except CannotRoute as exc:
            _unrouted(adapter, bridge, request, str(exc))
            return original(self, request, *args, **kwargs)
        except (concurrent.futures.CancelledError, ModelClientError) as exc:
            raise adapter.error(request, exc) from None
        return adapter.response(request, forwarded)

    routed.__wrapped__ = original  # type: ignore[attr-defined]
    return routed


def _async_route(
    adapter: Any,
    original: Callable[..., Any],
    body: Callable[[Any], Any],
    build: Callable[[Any, Any], Any],
) -> Callable[..., Any]:
    async def routed(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        bridge, model_call = _routable(adapter, request)
        if bridge is None:
            return await original(self, request, *args, **kwargs)
        if not model_call:
            _unrouted(adapter, bridge, request, _NOT_ROUTED)
            return await original(self, request, *args, **kwargs)
        try:
            forwarded = await bridge.aforward(adapter.sdk_request(request, await body(request)))
        except CannotRoute as exc:
            _unrouted(adapter, bridge, request, str(exc))
            return await original(self, request, *args, **kwargs)
        except (concurrent.futures.CancelledError, ModelClientError) as exc:
            raise adapter.error(request, exc) from None
        return build(request, forwarded)

    routed.__wrapped__ = original  # type: ignore[attr-defined]
    return routed


def _read(request: Any) -> bytes:
    data: bytes = request.read()
    return data


async def _aread(request: Any) -> bytes:
    data: bytes = await request.aread()
    return data


def _body(request: Any) -> bytes:
    return bytes(request.body or b"")


async def _abody(request: Any) -> bytes:
    return bytes(request.body or b"")


def _replace(cls: Any, name: str, routed: Callable[..., Any], original: Callable[..., Any]) -> None:
    setattr(cls, name, routed)
    _patched.append((cls, name, original))


def _patch_httpx(module: Any) -> None:
    adapter = _Httpx(module)
    for cls_name, is_async in (("Client", False), ("AsyncClient", True)):
        cls = getattr(module, cls_name, None)
        original = getattr(cls, "send", None)
        if original is None or hasattr(original, "__wrapped__"):
            continue
        if is_async:
            routed = _async_route(adapter, original, _aread, adapter.response)
        else:
            routed = _sync_route(adapter, original, _read)
        _replace(cls, "send", routed, original)


def _patch_lm15(module: Any) -> None:
    adapter = _Lm15(module)
    sync_cls = getattr(module, "StdlibTransport", None)
    original = getattr(sync_cls, "stream", None)
    if original is not None and not hasattr(original, "__wrapped__"):
        _replace(sync_cls, "stream", _sync_route(adapter, original, _body), original)
    async_cls = getattr(module, "StdlibAsyncTransport", None)
    original = getattr(async_cls, "_do_stream", None)
    if original is not None and not hasattr(original, "__wrapped__"):
        routed = _async_route(adapter, original, _abody, adapter.aresponse)
        _replace(async_cls, "_do_stream", routed, original)


def _patch_present() -> None:
    for name in ("httpx", "httpx2"):
        module = sys.modules.get(name)
        if module is not None:
            _patch_httpx(module)
    module = sys.modules.get(_LM15)
    if module is not None:
        _patch_lm15(module)


def activate() -> None:
    """Route SDK calls made in user calls (an Evaluator opened): patch the HTTP clients,
    importing ``httpx``/``httpx2`` if they are installed, once."""
    global _active
    with _lock:
        _active += 1
        if _active > 1:
            return
        for name in ("httpx", "httpx2"):
            if name not in sys.modules and importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
        _patch_present()


def activate_in_worker() -> None:
    """A worker routes for its whole life: patch what its user module imported."""
    global _active
    with _lock:
        _active += 1
        _patch_present()


def deactivate() -> None:
    """The last Evaluator closed: put the libraries' own methods back."""
    global _active
    with _lock:
        _active = max(0, _active - 1)
        if _active:
            return
        while _patched:
            cls, name, original = _patched.pop()
            setattr(cls, name, original)
