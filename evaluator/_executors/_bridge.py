"""``skynet.llm`` for calls running in the engine's own process (loop, threads, inline).

A sync call from a thread hops onto the engine's loop and blocks only its own thread; an
async call is awaited directly. (A worker process relays instead: ``_process/_relay.py``.)
When the submit a thread's call belongs to is cancelled, :meth:`LoopBridge.cancel` stops
the model call that thread waits on, so that the thread is free at once instead of after
the model's reply (a slow model held Ctrl-C for its whole latency).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from .._calls import LLMHandler
from .._context import Stage

__all__ = ["LoopBridge"]


class LoopBridge:
    """The :class:`evaluator._context.LLMBridge` of one call in the engine's process."""

    __slots__ = ("_cancelled", "_future", "_handler", "_loop", "_stage", "_token")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, handler: LLMHandler, token: int, stage: Stage
    ) -> None:
        self._loop = loop
        self._handler = handler
        self._token = token
        self._stage: Stage = stage
        self._cancelled = False
        self._future: concurrent.futures.Future[str] | None = None

    def cancel(self) -> None:
        """From the loop: stop the model call this bridge waits on, refuse later ones."""
        self._cancelled = True
        future = self._future
        if future is not None:
            future.cancel()  # wakes the thread; the loop's task is cancelled with it

    def call(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError(
                "skynet.llm() would block the event loop here; in an `async def` function "
                "use `await skynet.allm(...)`"
            )
        if self._cancelled:
            raise concurrent.futures.CancelledError("the evaluation was cancelled")
        future: concurrent.futures.Future[str] = asyncio.run_coroutine_threadsafe(
            self._handler(self._token, self._stage, instruction, input, options), self._loop
        )
        self._future = future
        if self._cancelled:  # cancelled between the check and now: cancel() missed it
            future.cancel()
        return future.result()

    async def acall(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        return await self._handler(self._token, self._stage, instruction, input, options)
