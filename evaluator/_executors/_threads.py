"""The thread and inline executors: sync user functions on threads of the engine's process.

- :class:`ThreadExecutor` runs a sync function on a bounded pool of daemon threads that
  it manages itself: a call past its timeout is *abandoned* (it gets a timeout outcome at
  once; its thread is never reused and a fresh thread takes its place), which the
  standard ``concurrent.futures`` pool cannot do.
- :class:`InlineExecutor` is a thread executor with one thread: a whole batch runs in a
  tight loop on a dedicated thread, the fastest path, with the timeout still enforced
  but no crash isolation (a segfault in the function takes the engine down).

Batches cross the thread boundary as one job (one queue put, one wake-up of the loop
when the job is done), because per-item hand-offs cost far more than cheap calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import queue
import threading
from collections.abc import Callable, Sequence
from time import perf_counter_ns
from typing import Any, ClassVar, cast

from .._aio import shielded
from .._call import _failures as failures
from .._call._calls import Call, LLMHandler, Outcome, SyncInvoker
from .._call._context import Stage
from .._call._kinds import ExecutionKind
from .._call._loader import UserFunction
from .._options import validate_count
from ._base import ExecutorBase, ExecutorStatistics, Progress, check_workers
from ._bridge import LoopBridge

__all__ = [
    "MAX_MODEL_THREADS",
    "MIN_MODEL_THREADS",
    "InlineExecutor",
    "ThreadExecutor",
    "ThreadExecutorStatistics",
    "pool_size",
]

#: Threads at most for a model-bound function, whatever its model budget: the model
#: client's in-flight cap. Threads start as the calls in flight need them, and those
#: follow the model's in-flight limit (``model_limit``), so a pool this large is only
#: filled when the model admits that many calls at once.
MAX_MODEL_THREADS = 1024
#: The calls a model-bound pool takes at once however low its model's in-flight limit
#: goes (the limit's start): the governor holds the calls past the limit, fairly between
#: tenants, and the pipeline's gates stay as wide as they were before the limit moved.
MIN_MODEL_THREADS = 64


def pool_size(workers: int | None, model_budget: int | None, concurrency: int | None) -> int:
    """How many threads a pool runs: ``workers`` if given; else, for a model-bound
    function, its model budget (calls in flight, up to :data:`MAX_MODEL_THREADS`); else
    eight per core, at most 64. Never more than ``concurrency``: no more calls than that
    are ever in flight."""
    if workers is not None:
        size = workers
    elif model_budget is not None:
        size = min(model_budget, MAX_MODEL_THREADS)
    else:
        size = min(64, (os.cpu_count() or 1) * 8)
    return size if concurrency is None else min(size, concurrency)


class ThreadExecutorStatistics(ExecutorStatistics, frozen=True, kw_only=True):
    """A thread or inline executor's snapshot: the common shape, and abandoned threads."""

    abandoned_threads: int = 0
    """Threads left running a call past its timeout (or past the close), ever."""
    abandoned_alive: int = 0
    """Of those, the ones still running now (daemons: they cannot hold up exit)."""
    cancelled_calls: int = 0
    """Calls running when their caller was cancelled, ever: their model calls stopped,
    they finish in their thread and their outcome is dropped (queued calls never start)."""


