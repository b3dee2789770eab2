"""Seeing network traffic that bypasses the metered paths: a ``socket.connect`` audit hook.

A program's cost is measured only when every model call it makes goes through the engine.
Connections that user code opens itself (raw HTTP through ``urllib``, ``requests``, an SDK
the engine does not route) are seen here: Python raises the ``socket.connect`` audit event
for every connect made through the ``socket`` module, in the engine's process and in each
worker, and this hook tells the current call's bridge, which marks that example's cost
unmeasured (None, with a note naming the host).

What it does not see, and is documented as such: connections made in C without the
``socket`` module (uvloop's, for ``async`` user code on the engine's loop; a C extension's
own sockets); calls carried by a connection opened *before* (a keep-alive pool: the
gateway keeps every later example of that stage unmeasured once a bypass is seen); and
threads the user starts, which do not inherit the call's context.

The engine's own connections (the model client's, the simulator's) are made under
:func:`engine_io`, a context variable the hook checks first, so they never count. Loopback
connections to the address SDK calls are served from (``--simulator``) are excepted too.

An audit hook cannot be removed: it is added once per process, and does nothing while no
Evaluator is open (:func:`activate`). Its cost is one Python call per audit event of the
process; all but ``socket.connect`` return at the first comparison.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import sys
import threading
from collections.abc import Iterator
from typing import Any

from .._context import current

__all__ = ["activate", "deactivate", "engine_io", "except_address", "install", "is_engine_io"]

_engine_io: contextvars.ContextVar[bool] = contextvars.ContextVar("skynet_engine_io", default=False)
_lock = threading.Lock()
_installed = False
_active = 0
_excepted: set[tuple[str, int]] = set()


@contextlib.contextmanager
def engine_io() -> Iterator[None]:
    """Connections opened inside are the engine's own: never a bypass."""
    token = _engine_io.set(True)
    try:
        yield
    finally:
        _engine_io.reset(token)


def is_engine_io() -> bool:
    return _engine_io.get()


def _host(address: Any) -> tuple[str, int] | None:
    """(host, port) of an IPv4/IPv6 address; None for a Unix socket and the like."""
    if isinstance(address, tuple) and len(address) >= 2 and isinstance(address[0], str):
        port = address[1]
        return address[0], port if isinstance(port, int) else 0
    return None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "socket.connect" or not _active:
        return
    if _engine_io.get():
        return
    ctx = current()
    if ctx is None:
        return
    where = _host(args[1]) if len(args) > 1 else None
    if where is None or where in _excepted:
        return
    bridge = getattr(ctx, "llm", None)
    note = getattr(bridge, "note_bypass", None)
    if note is None:
        return
    host, port = where
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with engine_io():  # telling the engine must not count as traffic of its own
        note(f"a network connection to {shown} that no metered model call made")


def install() -> None:
    """Add the hook to this process, once."""
    global _installed
    with _lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True


def activate() -> None:
    """An Evaluator opened (or a worker booted): the hook reports."""
    global _active
    install()
    with _lock:
        _active += 1


def deactivate() -> None:
    global _active
    with _lock:
        _active = max(0, _active - 1)


def except_address(host: str, port: int) -> None:
    """Loopback connections to ``host:port`` (the simulator serving SDK calls) are fine."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        _excepted.add((host, port))
        if host == "localhost":
            _excepted.add(("127.0.0.1", port))
