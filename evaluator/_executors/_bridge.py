"""``skynet.llm`` for calls running in the engine's own process (loop, threads, inline).

A sync call from a thread hops onto the engine's loop and blocks only its own thread; an
async call is awaited directly. (A worker process relays instead: ``_process/_relay.py``.)
When the submit a thread's call belongs to is cancelled, :meth:`LoopBridge.cancel` stops
the model call that thread waits on, so that the thread is free at once instead of after
the model's reply (a slow model held Ctrl-C for its whole latency).

The same hop carries the user's own SDK calls (``evaluator/_sdk/``): :meth:`forward`,
:meth:`aforward` and :meth:`note_bypass` are the SDK hook, used when the handler is the
router's model port; a cancelled bridge stops those calls too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from .._call._calls import LLMHandler
from .._call._context import Stage
from .._sdk._request import CannotRoute, SDKRequest

if TYPE_CHECKING:
    from llm_client import Forwarded

__all__ = ["LoopBridge"]

_T = TypeVar("_T")

_ON_THE_LOOP = (
    "a synchronous SDK call on the engine's event loop (in an `async def` function) cannot "
    "be routed without blocking it; use the SDK's async client (AsyncOpenAI, acompletion)"
)


class LoopBridge:
    """The :class:`evaluator._call._context.LLMBridge` of one call in the engine's process."""

    __slots__ = ("_cancelled", "_future", "_handler", "_loop", "_stage", "_token")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, handler: LLMHandler, token: int, stage: Stage
    ) -> None:
        self._loop = loop
        self._handler = handler
        self._token = token
        self._stage: Stage = stage
        self._cancelled = False
        self._future: concurrent.futures.Future[Any] | None = None

    def cancel(self) -> None:
        """From the loop: stop the model call this bridge waits on, refuse later ones."""
        self._cancelled = True
        future = self._future
        if future is not None:
            future.cancel()  # wakes the thread; the loop's task is cancelled with it

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def _wait(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the engine's loop; block this thread until it ends or the
        bridge is cancelled."""
        if self._cancelled:
            coro.close()
            raise concurrent.futures.CancelledError("the evaluation was cancelled")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        self._future = future
        if self._cancelled:  # cancelled between the check and now: cancel() missed it
            future.cancel()
        return future.result()

    def call(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        if self._on_loop():
            raise RuntimeError(
                "skynet.llm() would block the event loop here; in an `async def` function "
                "use `await skynet.allm(...)`"
            )
        return self._wait(self._handler(self._token, self._stage, instruction, input, options))

    async def acall(self, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        return await self._handler(self._token, self._stage, instruction, input, options)

    # -- the SDK hook ---------------------------------------------------------------------

    def forward(self, request: SDKRequest) -> Forwarded:
        """A routed SDK call from a thread: hop to the loop, block this thread only."""
        if self._on_loop():
            raise CannotRoute(_ON_THE_LOOP)
        forward = getattr(self._handler, "forward", None)
        if forward is None:
            raise CannotRoute("this executor routes no SDK calls")
        result: Forwarded = self._wait(forward(self._token, self._stage, request))
        return result

    async def aforward(self, request: SDKRequest) -> Forwarded:
        """A routed SDK call from async code: on the engine's loop directly, from another
        loop (``asyncio.run`` in a thread) through a hop."""
        forward = getattr(self._handler, "forward", None)
        if forward is None:
            raise CannotRoute("this executor routes no SDK calls")
        if self._on_loop():
            result: Forwarded = await forward(self._token, self._stage, request)
            return result
        future = asyncio.run_coroutine_threadsafe(
            forward(self._token, self._stage, request), self._loop
        )
        return await asyncio.wrap_future(future)

    def note_bypass(self, what: str) -> None:
        """Traffic around the metered paths, seen in this call (from any thread)."""
        note = getattr(self._handler, "note_bypass", None)
        if note is None:
            return
        if self._on_loop():
            note(self._token, self._stage, what)
        else:
            # Queued ahead of the call's outcome, which reaches the loop after it.
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody to tell
                self._loop.call_soon_threadsafe(note, self._token, self._stage, what)
