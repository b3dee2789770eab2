"""Executors that run user calls in the engine's own process: async, thread and inline.

- :class:`AsyncExecutor` awaits an ``async def`` function on the event loop, at most
  ``concurrency`` calls at once, each cancelled at its timeout.
- :class:`ThreadExecutor` runs a sync function on a bounded pool of daemon threads that it
  manages itself: a call past its timeout is *abandoned* (it gets a timeout outcome at
  once; its thread is never reused and a fresh thread takes its place), which the
  standard ``concurrent.futures`` pool cannot do.
- :class:`InlineExecutor` is a thread executor with one thread: a whole batch runs in a
  tight loop on a dedicated thread, the fastest path, with the timeout still enforced
  but no crash isolation (a segfault in the function takes the engine down).

Every ``submit`` returns exactly one :class:`Outcome` per call, in order, whatever the
user function does. Batches cross the thread boundary as one job (one queue put, one
wake-up of the loop when the job is done), because per-item hand-offs cost far more
than cheap calls themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import queue
import threading
from collections.abc import Sequence
from typing import Any, cast

import anyio
import msgspec

from ._calls import (
    Call,
    LLMHandler,
    LoopBridge,
    Outcome,
    SyncInvoker,
    _clock,
    _error_kind,
    invoke_async,
)
from ._context import Stage
from ._loader import UserFunction
from ._results import ErrorInfo

__all__ = [
    "AsyncExecutor",
    "ExecutorStatistics",
    "InlineExecutor",
    "ThreadExecutor",
    "timeout_error",
]


class ExecutorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one executor: what ran, what timed out, what was abandoned."""

    kind: str
    stage: str
    workers: int
    calls: int = 0
    timeouts: int = 0
    busy: int = 0
    abandoned_threads: int = 0
    abandoned_alive: int = 0


def timeout_error(stage: Stage, timeout: float, example_id: Any, how: str = "") -> ErrorInfo:
    """The error of a call that did not return within its timeout."""
    kind = "program_timeout" if stage == "run" else "metric_timeout"
    name = "`run`" if stage == "run" else "`score`"
    option = "program_timeout" if stage == "run" else "timeout"
    return ErrorInfo(
        kind,
        f"{name} did not return within the {timeout:g} s timeout on example {example_id!r}"
        f"{how}; make it faster or raise `{option}`",
    )


#: A call past its timeout is cancelled again this often until it ends: a coroutine that
#: catches the cancellation and awaits on cannot outlive its timeout by more than this.
RECANCEL_S = 0.01


class _CallTimeout:
    """The timeout of one async call in the current task: ``asyncio.timeout``, level-
    triggered (cancelled again every ``RECANCEL_S`` while the call goes on, as anyio's
    cancel scopes do), at a fraction of an anyio cancel scope's cost per call.

    ``expired`` tells whether the call broke its timeout, even when it swallowed the
    cancellation and returned; on exit a cancellation of ours is absorbed, while one of
    the caller's (the task was cancelled more times than we cancelled it) propagates.
    """

    __slots__ = ("_baseline", "_cancels", "_delay", "_handle", "_loop", "_task", "expired")

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self._loop = loop
        self._delay = delay
        task = asyncio.current_task(loop)
        assert task is not None
        self._task = task
        self._cancels = 0
        self._baseline = 0
        self._handle: asyncio.TimerHandle | None = None
        self.expired = False

    def __enter__(self) -> _CallTimeout:
        self._baseline = self._task.cancelling()
        self._handle = self._loop.call_later(self._delay, self._fire)
        return self

    def _fire(self) -> None:
        self.expired = True
        self._cancels += 1
        self._task.cancel()
        self._handle = self._loop.call_later(RECANCEL_S, self._fire)

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> bool:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self._cancels:
            return False
        remaining = 0
        for _ in range(self._cancels):
            remaining = self._task.uncancel()
        # Ours alone: absorb it (the caller sees ``expired``). Any other: let it through.
        return exc_type is asyncio.CancelledError and remaining <= self._baseline


