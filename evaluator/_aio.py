"""The engine's async idiom: asyncio-native, with cleanup that no cancellation cuts short.

The engine is built on asyncio's own features (``loop.add_reader`` on sockets and pidfds,
``call_later`` timers, uvloop), so it uses asyncio's structured concurrency throughout:
``asyncio.TaskGroup`` for tasks it starts, ``asyncio.timeout``-style timers for limits,
``Task.cancel()`` to stop work. A cancellation the engine receives is always re-raised.

Cleanup is the one delicate part. Ctrl-C under ``asyncio.run`` / ``asyncio.Runner``, an
``asyncio.timeout`` or a failing ``TaskGroup`` send a *native* ``Task.cancel()``, which
an anyio shielded scope does not stop; and it may come again while cleanup is running.
:func:`shielded` therefore runs cleanup in a task of its own, waits for it through
``asyncio.shield``, and waits again after every cancellation until the cleanup is done,
then re-raises the cancellation: killed workers are reaped, threads released, tasks
awaited, whatever the caller does meanwhile.

A caller that lives in anyio cancel scopes (the optimizer integrations, a host on anyio)
is cancelled by anyio at every turn of the loop until it yields (anyio's cancellation is
level-triggered); the same wait also sits in an anyio shielded scope so that anyio waits
for it quietly instead of cancelling it in a busy loop. That is an optimisation for such
callers, not what makes the cleanup safe.

:func:`unwrap_group` turns a task group's exception group with one real error back into
that error, so that callers see a ``DatasetError`` rather than a group holding it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import anyio

__all__ = ["shielded", "unwrap_group"]

T = TypeVar("T")


async def shielded(cleanup: Coroutine[Any, Any, T]) -> T:
    """Run ``cleanup`` to its end, whatever cancels the caller meanwhile, then re-raise
    the first cancellation the caller received (if any), chained to the cleanup's error."""
    task = asyncio.get_running_loop().create_task(cleanup)
    interrupted: asyncio.CancelledError | None = None
    with anyio.CancelScope(shield=True):
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError as exc:
                if task.done():  # the cleanup itself was cancelled: its outcome stands
                    break
                if interrupted is None:
                    interrupted = exc
    if interrupted is not None:
        error = None if task.cancelled() else task.exception()
        raise interrupted from error
    return task.result()


@contextlib.contextmanager
def unwrap_group() -> Iterator[None]:
    """Raise the one real error of a task group as itself, not inside an ExceptionGroup."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
        real = [e for e in leaves if not isinstance(e, asyncio.CancelledError)]
        if len(real) == 1:
            raise real[0] from None
        if not real and leaves:
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup[Any]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc
