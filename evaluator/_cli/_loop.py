"""The one way every command starts its event loop, and how a stop signal ends it.

uvloop when it is installed (faster sockets and pipes), else asyncio's own loop, under
:class:`asyncio.Runner`. A stop signal (Ctrl-C or SIGTERM) cancels the command's main
task: the command finishes what it can say (``run`` prints the partial report) and lets
the cancellation go on; :func:`run` then raises :class:`Interrupted`, which ``_main``
turns into exit code 128 + the signal's number (130 for SIGINT, 143 for SIGTERM) with
the command's note. A second stop signal is not caught: the signal's previous handler acts
(Ctrl-C raises KeyboardInterrupt at once, a second SIGTERM ends the process).

A command whose normal end is a stop signal (``simulator`` serves until one) catches
the cancellation itself and returns; its exit code stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

__all__ = ["STOP_SIGNALS", "Interrupted", "run"]

T = TypeVar("T")

#: The signals that ask a command to stop cleanly: Ctrl-C, and SIGTERM (what `kill`, a
#: CI runner's cancel, `docker stop` and systemd send), treated alike.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A stop signal ended the command: exit code 128 + ``signum``, after ``note`` on stderr.

    A KeyboardInterrupt, so that no ``except Exception`` on the way up swallows it.
    """

    def __init__(self, note: str, signum: int) -> None:
        self.note = note
        self.signum = signum
        super().__init__(note)


class _Stop:
    """Which stop signal came, and the task it cancels."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.task: asyncio.Task[Any] | None = None


_Handler = Callable[[int, FrameType | None], Any] | int | None


@contextlib.contextmanager
def _stop_signals(
    loop: asyncio.AbstractEventLoop, signals: tuple[signal.Signals, ...]
) -> Iterator[_Stop]:
    """While inside, the first of ``signals`` cancels ``stop.task``; the handlers that
    were there before are put back on the way out (and at once for a signal that came,
    so that a second one acts as it would without us)."""
    stop = _Stop()
    previous: dict[signal.Signals, _Handler] = {}

    def restore(sig: signal.Signals) -> None:
        loop.remove_signal_handler(sig)
        handler = previous.pop(sig)
        if handler is not None:
            signal.signal(sig, handler)

    def on_signal(sig: signal.Signals) -> None:
        restore(sig)
        if stop.signum is None:
            stop.signum = int(sig)
            if stop.task is not None:
                stop.task.cancel()

    for sig in signals:
        handler = signal.getsignal(sig)
        # Not the main thread, or no signals on this platform: the loop runs without.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig)
            previous[sig] = handler
    try:
        yield stop
    finally:
        for sig in list(previous):
            restore(sig)


async def _main_task(main: Callable[[], Awaitable[T]], stop: _Stop) -> T:
    stop.task = asyncio.current_task()
    if stop.signum is not None:  # the signal came while the loop was starting
        raise asyncio.CancelledError
    return await main()


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(
    main: Callable[[], Awaitable[T]],
    *,
    note: str = "interrupted",
    signals: tuple[signal.Signals, ...] = STOP_SIGNALS,
) -> T:
    """Run ``main()`` on a fresh loop and return its value.

    Raises :class:`Interrupted` (carrying ``note``) when one of ``signals`` cancelled
    ``main`` and it ended cancelled.
    """
    # The handlers go in before the main task starts, so that asyncio.Runner's own SIGINT
    # handling (which raises KeyboardInterrupt at the second) stays out of the way.
    with (
        asyncio.Runner(loop_factory=_loop_factory()) as runner,
        _stop_signals(runner.get_loop(), signals) as stop,
    ):
        try:
            return runner.run(_main_task(main, stop))
        except asyncio.CancelledError:
            if stop.signum is None:
                raise
            raise Interrupted(note, stop.signum) from None