class AsyncExecutor:
    """Awaits an ``async def`` user function on the loop, bounded and timed out per call.

    Plain asyncio primitives (a semaphore, a task group, a timer per call): an anyio
    task group and cancel scope per call cost more than a cheap async metric.
    """

    def __init__(
        self,
        fn: UserFunction,
        stage: Stage,
        *,
        timeout: float,
        concurrency: int = 256,
        llm_handler: LLMHandler | None = None,
    ) -> None:
        self.fn = fn
        self.stage: Stage = stage
        self.timeout = timeout
        self.concurrency = concurrency
        self._handler = llm_handler
        self._limiter: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._calls = 0
        self._timeouts = 0
        self._busy = 0
        self._closed = False

    async def __aenter__(self) -> AsyncExecutor:
        self._loop = asyncio.get_running_loop()
        self._limiter = asyncio.Semaphore(self.concurrency)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closed = True

    async def _one(self, call: Call, outcomes: list[Outcome | None], index: int) -> None:
        limiter, loop = self._limiter, self._loop
        assert limiter is not None and loop is not None
        bridge = (
            LoopBridge(loop, self._handler, call.token, self.stage)
            if self._handler is not None
            else None
        )
        async with limiter:
            self._busy += 1
            started = _clock()
            outcome: Outcome | None = None
            try:
                with _CallTimeout(loop, self.timeout) as timer:
                    outcome = await invoke_async(self.fn, self.stage, call, bridge)
            finally:
                self._busy -= 1
                self._calls += 1
            # ``expired``, not just a missing outcome: a function that swallows the
            # cancellation and returns late has still broken its timeout.
            if outcome is None or timer.expired:
                self._timeouts += 1
                outcome = Outcome(
                    None,
                    timeout_error(self.stage, self.timeout, call.example_id),
                    started,
                    _clock(),
                )
        outcomes[index] = outcome

    async def submit(self, calls: Sequence[Call]) -> list[Outcome]:
        if self._limiter is None or self._closed:
            raise RuntimeError("the executor is not open; use `async with` first")
        n = len(calls)
        outcomes: list[Outcome | None] = [None] * n
        if n == 1:
            await self._one(calls[0], outcomes, 0)  # no task group needed for one call
        elif n:
            # The first call runs in this task, the others in tasks of their own.
            async with asyncio.TaskGroup() as tg:
                for index in range(1, n):
                    tg.create_task(self._one(calls[index], outcomes, index))
                await self._one(calls[0], outcomes, 0)
        return cast(list[Outcome], outcomes)

    def statistics(self) -> ExecutorStatistics:
        return ExecutorStatistics(
            kind="async",
            stage=self.stage,
            workers=self.concurrency,
            calls=self._calls,
            timeouts=self._timeouts,
            busy=self._busy,
        )


class _Job:
    """One submitted batch: its calls, their outcomes, and who is running what.

    No lock: the worker threads and the watchdog on the loop hand a running call over
    with single atomic operations (under the GIL): ``running.pop(index)`` decides who
    stores that call's outcome (keyed by the call, not the thread, so that a stale look
    at a thread that has moved on to its next call can never take that call), and
    ``next(finished)`` who resolves the future.
    """

    __slots__ = (
        "calls",
        "cancelled",
        "claims",
        "finished",
        "future",
        "loop",
        "outcomes",
        "running",
        "size",
        "timer",
    )

    def __init__(self, calls: Sequence[Call], loop: asyncio.AbstractEventLoop) -> None:
        self.calls = calls
        self.size = len(calls)
        self.outcomes: list[Outcome | None] = [None] * self.size
        self.claims = itertools.count()
        self.finished = itertools.count()
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.running: dict[int, tuple[_Worker, int]] = {}  # index -> thread, start
        self.cancelled = False
        self.timer: asyncio.TimerHandle | None = None

    def finish_one(self) -> None:
        """Count one outcome as stored; the last one wakes the submitter."""
        if next(self.finished) == self.size - 1:
            # A closed loop means nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(_resolve, self.future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Worker(threading.Thread):
    """A daemon thread that takes jobs and claims their calls one at a time."""

    def __init__(self, pool: ThreadExecutor, number: int) -> None:
        super().__init__(name=f"skynet-{pool.kind}-{pool.stage}-{number}", daemon=True)
        self.pool = pool
        self.abandoned = False
        self.calls = 0
        self.in_call = False

    def run(self) -> None:
        pool = self.pool
        invoker = SyncInvoker(pool.fn, pool.stage)
        invoker.enter()  # this thread's context, for good: no set/reset per call
        run = invoker.run
        stage = pool.stage
        handler = pool.handler
        jobs = pool.jobs
        clock = _clock
        while True:
            job = jobs.get()
            if job is None or self.abandoned:
                return
            calls = job.calls
            size = job.size
            loop = job.loop
            running = job.running
            claims = job.claims
            outcomes = job.outcomes
            while not job.cancelled:
                index = next(claims)
                if index >= size:
                    break
                call = calls[index]
                bridge = None if handler is None else LoopBridge(loop, handler, call.token, stage)
                self.in_call = True
                started = clock()
                running[index] = (self, started)
                try:
                    outcome = run(
                        call.example_id,
                        call.observation,
                        call.first,
                        call.second,
                        call.third,
                        bridge,
                        started,
                    )
                except BaseException as exc:  # KeyboardInterrupt and such, from user code
                    outcome = Outcome(
                        None,
                        ErrorInfo(
                            _error_kind(stage, exc),
                            f"`{pool.fn.name}` raised {type(exc).__name__}",
                        ),
                        started,
                        clock(),
                    )
                self.in_call = False
                self.calls += 1
                if running.pop(index, None) is None:
                    # The watchdog already gave this call its timeout outcome and a
                    # fresh thread took this one's place: retire quietly.
                    pool._retired(self)
                    return
                outcomes[index] = outcome
                job.finish_one()


