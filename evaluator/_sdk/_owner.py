"""Whose call a request belongs to when the caller's context does not say: user threads.

The call context (``evaluator._call._context``) is a context variable, and a thread the user
starts (``threading.Thread``, a ``ThreadPoolExecutor``'s) begins with an empty context:
by the context alone, an SDK call or a connection made there belongs to nobody, and would
go out unrouted and unseen. :func:`owner` answers instead of :func:`~evaluator._call._context.
current` for the SDK hook and the audit hook:

* the call context of this thread or task, when there is one;
* in a worker process, the context of the one call the process runs now
  (:func:`own_process`): the worker runs one call at a time, so anything the process
  does belongs to that call, whatever thread does it (between calls, the relay's token
  is :data:`UNATTRIBUTED`);
* in the engine's process, a thread started from a user call, or from such a thread
  (``Thread.start`` is patched while an Evaluator is open to note which, and from which
  stage): the context of the newest open gateway's *unattributed* route
  (:func:`open_route`). Its calls go through the engine (governor, retries,
  ``--simulator``) under the token :data:`UNATTRIBUTED`, and the engine marks the
  examples of that stage running then, and every later one, unmeasured: the call cannot
  be tied to one of them;
* anything else (the engine's own threads, a service embedding the engine, threads a
  user module started while it was imported) belongs to nobody: it is not the engine's
  to route.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from .._call._context import CallContext, Stage, current

__all__ = [
    "UNATTRIBUTED",
    "activate",
    "close_route",
    "deactivate",
    "open_route",
    "own_process",
    "owner",
]

#: The call token of a request no example can be charged with (tokens are never
#: negative; -1 is the meter book's own marker).
UNATTRIBUTED = -2

_lock = threading.Lock()
_active = 0
#: A worker process: the context of the call it runs (updated in place, call by call).
_process: Any = None
#: Threads started from a user call (or from such a thread), and that call's stage.
_started: weakref.WeakKeyDictionary[threading.Thread, Stage] = weakref.WeakKeyDictionary()
#: The open gateways' routes for unattributed calls, newest last.
_routes: list[_Route] = []
_original_start: Callable[..., Any] | None = None


class _Route:
    """The unattributed route of one open gateway: a context per stage, built once."""

    __slots__ = ("_bridge", "_contexts")

    def __init__(self, bridge: Callable[[Stage], Any]) -> None:
        self._bridge = bridge
        self._contexts: dict[Stage, CallContext] = {}

    def context(self, stage: Stage) -> CallContext:
        ctx = self._contexts.get(stage)
        if ctx is None:
            ctx = self._contexts[stage] = CallContext(None, stage, None, self._bridge(stage))
        return ctx


def owner() -> Any:
    """The context a request made here belongs to, or None (see the module docstring)."""
    ctx = current()
    if ctx is not None:
        return ctx
    if _process is not None:
        return _process
    if not _routes:
        return None
    stage = _started.get(threading.current_thread())
    if stage is None:
        return None
    routes = _routes
    return routes[-1].context(stage) if routes else None  # closed meanwhile: nobody


def own_process(ctx: Any) -> None:
    """A worker process: every thread's requests belong to the call ``ctx`` describes."""
    global _process
    _process = ctx


def open_route(bridge: Callable[[Stage], Any]) -> _Route:
    """A gateway opened: ``bridge(stage)`` carries the unattributed calls of user threads
    of ``stage`` to it. Returns the route, for :func:`close_route`."""
    route = _Route(bridge)
    with _lock:
        _routes.append(route)
    return route


def close_route(route: _Route) -> None:
    with _lock:
        if route in _routes:
            _routes.remove(route)


def _start(self: threading.Thread, *args: Any, **kwargs: Any) -> Any:
    """``Thread.start``: note the stage of a thread started from user code."""
    from ._audit import is_engine_io  # it imports this module

    if not is_engine_io():
        ctx = current()
        stage = getattr(ctx, "stage", None) if ctx is not None else None
        if stage is None:
            stage = _started.get(threading.current_thread())
        if stage is not None:
            _started[self] = stage
    assert _original_start is not None
    return _original_start(self, *args, **kwargs)


def activate() -> None:
    """An Evaluator opened: note the threads user code starts (reference-counted)."""
    global _active, _original_start
    with _lock:
        _active += 1
        if _active == 1 and _original_start is None:
            _original_start = threading.Thread.start
            threading.Thread.start = _start  # type: ignore[method-assign]


def deactivate() -> None:
    """The last Evaluator closed: ``Thread.start`` is the library's own again."""
    global _active, _original_start
    with _lock:
        _active = max(0, _active - 1)
        if _active == 0 and _original_start is not None:
            if threading.Thread.start is _start:
                threading.Thread.start = _original_start  # type: ignore[method-assign]
            _original_start = None
