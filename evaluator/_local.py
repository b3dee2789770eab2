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
    _clock,
    _describe,
    _error_kind,
    _finish,
)
from ._context import CallContext, Stage, _current
from ._loader import UserFunction
from ._results import ErrorInfo, Scored

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


class AsyncExecutor:
    """Awaits an ``async def`` user function on the loop, bounded and timed out per call."""

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
        self._limiter: anyio.CapacityLimiter | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._calls = 0
        self._timeouts = 0
        self._busy = 0
        self._closed = False

    async def __aenter__(self) -> AsyncExecutor:
        self._loop = asyncio.get_running_loop()
        self._limiter = anyio.CapacityLimiter(self.concurrency)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closed = True

    async def _one(self, call: Call, outcomes: list[Outcome | None], index: int) -> None:
        assert self._limiter is not None and self._loop is not None
        bridge = (
            LoopBridge(self._loop, self._handler, call.token, self.stage)
            if self._handler is not None
            else None
        )
        async with self._limiter:
            self._busy += 1
            started = _clock()
            outcome: Outcome | None = None
            try:
                with anyio.move_on_after(self.timeout) as scope:
                    outcome = await _invoke_async(self.fn, self.stage, call, bridge)
            finally:
                self._busy -= 1
                self._calls += 1
            # cancel_called, not just a missing outcome: a function that swallows the
            # cancellation and returns late has still broken its timeout.
            if outcome is None or scope.cancel_called:
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
        outcomes: list[Outcome | None] = [None] * len(calls)
        if len(calls) == 1:
            await self._one(calls[0], outcomes, 0)  # no task group needed for one call
        else:
            async with anyio.create_task_group() as tg:
                for index, call in enumerate(calls):
                    tg.start_soon(self._one, call, outcomes, index)
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


async def _invoke_async(fn: UserFunction, stage: Stage, call: Call, bridge: Any) -> Outcome:
    """Like ``_calls.invoke_async``, but a non-``Exception`` error (other than the
    cancellation that enforces the timeout) still becomes this call's outcome."""
    ctx = CallContext(call.example_id, stage, call.observation, bridge)
    token = _current.set(ctx)
    args = call.args if fn.arity == len(call.args) else call.args[: fn.arity]
    started = _clock()
    try:
        raw = await fn.fn(*args)
    except Exception as exc:
        return Outcome(
            None, ErrorInfo(_error_kind(stage, exc), _describe(exc, fn)), started, _clock()
        )
    except SystemExit as exc:
        return Outcome(
            None,
            ErrorInfo(_error_kind(stage, exc), f"`{fn.name}` called exit({exc.code!r})"),
            started,
            _clock(),
        )
    finally:
        _current.reset(token)
    try:
        return _finish(stage, call, raw, started)
    except Exception as exc:  # a return value whose inspection itself raises
        return Outcome(
            None, ErrorInfo(_error_kind(stage, exc), _describe(exc, fn)), started, _clock()
        )


class _MutableContext:
    """The context of the call a worker thread is running, updated in place per call.

    Duck-types :class:`CallContext` (the facade only reads its attributes). Each worker
    thread sets it once into its own context variable and then changes three attributes
    per call, instead of building a frozen context and entering a context manager per
    call: that alone would cost more than an exact-match metric.
    """

    __slots__ = ("example_id", "llm", "observation", "stage")

    def __init__(self, stage: Stage) -> None:
        self.example_id: Any = None
        self.stage: Stage = stage
        self.observation: Any = None
        self.llm: Any = None


class _Job:
    """One submitted batch: its calls, their outcomes, and who is running what."""

    __slots__ = (
        "calls",
        "cancelled",
        "claims",
        "done",
        "future",
        "lock",
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
        self.done = 0
        self.lock = threading.Lock()
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.running: dict[_Worker, tuple[int, int]] = {}
        self.cancelled = False
        self.timer: asyncio.TimerHandle | None = None

    def finish_one(self) -> None:
        """Count one outcome as stored (the caller holds ``lock``)."""
        self.done += 1
        if self.done == self.size:
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
        ctx = _MutableContext(pool.stage)
        _current.set(cast(CallContext, ctx))
        fn = pool.fn.fn
        arity = pool.fn.arity
        stage = pool.stage
        handler = pool.handler
        jobs = pool.jobs
        scoring = stage == "score"
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
            lock = job.lock
            while not job.cancelled:
                index = next(claims)
                if index >= size:
                    break
                call = calls[index]
                args = call.args
                if len(args) != arity:
                    args = args[:arity]
                ctx.example_id = call.example_id
                ctx.observation = call.observation
                if handler is not None:
                    ctx.llm = LoopBridge(loop, handler, call.token, stage)
                self.in_call = True
                started = _clock()
                running[self] = (index, started)
                try:
                    raw = fn(*args)
                    if not scoring:
                        outcome = Outcome(raw, None, started, _clock())
                    elif (
                        # The common valid return, (float, {"feedback": str}), checked
                        # inline; anything else takes the full validator.
                        type(raw) is tuple
                        and len(raw) == 2
                        and type(raw[0]) is float
                        and raw[0] - raw[0] == 0.0
                        and type(raw[1]) is dict
                        and len(raw[1]) == 1
                        and type(raw[1].get("feedback")) is str
                    ):
                        outcome = Outcome(
                            Scored(raw[0], {}, raw[1]["feedback"], {}), None, started, _clock()
                        )
                    else:
                        outcome = _finish(stage, call, raw, started)
                except Exception as exc:
                    outcome = Outcome(
                        None,
                        ErrorInfo(_error_kind(stage, exc), _describe(exc, pool.fn)),
                        started,
                        _clock(),
                    )
                except BaseException as exc:  # SystemExit, KeyboardInterrupt from user code
                    what = (
                        f"`{pool.fn.name}` called exit({exc.code!r})"
                        if isinstance(exc, SystemExit)
                        else f"`{pool.fn.name}` raised {type(exc).__name__}"
                    )
                    outcome = Outcome(
                        None, ErrorInfo(_error_kind(stage, exc), what), started, _clock()
                    )
                self.in_call = False
                self.calls += 1
                with lock:
                    if self.abandoned:
                        # The watchdog already gave this call its timeout outcome and a
                        # fresh thread took this one's place: retire quietly.
                        pool._retired(self)
                        return
                    del running[self]
                    outcomes[index] = outcome
                    job.done += 1
                    if job.done == size:
                        # A closed loop means nobody is waiting any more.
                        with contextlib.suppress(RuntimeError):
                            loop.call_soon_threadsafe(_resolve, job.future)


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
        with job.lock:
            for worker, (index, started) in list(job.running.items()):
                if now - started >= limit:
                    worker.abandoned = True
                    del job.running[worker]
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
                else:
                    earliest = min(earliest, started + limit)
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
