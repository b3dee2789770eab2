"""``skynet.llm`` for calls running in the engine's own process (loop, threads, inline).

A sync call from a thread hops onto the engine's loop and blocks only its own thread; an
async call is awaited directly. (A worker process relays instead: ``_process/_relay.py``.)
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

    __slots__ = ("_handler", "_loop", "_stage", "_token")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, handler: LLMHandler, token: int, stage: Stage
    ) -> None:
        self._loop = loop
        self._handler = handler
        self._token = token
        self._stage: Stage = stage

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
        future: concurrent.futures.Future[str] = asyncio.run_coroutine_threadsafe(
            self._handler(self._token, self._stage, instruction, input, options), self._loop
        )
        return future.result()

    async def acall(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        return await self._handler(self._token, self._stage, instruction, input, options)
