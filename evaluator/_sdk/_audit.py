"""Seeing network traffic that bypasses the metered paths: a ``socket.connect`` audit hook.

A program's cost is measured only when every model call it makes goes through the engine.
Connections that user code opens itself (raw HTTP through ``urllib``, ``requests``, an SDK
the engine does not route) are seen here: Python raises the ``socket.connect`` audit event
for every connect made through the ``socket`` module, in the engine's process and in each
worker, and this hook tells the bridge of the call it belongs to (``_owner.owner``: the
call context, a worker's one call, or a user thread's unattributed route), which marks
that example's cost unmeasured (None, with a note naming the host). Processes user code
starts (``subprocess``, ``os.system``, ``os.fork``, ``multiprocessing``) are seen the same
way, by their audit events: the engine cannot see their model calls, so the cost is
unmeasured, the note naming the program.

Under ``--simulator`` (:func:`seal`), a connection of user code to any address but the
simulator's is *refused* (:class:`~._request.SimulatorOnly`), whatever thread makes it;
in a worker process, whatever the process does.

What it does not see, and is documented as such: connections made in C without the
``socket`` module (uvloop's, for ``async`` user code on the engine's loop; a C extension's
own sockets); calls carried by a connection opened *before* (a keep-alive pool: the
gateway keeps every later example of that stage unmeasured once a bypass is seen); in the
engine's process, threads that user code did not start from a call (at import, say).

The engine's own connections (the model client's, the simulator's) are made under
:func:`engine_io`, a context variable the hook checks first, so they never count. User
code's own connections to the simulator are allowed under ``--simulator``, and counted
as unmetered traffic like any other.

An audit hook cannot be removed: it is added once per process, and does nothing while no
Evaluator is open (:func:`activate`). Its cost is one Python call per audit event of the
process, and a set lookup for all but the events above.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ._owner import owner
from ._request import SimulatorOnly

__all__ = [
    "activate",
    "deactivate",
    "engine_io",
    "install",
    "is_engine_io",
    "seal",
    "unseal",
]

_engine_io: contextvars.ContextVar[bool] = contextvars.ContextVar("skynet_engine_io", default=False)
_lock = threading.Lock()
_installed = False
_active = 0
#: The simulators' addresses while sealed, each counted by the seals naming it.
_allowed: dict[tuple[str, int], int] = {}
_sealed = 0
#: The audit events of a process being started, and where each names the program.
_SPAWNS = {
    "subprocess.Popen": 1,
    "os.system": 0,
    "os.posix_spawn": 1,
    "os.spawn": 2,
    "os.exec": 1,
    "os.fork": -1,
    "os.forkpty": -1,
}


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
    if not _active:
        return
    if event == "socket.connect":
        _connect(args)
    elif event in _SPAWNS:
        _spawn(event, args)


def _connect(args: tuple[Any, ...]) -> None:
    if _engine_io.get():
        return
    where = _host(args[1]) if len(args) > 1 else None
    if where is None:
        return
    ctx = owner()
    if ctx is None:
        return
    host, port = where
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if _sealed and where not in _allowed:
        _tell(ctx, f"a network connection to {shown}, refused under --simulator")
        raise SimulatorOnly(shown)
    # The simulator's own address too: a request user code sends it itself is not metered.
    _tell(ctx, f"a network connection to {shown} that no metered model call made")


def _spawn(event: str, args: tuple[Any, ...]) -> None:
    if _engine_io.get() or _from_probe():
        return
    ctx = owner()
    if ctx is None:
        return
    _tell(
        ctx,
        f"a process it started ({_program(event, args)}), whose model calls the engine cannot see",
    )


#: Standard modules that start a process to ask the system something: ``platform``
#: (``uname -p``, for the SDKs' own platform headers), ``ctypes.util`` (``ldconfig``, to
#: find a library), ``uuid``. Not the user's, and no model call.
_PROBES = frozenset({"platform", "ctypes.util", "uuid"})


def _from_probe() -> bool:
    """Whether one of :data:`_PROBES` starts this process."""
    frame = sys._getframe(3)
    while frame is not None:
        if frame.f_globals.get("__name__") in _PROBES:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _program(event: str, args: tuple[Any, ...]) -> str:
    """The program a spawn event starts, by its name only (its arguments may hold keys)."""
    at = _SPAWNS[event]
    if at < 0 or len(args) <= at:
        return event
    value = args[at]
    if isinstance(value, list | tuple):
        value = value[0] if value else event
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    text = str(value).split()[0] if str(value).split() else event
    return os.path.basename(text)[:60] or event


def _tell(ctx: Any, what: str) -> None:
    bridge = getattr(ctx, "llm", None)
    note = getattr(bridge, "note_bypass", None)
    if note is None:
        return
    with engine_io():  # telling the engine must not count as traffic of its own
        note(what)


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


def _addresses(host: str, port: int) -> list[tuple[str, int]]:
    if host == "localhost":
        return [(host, port), ("127.0.0.1", port), ("::1", port)]
    return [(host, port)]


def seal(host: str, port: int) -> None:
    """``--simulator``: user code may connect to ``host:port`` (the simulator) only, until
    :func:`unseal` with the same address (counted: runs may overlap)."""
    global _sealed
    with _lock:
        for address in _addresses(host, port):
            _allowed[address] = _allowed.get(address, 0) + 1
        _sealed += 1


def unseal(host: str, port: int) -> None:
    global _sealed
    with _lock:
        # Forgotten at once: a port the simulator gave back may serve anything next.
        for address in _addresses(host, port):
            left = _allowed.get(address, 0) - 1
            if left > 0:
                _allowed[address] = left
            else:
                _allowed.pop(address, None)
        _sealed = max(0, _sealed - 1)