class ThreadExecutor:
    """A bounded pool of daemon threads for sync user functions, with per-call timeouts."""

    kind = "thread"

    def __init__(
        self,
        fn: UserFunction,
        stage: Stage,
        *,
        timeout: float,
        workers: int | None = None,
        llm_handler: LLMHandler | None = None,
    ) -> None:
        self.fn = fn
        self.stage: Stage = stage
        self.timeout = timeout
        self.workers = workers if workers is not None else min(64, (os.cpu_count() or 1) * 8)
        self.handler = llm_handler
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: set[_Worker] = set()
        self._all: list[_Worker] = []
        self._abandoned: set[_Worker] = set()
        self._abandoned_total = 0
        self._numbers = itertools.count()
        self._timeouts = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = "new"

    async def __aenter__(self) -> ThreadExecutor:
        if self._state != "new":
            raise RuntimeError("an executor cannot be reopened; create a new one")
        self._loop = asyncio.get_running_loop()
        self._state = "open"
        return self

    def _spawn(self) -> None:
        worker = _Worker(self, next(self._numbers))
        self._threads.add(worker)
        self._all.append(worker)
        worker.start()

    def _retired(self, worker: _Worker) -> None:
        self._abandoned.discard(worker)

    async def submit(self, calls: Sequence[Call]) -> list[Outcome]:
        if self._state != "open" or self._loop is None:
            raise RuntimeError("the executor is not open; use `async with` first")
        if not calls:
            return []
        job = _Job(calls, self._loop)
        # Start threads lazily, up to the bound: a cheap metric never needs more than one.
        wanted = min(len(calls), self.workers)
        while len(self._threads) < wanted:
            self._spawn()
        for _ in range(wanted):
            self.jobs.put(job)
        job.timer = self._loop.call_later(self.timeout, self._watch, job)
        try:
            await job.future
        except BaseException:
            # Cancelled: stop claiming calls. The ones running finish on their own; the
            # watchdog stays armed so that a hung one still frees its place in the pool.
            job.cancelled = True
            raise
        job.timer.cancel()
        return cast(list[Outcome], job.outcomes)

    def _watch(self, job: _Job) -> None:
        """On the loop: abandon the calls of ``job`` past their timeout, then re-arm."""
        if job.future.done() or (job.cancelled and not job.running) or self._state != "open":
            return
        now = _clock()
        limit = int(self.timeout * 1e9)
        earliest = now + limit
        replaced = 0
        for index, (worker, started) in list(job.running.items()):
            if now - started < limit:
                earliest = min(earliest, started + limit)
                continue
            if job.running.pop(index, None) is None:
                continue  # it just finished: its own outcome stands
            worker.abandoned = True
            self._threads.discard(worker)
            self._abandoned.add(worker)
            self._abandoned_total += 1
            self._timeouts += 1
            job.outcomes[index] = Outcome(
                None,
                timeout_error(
                    self.stage,
                    self.timeout,
                    job.calls[index].example_id,
                    "; its thread was abandoned",
                ),
                started,
                now,
            )
            job.finish_one()
            replaced += 1
        for _ in range(replaced):
            self._spawn()
            self.jobs.put(job)  # the rest of the batch goes on in the fresh thread
        if not job.future.done() and (job.running or not job.cancelled):
            delay = max(0.0, (earliest - _clock()) / 1e9)
            job.timer = job.loop.call_later(delay, self._watch, job)

    async def __aexit__(self, *exc_info: object) -> None:
        if self._state != "open":
            return
        self._state = "closed"
        threads = list(self._threads)
        for _ in threads:
            self.jobs.put(None)
        # Wait for the threads to finish their current call, at most one timeout; any
        # still running after that is abandoned (daemonic, it cannot hold up exit).
        with anyio.CancelScope(shield=True):
            deadline = _clock() + int(self.timeout * 1e9)
            delay = 0.0005
            while any(t.is_alive() for t in threads) and _clock() < deadline:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.02)
        for thread in threads:
            if thread.is_alive():
                thread.abandoned = True
                self._abandoned.add(thread)
                self._abandoned_total += 1
        self._threads.clear()

    def statistics(self) -> ExecutorStatistics:
        return ExecutorStatistics(
            kind=self.kind,
            stage=self.stage,
            workers=self.workers,
            calls=sum(w.calls for w in self._all),
            timeouts=self._timeouts,
            busy=sum(1 for t in list(self._threads) if t.in_call),
            abandoned_threads=self._abandoned_total,
            abandoned_alive=sum(1 for t in list(self._abandoned) if t.is_alive()),
        )

    def threads(self) -> list[threading.Thread]:
        """The threads this executor started that are still alive (abandoned ones too)."""
        return [t for t in [*self._threads, *self._abandoned] if t.is_alive()]


class InlineExecutor(ThreadExecutor):
    """One dedicated thread running whole batches in a tight loop: fastest, no isolation.

    The timeout still holds: a call past it is abandoned with its thread, and a fresh
    thread carries on with the rest of the batch. A crash of the function (a segfault,
    ``os._exit``) takes the engine's process with it.
    """

    kind = "inline"

    def __init__(
        self,
        fn: UserFunction,
        stage: Stage,
        *,
        timeout: float,
        llm_handler: LLMHandler | None = None,
    ) -> None:
        super().__init__(fn, stage, timeout=timeout, workers=1, llm_handler=llm_handler)