class _Job:
    """One submitted batch: its calls, their outcomes, and who is running what.

    No lock: the worker threads and the watchdog on the loop hand a running call over
    with single atomic operations (under the GIL): ``running.pop(index)`` decides who
    stores that call's outcome (keyed by the call, not the thread, so that a stale look
    at a thread that has moved on to its next call can never take that call), and
    ``next(finished)`` who resolves the future.
    """

    __slots__ = (
        "bridges",
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
        #: index -> start of each call running now (its thread: the one whose ``job`` and
        #: ``index`` are this job's and this index, see ``_Worker``).
        self.running: dict[int, int] = {}
        self.bridges: dict[int, LoopBridge] = {}  # index -> the model bridge of a running call
        self.cancelled = False
        self.timer: asyncio.TimerHandle | None = None

    def finish_one(self) -> None:
        """Count one outcome as stored; the last one wakes the submitter."""
        if next(self.finished) == self.size - 1:
            self.resolve()

    def resolve(self) -> None:
        """From any thread: every outcome is stored; wake the submitter."""
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
        #: Calls run, each counted before its outcome is placed: a submit that returns
        #: sees its calls counted (what is running now is in its job's ``running``:
        #: :meth:`ThreadExecutor.statistics` reads that).
        self.calls = 0
        #: The job and the index of the call running now, for :meth:`_bridge`.
        self.job: _Job | None = None
        self.index = 0

    def run(self) -> None:
        pool = self.pool
        # private: each call gets its own copy of the example's data (one engine, one memory)
        invoker = SyncInvoker(pool.fn, pool.stage, private=True)
        if pool.handler is not None:
            invoker.context.make_bridge = self._bridge
        invoker.enter()  # this thread's context, for good: no set/reset per call
        jobs = pool.jobs
        while True:
            job = jobs.get()
            if job is None or self.abandoned:
                return
            if not self._work(job, invoker):
                return

    def _bridge(self) -> LoopBridge:
        """The running call's model bridge, made when the call first reaches for it
        (``skynet.llm``, a routed SDK call), and kept for :meth:`ThreadExecutor.submit`
        to cancel."""
        job, index, pool = self.job, self.index, self.pool
        assert job is not None and pool.handler is not None
        token = job.calls[index].token
        bridge = job.bridges[index] = LoopBridge(job.loop, pool.handler, token, pool.stage)
        if job.cancelled:  # cancelled before it was kept: the submit's cancel missed it
            bridge.cancel()
        return bridge

    def _work(self, job: _Job, invoker: SyncInvoker, clock: Any = perf_counter_ns) -> bool:
        """Claim and run calls of ``job`` until none is left; False once abandoned.

        The loop is the engine's own cost per call of a cheap function: the call's fields
        go to :meth:`SyncInvoker.score` / :meth:`SyncInvoker.run` from here, and the
        bridge to the loop is made only for a call that asks for one (:meth:`_bridge`).

        ``clock``: bound when the engine is imported, before any user file (see
        ``evaluator._call._calls``)."""
        scoring = invoker.stage == "score"
        score, run = invoker.score, invoker.run
        calls = job.calls
        size = job.size
        last = size - 1
        running = job.running
        claims = job.claims
        finished = job.finished
        outcomes = job.outcomes
        bridges = job.bridges
        self.job = job
        while not job.cancelled:
            index = next(claims)
            if index >= size:
                break
            call: Any = calls[index]
            self.index = index
            started = clock()
            running[index] = started
            try:
                if scoring:
                    outcome = score(
                        call.example_id,
                        call.observation,
                        call.input,
                        call.output,
                        call.expected,
                        None,
                        started,
                    )
                else:
                    outcome = run(call.example_id, call.artifact, call.input, None, started)
            except BaseException as exc:  # KeyboardInterrupt and such, from user code
                outcome = invoker.failed(exc, started)
            if bridges:
                bridges.pop(index, None)
            self.calls += 1
            if running.pop(index, None) is None:
                # The watchdog already gave this call its timeout outcome and a fresh
                # thread took this one's place: retire quietly.
                self.pool._retired(self)
                return False
            outcomes[index] = outcome
            if next(finished) == last:  # the last outcome: wake the submitter
                job.resolve()
        self.job = None  # the job's calls and outcomes are the submitter's now
        return True


class ThreadExecutor(ExecutorBase):
    """A bounded pool of daemon threads for sync user functions, with per-call timeouts.

    Its size is :func:`pool_size` of ``workers``, ``model_budget`` (the calls in flight
    a model-bound function's model allows) and ``concurrency``; its parallelism is the
    model's in-flight limit now (``model_limit``) within that size, unless ``workers``
    fixed it. Threads start lazily, as
    many as the calls submitted and not returned yet: a cheap metric never needs more
    than one.
    """

    kind: ClassVar[ExecutionKind] = "thread"
    OPTIONS: ClassVar[tuple[str, ...]] = (
        "workers",
        "model_budget",
        "concurrency",
        "llm_handler",
        "model_limit",
    )

    def __init__(
        self,
        fn: UserFunction,
        stage: Stage,
        *,
        timeout: float,
        workers: int | None = None,
        model_budget: int | None = None,
        concurrency: int | None = None,
        llm_handler: LLMHandler | None = None,
        model_limit: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(fn, stage, timeout)
        # Read live: the pipeline feeds as many calls as the model admits now. Only a
        # model-bound pool (one with a model budget) follows its model, and only when
        # `workers` does not fix its size.
        self._model_limit = model_limit if workers is None and model_budget is not None else None
        self.workers = pool_size(
            check_workers(workers, self.kind),
            validate_count(model_budget, "model_budget"),
            validate_count(concurrency, "concurrency"),
        )
        self.handler = llm_handler
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: set[_Worker] = set()
        self._all: list[_Worker] = []
        self._abandoned: set[_Worker] = set()
        self._abandoned_total = 0
        self._cancelled_calls = 0
        self._numbers = itertools.count()
        self._timeouts = 0
        self._outstanding = 0  # calls of the submits not returned yet, on the loop only
        self._live: set[_Job] = set()  # the jobs of those submits
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def parallelism(self) -> int:
        limit = self._model_limit
        if limit is None:
            return self.workers
        return min(self.workers, max(MIN_MODEL_THREADS, limit()))

    async def _open(self) -> None:
        self._loop = asyncio.get_running_loop()

    def _spawn(self) -> None:
        worker = _Worker(self, next(self._numbers))
        self._threads.add(worker)
        self._all.append(worker)
        worker.start()

    def _retired(self, worker: _Worker) -> None:
        self._abandoned.discard(worker)

    async def submit(
        self, calls: Sequence[Call], progress: Progress | None = None
    ) -> list[Outcome]:
        """Run ``calls``; one outcome per call, in order. Cancel-safe. ``progress`` is
        not told: outcomes are stored by the threads, and a hand-off to the loop for
        each would cost more than the calls a thread runs (a slow submit here is one
        example: slow calls travel in chunks of one)."""
        self._check_open()
        assert self._loop is not None
        if not calls:
            return []
        job = _Job(calls, self._loop)
        # Start threads lazily, as many as the calls of every submit not returned yet
        # can use, up to the bound: sized by one submit's calls, many small submits at
        # once (one example per chunk, as a metric slow on its judge gets) shared the
        # few threads the first one started.
        self._outstanding += job.size
        self._live.add(job)
        wanted = min(self._outstanding, self.workers)
        while len(self._threads) < wanted:
            self._spawn()
        for _ in range(min(job.size, self.workers)):
            self.jobs.put(job)
        job.timer = self._loop.call_later(self.timeout, self._watch, job)
        try:
            await job.future
        except BaseException:
            # Cancelled: stop claiming calls, and stop the model calls the running ones
            # wait on. They finish on their own; the watchdog stays armed so that a hung
            # one still frees its place in the pool.
            job.cancelled = True
            self._cancelled_calls += len(job.running)
            for bridge in list(job.bridges.values()):
                bridge.cancel()
            raise
        finally:
            self._outstanding -= job.size
            if not job.running:  # else cancelled, its running calls still busy in their threads
                self._live.discard(job)
        job.timer.cancel()
        return cast(list[Outcome], job.outcomes)

    def _watch(self, job: _Job, clock: Any = perf_counter_ns) -> None:
        """On the loop: abandon the calls of ``job`` past their timeout, then re-arm."""
        if job.future.done() or (job.cancelled and not job.running) or self._state != "open":
            return
        now = clock()
        limit = int(self.timeout * 1e9)
        earliest = now + limit
        replaced = 0
        for index, started in list(job.running.items()):
            if now - started < limit:
                earliest = min(earliest, started + limit)
                continue
            if job.running.pop(index, None) is None:
                continue  # it just finished: its own outcome stands
            # Its thread: it set its job and index before publishing the call, and it
            # cannot claim another call before it pops this one (and finds it gone).
            worker = next(t for t in list(self._threads) if t.job is job and t.index == index)
            self._abandon(worker)
            self._timeouts += 1
            error = failures.timed_out(
                self.stage, self.timeout, job.calls[index].example_id, "; its thread was abandoned"
            )
            job.outcomes[index] = Outcome(None, error, started, now)
            job.finish_one()
            replaced += 1
        for _ in range(replaced):
            self._spawn()
            self.jobs.put(job)  # the rest of the batch goes on in the fresh thread
        if not job.future.done() and (job.running or not job.cancelled):
            delay = max(0.0, (earliest - clock()) / 1e9)
            job.timer = job.loop.call_later(delay, self._watch, job)

    def _abandon(self, worker: _Worker) -> None:
        worker.abandoned = True
        self._threads.discard(worker)
        self._abandoned.add(worker)
        self._abandoned_total += 1

    async def _close(self) -> None:
        threads = list(self._threads)
        for _ in threads:
            self.jobs.put(None)
        # Wait for the threads to finish their current call, at most one timeout; any
        # still running after that is abandoned (daemonic, it cannot hold up exit).
        await shielded(_join(threads, self.timeout))
        for thread in threads:
            if thread.is_alive():
                self._abandon(thread)
        self._threads.clear()
        self._live.clear()  # what still runs is in abandoned threads: not busy

    def statistics(self) -> ThreadExecutorStatistics:
        self._live = {j for j in self._live if j.running or not j.future.done()}
        return self._snapshot(
            ThreadExecutorStatistics,
            calls=sum(w.calls for w in self._all),
            timeouts=self._timeouts,
            # Calls running now (an abandoned thread's call is no longer in ``running``).
            busy=sum(len(job.running) for job in list(self._live)),
            abandoned_threads=self._abandoned_total,
            abandoned_alive=sum(1 for t in list(self._abandoned) if t.is_alive()),
            cancelled_calls=self._cancelled_calls,
        )

    def threads(self) -> list[threading.Thread]:
        """The threads this executor started that are still alive (abandoned ones too)."""
        return [t for t in [*self._threads, *self._abandoned] if t.is_alive()]


async def _join(threads: list[_Worker], timeout: float, clock: Any = perf_counter_ns) -> None:
    """Wait until ``threads`` have ended, at most ``timeout`` seconds (polling: a thread
    offers nothing to await)."""
    deadline = clock() + int(timeout * 1e9)
    delay = 0.0005
    while any(t.is_alive() for t in threads) and clock() < deadline:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)


class InlineExecutor(ThreadExecutor):
    """One dedicated thread running whole batches in a tight loop: fastest, no isolation.

    The timeout still holds: a call past it is abandoned with its thread, and a fresh
    thread carries on with the rest of the batch. A crash of the function (a segfault,
    ``os._exit``) takes the engine's process with it.
    """

    kind: ClassVar[ExecutionKind] = "inline"
    OPTIONS: ClassVar[tuple[str, ...]] = ("llm_handler",)

    def __init__(
        self,
        fn: UserFunction,
        stage: Stage,
        *,
        timeout: float,
        llm_handler: LLMHandler | None = None,
    ) -> None:
        super().__init__(fn, stage, timeout=timeout, workers=1, llm_handler=llm_handler)
