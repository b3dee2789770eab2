"""The engine's model clients on an event loop of their own, for synchronous hosts.

DSPy calls a metric from its worker threads (``dspy.Evaluate(num_threads=16)``), where no
loop runs and no ``Evaluator`` is open. Its ``skynet.llm`` calls still have to go through
*one* engine: one rate governor for every thread, retries, metering and prices. So the
adapter owns a :class:`BackgroundEngine`: a daemon thread running an event loop that holds
a :class:`~evaluator._models.ModelRouter` (and, for tests, a local simulator serving its
models). Every thread's call hops onto that loop and blocks only its own thread.

Lifetime: started on the first call (or ``start()``), from any thread, once; closed by
``close()`` (idempotent), which cancels the calls in flight (their callers get a clear
error), closes the clients and the simulator, stops the loop and joins the thread within
a bound. The owner also arranges for ``close()`` at interpreter exit; the thread is a
daemon, so even a close that overruns its bound cannot hold the interpreter.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Literal

from .._call._results import Usage
from .._exceptions import EngineClosedError
from .._lm import served
from .._models import Meter, ModelRouter, Models

if TYPE_CHECKING:
    from llm_client import SimulatorConfig

__all__ = ["BackgroundEngine"]

logger = logging.getLogger("evaluator.engine")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when it is installed (as the command line uses), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


class BackgroundEngine:
    """A metric's ``skynet.llm`` calls served by one model router on a loop in a thread.

    ``models`` says which model serves the metric (``judge``: the metric model, else the
    reflection model); ``options`` are request options every call carries unless it sets
    them itself; with ``simulator`` the models are served by a local simulator started on
    the engine's loop. :meth:`call` (blocking) and :meth:`acall` (from another loop) send
    one call, metered under the caller's ``token``; :meth:`settle` closes a token's meter
    into the running :meth:`usage`.
    """

    def __init__(
        self,
        models: Models,
        *,
        simulator: SimulatorConfig | None = None,
        options: Mapping[str, Any] | None = None,
        name: str = "skynet-engine",
    ) -> None:
        self.models = models
        self.simulator = simulator
        self.options = dict(options or {})
        self.name = name
        self._lock = threading.Lock()  # guards _state and the scheduling of calls
        self._state: Literal["new", "starting", "open", "failed", "closed"] = "new"
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._router: ModelRouter | None = None
        self._served: Models | None = None
        self._calls: set[asyncio.Task[str]] = set()  # touched on the loop only
        self._totals_lock = threading.Lock()
        self._total = Meter()

    # -- lifetime -------------------------------------------------------------------------

    @property
    def thread(self) -> threading.Thread | None:
        """The loop's thread once started (alive until :meth:`close` returns)."""
        return self._thread

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    @property
    def served_models(self) -> Models | None:
        """The models as the engine calls them (pointed at the simulator, if any)."""
        return self._served

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    @property
    def in_flight(self) -> int:
        """Model calls on the loop right now (sent, not yet answered)."""
        return len(self._calls)

    def start(self) -> None:
        """Start the loop and open the clients (once, from any thread); raise what failed."""
        with self._lock:
            if self._state == "new":
                self._state = "starting"
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            state = self._state
        if state == "closed":
            raise self._closed_error()
        self._ready.wait()
        if self._failure is not None:
            raise EngineClosedError(
                f"the model engine could not start: {type(self._failure).__name__}: {self._failure}"
            ) from self._failure

    def close(self, timeout: float = 10.0) -> None:
        """Cancel the calls in flight, close the clients, stop the loop, join the thread
        (at most ``timeout`` seconds; it is a daemon either way). Idempotent."""
        with self._lock:
            state, self._state = self._state, "closed"
        if state in ("new", "closed"):
            return
        self._ready.wait(timeout)
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already stopped
                loop.call_soon_threadsafe(stop.set)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                logger.warning(
                    "the model engine %r did not stop within %g s; its daemon thread is left "
                    "to end with the interpreter",
                    self.name,
                    timeout,
                )

    def _run(self) -> None:
        try:
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                runner.run(self._serve())
        except BaseException as exc:  # recorded for the callers of start()
            if not self._ready.is_set():
                self._failure = exc
                with self._lock:
                    if self._state == "starting":
                        self._state = "failed"
            else:
                logger.exception("the model engine %r stopped with an error", self.name)
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            self._served = await stack.enter_async_context(served(self.models, self.simulator))
            self._router = await stack.enter_async_context(ModelRouter(self._served))
            with self._lock:
                opened = self._state == "starting"
                if opened:
                    self._state = "open"
            self._ready.set()
            if opened:  # else close() came first and is waiting for the stop below
                await self._stop.wait()
            calls = list(self._calls)
            for task in calls:
                task.cancel()
            await asyncio.gather(*calls, return_exceptions=True)

    # -- calls ----------------------------------------------------------------------------

    def _closed_error(self) -> EngineClosedError:
        return EngineClosedError(
            f"the model engine {self.name!r} is closed (by close(), the end of its `with` "
            "block, or interpreter exit): build a new metric to call the model again"
        )

    def _schedule(
        self, token: int, instruction: str, input: str | None, options: dict[str, Any]
    ) -> concurrent.futures.Future[str]:
        if self._state != "open":
            self.start()
        loop = self._loop
        assert loop is not None
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError("a model call cannot block the model engine's own loop")
        # Scheduled under the lock that close() takes to change the state: a call is either
        # refused here or queued on the loop before the stop, which then cancels it.
        with self._lock:
            if self._state != "open":
                raise self._closed_error()
            return asyncio.run_coroutine_threadsafe(
                self._one(token, instruction, input, options), loop
            )

    def call(self, token: int, instruction: str, input: str | None, options: dict[str, Any]) -> str:
        """Send one call from a thread and wait for the reply (blocks this thread only)."""
        future = self._schedule(token, instruction, input, options)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise self._closed_error() from None

    async def acall(
        self, token: int, instruction: str, input: str | None, options: dict[str, Any]
    ) -> str:
        """Send one call from another event loop and await the reply."""
        if self._state != "open":
            await asyncio.to_thread(self.start)
        future = self._schedule(token, instruction, input, options)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if future.cancelled() and (task is None or task.cancelling() == 0):
                raise self._closed_error() from None  # the engine closed, not the caller
            raise

    def _one(
        self, token: int, instruction: str, input: str | None, options: dict[str, Any]
    ) -> Coroutine[Any, Any, str]:
        if self.options:
            options = {**self.options, **options}
        return self._tracked(token, instruction, input, options)

    async def _tracked(
        self, token: int, instruction: str, input: str | None, options: dict[str, Any]
    ) -> str:
        task = asyncio.current_task()
        assert task is not None and self._router is not None
        self._calls.add(task)
        try:
            return await self._router.handler(token, "score", instruction, input, options)
        finally:
            self._calls.discard(task)

    # -- usage ----------------------------------------------------------------------------

    def settle(self, token: int) -> Usage | None:
        """Close the meter of ``token`` (one metric call) into the running total; its usage,
        or None when it made no model call."""
        router = self._router
        meter = router.judge_meters.pop(token, None) if router is not None else None
        if meter is None:
            return None
        with self._totals_lock:
            self._total.merge(meter)
        return meter.usage()

    def usage(self) -> Usage:
        """The model usage and cost of every settled call so far."""
        with self._totals_lock:
            return self._total.usage()
