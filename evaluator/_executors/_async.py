"""The async executor: ``async def`` user functions awaited on the event loop.

At most ``concurrency`` calls run at once (a semaphore). A submit starts one worker task,
which claims calls one at a time, and another each time a call suspends, up to that
bound: cheap calls that never suspend run one after another in one task, calls that wait
run side by side, and a submit of thousands neither creates thousands of tasks waiting
for a slot (cancelling them stalled the loop) nor pays a task per call. The submitting
task only waits: a call that will not end can be given up without giving up its caller.

What async user code can do to the loop, and what this executor does about it:

- **Raise anything.** ``CancelledError``, ``KeyboardInterrupt``, ``GeneratorExit``,
  ``SystemExit`` or the user's own ``BaseException`` is that example's error
  (``evaluator._call._calls.invoke_async``). Only a cancellation *requested* of the worker task
  (our timeout, or the caller being cancelled) is a cancellation.
- **Run past its timeout.** The call's task is cancelled at the timeout, and again every
  ``RECANCEL_S``. A call still running ``ABANDON_AFTER_S`` after its first cancellation
  (it swallows them) is *abandoned*: its example gets its timeout at once, its slot is
  freed, a fresh worker task carries on with the submit, and the abandoned one is still
  cancelled now and then; at close its coroutine is closed and never resumed again.
- **Block the loop** (``time.sleep``, a sync HTTP call, CPU work): nothing can interrupt
  a call that holds the loop. Every step of a call is timed, so a call whose own time
  exceeds its timeout gets ``metric_timeout`` (``program_timeout``) when it gives the
  loop back, saying that it blocked the loop and where (:class:`_LoopWatch`, a thread
  that samples the loop thread's stack while a call holds it); time the loop was held by
  *other* calls is not counted against a call, so one blocking call does not time out
  every call that waited behind it. A call that never gives the loop back is logged
  (``evaluator`` logger) with its place; it cannot be stopped in-process.
"""

from __future__ import annotations

import asyncio
import linecache
import logging
import sys
import threading
from collections.abc import Sequence
from functools import partial
from time import perf_counter_ns
from typing import Any, ClassVar, cast

from .._aio import shielded
from .._call import _failures as failures
from .._call._calls import LONG_STEP_NS, Call, LLMHandler, LoopTime, Outcome, Steps, invoke_async
from .._call._context import Stage
from .._call._kinds import ExecutionKind
from .._call._loader import UserFunction
from .._call._results import ErrorInfo
from .._options import validate_count
from ._base import ExecutorBase, ExecutorStatistics, Progress
from ._bridge import LoopBridge

__all__ = ["ASYNC_CONCURRENCY", "AsyncExecutor", "AsyncExecutorStatistics"]

log = logging.getLogger("evaluator")

#: Default bound of concurrent calls on the loop.
ASYNC_CONCURRENCY = 256

#: A worker that has not let the loop run for this long (its calls never suspend: a
#: cheap async metric) yields before its next call.
YIELD_NS = 2_000_000

#: A call past its timeout is cancelled again this often until it ends (level-triggered,
#: as anyio's cancel scopes are).
RECANCEL_S = 0.01
#: A call still running this long after its first cancellation is abandoned.
ABANDON_AFTER_S = 0.1
#: An abandoned call is still cancelled this often, until it ends or the executor closes.
ABANDONED_RECANCEL_S = 0.1
#: How often the loop's watcher looks at the loop while calls run.
WATCH_PERIOD_S = 0.02
#: The watcher logs a call that has held the loop this long past its timeout.
HELD_WARNING_NS = 1_000_000_000

#: Coroutines that ignored being closed (they await in a ``finally`` after
#: ``GeneratorExit``): never resumed again, kept here so that their finalizer does not
#: run them once more at an arbitrary point.
_UNSTOPPABLE: list[Any] = []


class AsyncExecutorStatistics(ExecutorStatistics, frozen=True, kw_only=True):
    """An async executor's snapshot: the common shape, abandoned calls, loop blocks."""

    abandoned_tasks: int = 0
    """Calls given up after ignoring their cancellation past their timeout, ever."""
    abandoned_alive: int = 0
    """Of those, the ones still running now."""
    loop_blocks: int = 0
    """Calls that held the event loop for more than 50 ms at a time (blocking code)."""


class _Job:
    """One submit: its calls, their outcomes, and the worker tasks running them."""

    __slots__ = (
        "calls",
        "cancelled",
        "future",
        "left",
        "next",
        "outcomes",
        "progress",
        "runners",
        "running",
    )

    def __init__(
        self,
        calls: Sequence[Call],
        loop: asyncio.AbstractEventLoop,
        progress: Progress | None = None,
    ) -> None:
        self.calls = calls
        self.progress = progress
        self.outcomes: list[Outcome | None] = [None] * len(calls)
        self.left = len(calls)
        self.next = 0  # the next call to claim
        self.running = 0  # worker tasks claiming calls (not abandoned, not done)
        self.future: asyncio.Future[None] = loop.create_future()
        self.runners: list[_Runner] = []
        self.cancelled = False

    def store(self, index: int, outcome: Outcome) -> None:
        """The outcome of call ``index``; the first one stored stands."""
        if self.outcomes[index] is not None:
            return
        self.outcomes[index] = outcome
        self.left -= 1
        if not self.left:
            if not self.future.done():
                self.future.set_result(None)
        elif self.progress is not None and not self.cancelled:
            self.progress(1)


class _Runner:
    """One worker task of a submit, and the timeout of the call it runs."""

    __slots__ = (
        "abandoned",
        "baseline",
        "cancels",
        "deadline_ns",
        "executor",
        "expired_ns",
        "forgiven_ns",
        "handle",
        "index",
        "job",
        "slot",
        "stalled_at_start",
        "started",
        "steps",
        "task",
    )

    def __init__(self, executor: AsyncExecutor, job: _Job) -> None:
        self.executor = executor
        self.job = job
        self.task: asyncio.Task[None] | None = None
        self.index = -1
        self.started = 0
        self.steps: Steps | None = None
        self.handle: asyncio.TimerHandle | None = None
        self.deadline_ns = 0
        self.cancels = 0
        self.baseline = 0
        self.expired_ns = 0
        self.forgiven_ns = 0
        self.stalled_at_start = 0
        self.abandoned = False
        self.slot = False  # holds one of the executor's concurrency slots

    def grow(self) -> None:
        """The call suspended: let another worker task take the next call."""
        self.executor._grow(self.job)

    def begin(self, index: int, steps: Steps, clock: Any = perf_counter_ns) -> None:
        """Call ``index`` starts now: arm its timeout."""
        ex = self.executor
        task = self.task
        assert task is not None and ex._loop is not None
        self.index = index
        self.steps = steps
        self.cancels = 0
        self.expired_ns = 0
        self.forgiven_ns = 0
        self.baseline = task.cancelling()
        self.stalled_at_start = ex._looptime.stalled_ns
        self.started = clock()
        self.deadline_ns = self.started + ex._timeout_ns
        self.handle = ex._loop.call_later(ex.timeout, self.fire)

    def stolen_ns(self) -> int:
        """The time other calls held the loop while this call ran."""
        steps = self.steps
        assert steps is not None
        return (self.executor._looptime.stalled_ns - self.stalled_at_start) - steps.blocked_ns

    def fire(self, clock: Any = perf_counter_ns) -> None:
        """On the loop: the deadline passed (or a re-cancellation is due)."""
        ex = self.executor
        loop = ex._loop
        task = self.task
        assert loop is not None and task is not None
        now = clock()
        if not self.expired_ns:
            # Time other calls held the loop is not this call's: move the deadline.
            stolen = self.stolen_ns()
            if stolen > self.forgiven_ns:
                self.deadline_ns += stolen - self.forgiven_ns
                self.forgiven_ns = stolen
            if self.deadline_ns > now:
                self.handle = loop.call_later((self.deadline_ns - now) / 1e9, self.fire)
                return
            self.expired_ns = now
        elif not self.abandoned and now - self.expired_ns >= ABANDON_AFTER_S * 1e9:
            ex._abandon(self)
        self.cancels += 1
        task.cancel()
        delay = ABANDONED_RECANCEL_S if self.abandoned else RECANCEL_S
        self.handle = loop.call_later(delay, self.fire)

    def end(self) -> bool:
        """The call ended: disarm; True when the task was also cancelled by someone else
        (the caller) meanwhile."""
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        task = self.task
        assert task is not None
        remaining = task.cancelling()
        for _ in range(self.cancels):
            remaining = task.uncancel()
        self.cancels = 0
        return remaining > self.baseline

    def release(self) -> None:
        """Give back the concurrency slot, once."""
        if self.slot:
            self.slot = False
            limiter = self.executor._limiter
            assert limiter is not None
            limiter.release()


class AsyncExecutor(ExecutorBase):
    """Awaits an ``async def`` user function on the loop, bounded and timed out per call.

    At most ``concurrency`` calls at once; without it, ``ASYNC_CONCURRENCY``, or the model
    budget of a model-bound function (``model_budget``) when that is larger.
    """

    kind: ClassVar[ExecutionKind] = "async"
    OPTIONS: ClassVar[tuple[str, ...]] = ("concurrency", "model_budget", "llm_handler")

    def __init__(
        self,
        fn: UserFunction,
        stage: Stage,
        *,
        timeout: float,
        concurrency: int | None = None,
        model_budget: int | None = None,
        llm_handler: LLMHandler | None = None,
    ) -> None:
        super().__init__(fn, stage, timeout)
        self._timeout_ns = int(self.timeout * 1e9)
        self.concurrency = validate_count(concurrency, "concurrency") or max(
            ASYNC_CONCURRENCY, validate_count(model_budget, "model_budget") or 0
        )
        self._handler = llm_handler
        self._limiter: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._looptime = LoopTime()
        self._watch: _LoopWatch | None = None
        self._abandoned: set[_Runner] = set()
        self._abandoned_total = 0
        self._blocks = 0
        self._calls = 0
        self._timeouts = 0
        self._busy = 0

    @property
    def parallelism(self) -> int:
        return self.concurrency

    async def _open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._limiter = asyncio.Semaphore(self.concurrency)
        self._watch = _LoopWatch(self, self._loop)

    async def _close(self) -> None:
        # Every submit is awaited by its caller: only abandoned calls can be left.
        try:
            await shielded(self._stop_abandoned())
        finally:
            if self._watch is not None:
                self._watch.stop()

    # -- running calls ----------------------------------------------------------------

    def _start(self, job: _Job) -> None:
        """A worker task for ``job``."""
        assert self._loop is not None
        runner = _Runner(self, job)
        job.runners.append(runner)
        job.running += 1
        runner.task = self._loop.create_task(self._work(runner))
        runner.task.add_done_callback(partial(_ended, runner))

    def _grow(self, job: _Job) -> None:
        """A call of ``job`` suspended: another worker task takes the next call, up to
        the bound. Calls that never suspend (a cheap metric) run one after another in
        one task, at no cost of tasks; calls that wait run side by side."""
        if (
            not job.cancelled
            and job.next < len(job.calls)
            and job.running < self.concurrency
            and self._state == "open"
        ):
            self._start(job)

    async def _work(self, runner: _Runner, clock: Any = perf_counter_ns) -> None:
        """Run calls of ``runner``'s submit, claimed one at a time, each in a slot."""
        job = runner.job
        limiter = self._limiter
        assert limiter is not None
        calls = len(job.calls)
        try:
            since = clock()
            while job.next < calls and not job.cancelled:
                index = job.next
                job.next += 1
                await limiter.acquire()
                runner.slot = True
                try:
                    outcome = await self._one(runner, index)
                finally:
                    runner.release()
                if outcome is None:  # abandoned: its timeout is stored, this task retires
                    return
                job.store(index, outcome)
                if clock() - since > YIELD_NS:
                    # Calls that never suspend would otherwise hold the loop for a batch.
                    await asyncio.sleep(0)
                    since = clock()
        finally:
            if runner.abandoned:
                self._abandoned.discard(runner)
            else:
                job.running -= 1

    async def _one(
        self, runner: _Runner, index: int, clock: Any = perf_counter_ns
    ) -> Outcome | None:
        """One call, in a slot ``runner`` holds; None once it was abandoned."""
        loop = self._loop
        assert loop is not None
        call = runner.job.calls[index]
        bridge = (
            LoopBridge(loop, self._handler, call.token, self.stage)
            if self._handler is not None
            else None
        )
        steps = Steps(self._looptime, call.example_id)
        steps.on_suspend = runner.grow
        runner.begin(index, steps)
        self._busy += 1
        outcome: Outcome | None = None
        try:
            outcome = await invoke_async(self.fn, self.stage, call, bridge, steps)
        except asyncio.CancelledError:
            if not (runner.expired_ns or runner.abandoned):
                runner.end()
                raise  # not ours: the caller is cancelled
        finally:
            self._busy -= 1
            self._calls += 1
            if steps.blocked_ns:
                self._blocks += 1
        if runner.end():
            raise asyncio.CancelledError  # the caller was cancelled too: that wins
        if runner.abandoned:
            return None
        elapsed = clock() - runner.started
        if (
            outcome is None
            or runner.expired_ns
            or elapsed - max(0, runner.stolen_ns()) > self._timeout_ns
        ):
            self._timeouts += 1
            return Outcome(None, self._timed_out(call.example_id, steps), runner.started, clock())
        return outcome

    def _timed_out(self, example_id: Any, steps: Steps, how: str = "") -> ErrorInfo:
        """The timeout of a call: blamed on blocking the loop when it held the loop for at
        least half its timeout."""
        if steps.blocked_ns * 2 >= self._timeout_ns:
            return failures.blocked_loop(
                self.fn,
                self.stage,
                self.timeout,
                example_id,
                steps.longest_ns / 1e9,
                steps.blocked_at,
            )
        return failures.timed_out(self.stage, self.timeout, example_id, how)

    def _abandon(self, runner: _Runner, clock: Any = perf_counter_ns) -> None:
        """On the loop: give up the call ``runner`` runs (it ignores its cancellation)."""
        runner.abandoned = True
        runner.job.running -= 1
        self._abandoned.add(runner)
        self._abandoned_total += 1
        self._timeouts += 1
        runner.release()
        job = runner.job
        steps = runner.steps
        assert steps is not None
        call = job.calls[runner.index]
        how = "; it ignored its cancellation and was abandoned"
        outcome = Outcome(
            None, self._timed_out(call.example_id, steps, how), runner.started, clock()
        )
        job.store(runner.index, outcome)
        if job.left and not job.cancelled:
            self._start(job)  # a fresh worker task carries on with the rest

    async def submit(
        self, calls: Sequence[Call], progress: Progress | None = None
    ) -> list[Outcome]:
        """Run ``calls``; one outcome per call, in order. Cancel-safe. ``progress`` is
        told of each call as it ends."""
        self._check_open()
        assert self._limiter is not None and self._loop is not None
        if not calls:
            return []
        job = _Job(calls, self._loop, progress)
        self._start(job)  # more start as calls suspend (_grow)
        watch = self._watch
        if watch is not None:
            watch.wake()
        try:
            await job.future
        except BaseException:
            job.cancelled = True
            await shielded(self._stop(job))
            raise
        return cast(list[Outcome], job.outcomes)

    async def _stop(self, job: _Job) -> None:
        """Cancel ``job``'s worker tasks and wait for them; abandon those that will not
        end within ``ABANDON_AFTER_S`` (they swallow the cancellation)."""
        if not job.future.done():
            job.future.cancel()
        tasks = [r.task for r in job.runners if r.task is not None and not r.abandoned]
        waited = 0.0
        while True:
            pending = [t for t in tasks if not t.done()]
            if not pending:
                return
            if waited >= ABANDON_AFTER_S:
                break
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=RECANCEL_S)
            waited += RECANCEL_S
        for runner in job.runners:
            if runner.task is not None and not runner.task.done() and not runner.abandoned:
                runner.abandoned = True
                runner.release()
                self._abandoned.add(runner)
                self._abandoned_total += 1

    async def _stop_abandoned(self) -> None:
        """Close the coroutines of abandoned calls and let their tasks end."""
        runners = [r for r in self._abandoned if r.task is not None and not r.task.done()]
        for runner in runners:
            steps = runner.steps
            if steps is not None:
                steps.detached = True
                coro = steps.coro
                if coro is not None:
                    try:
                        coro.close()
                    except RuntimeError:  # it awaits again after GeneratorExit
                        _UNSTOPPABLE.append(coro)
            if runner.handle is not None:
                runner.handle.cancel()
                runner.handle = None
            assert runner.task is not None
            runner.task.cancel()
        tasks = [r.task for r in runners if r.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)

    def statistics(self) -> AsyncExecutorStatistics:
        return self._snapshot(
            AsyncExecutorStatistics,
            calls=self._calls,
            timeouts=self._timeouts,
            busy=self._busy,
            abandoned_tasks=self._abandoned_total,
            abandoned_alive=sum(
                1 for r in list(self._abandoned) if r.task is not None and not r.task.done()
            ),
            loop_blocks=self._blocks,
        )


def _ended(runner: _Runner, task: asyncio.Task[None]) -> None:
    """A worker task ended: a failure of the engine's own code fails its submit loudly,
    rather than leaving the submit waiting for an outcome that will not come."""
    if task.cancelled():
        return
    exc = task.exception()
    future = runner.job.future
    if exc is not None and not future.done():
        future.set_exception(exc)


class _LoopWatch:
    """A daemon thread that notices when a call holds the event loop, and sees where.

    While calls run it posts a no-op to the loop every ``WATCH_PERIOD_S``; when one is not
    run within ``LONG_STEP_NS``, the loop is held by the call stepping now
    (``LoopTime.stepping``): it samples the loop thread's stack
    (``sys._current_frames()``) and records the innermost line of the user's file on the
    call's :class:`Steps`, for its timeout message; past the timeout it logs the place,
    once, since a call that never gives the loop back cannot be stopped.
    """

    def __init__(self, executor: AsyncExecutor, loop: asyncio.AbstractEventLoop) -> None:
        self._executor = executor
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._path = str(executor.fn.path)
        self._posted = 0
        self._acked = 0
        self._posted_at = 0
        self._warned: Steps | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        """Calls are running: start the thread if it is not running yet."""
        if self._thread is None and not self._stopping.is_set():
            self._thread = threading.Thread(
                target=self._run, name=f"skynet-async-watch-{self._executor.stage}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def _ack(self, seq: int) -> None:
        self._acked = seq

    def _run(self, clock: Any = perf_counter_ns) -> None:
        while not self._stopping.wait(WATCH_PERIOD_S):
            if not self._executor._busy:
                continue
            now = clock()
            if self._acked == self._posted:
                self._posted += 1
                self._posted_at = now
                try:
                    self._loop.call_soon_threadsafe(self._ack, self._posted)
                except RuntimeError:  # the loop is closed
                    return
                continue
            held = now - self._posted_at
            steps = self._executor._looptime.stepping
            if held < LONG_STEP_NS or steps is None:
                continue
            if steps.blocked_at is None:
                steps.blocked_at = self._where()
            if held > self._executor._timeout_ns + HELD_WARNING_NS and self._warned is not steps:
                self._warned = steps
                log.warning(
                    "skynet-eval: the async `%s` has held the event loop for %.0f s on "
                    "example %r%s; nothing else runs until it gives the loop back, and an "
                    "async call cannot be stopped while it holds it: make `%s` a plain "
                    "`def` (worker processes can be killed at the timeout)",
                    self._executor.fn.name,
                    held / 1e9,
                    steps.example_id,
                    f" at {steps.blocked_at}" if steps.blocked_at else "",
                    self._executor.fn.name,
                )

    def _where(self) -> str | None:
        """``metric.py:5 (`time.sleep(3)`)``: the innermost line of the user's file on the
        loop thread's stack now."""
        frame = sys._current_frames().get(self._loop_thread)
        while frame is not None:
            if frame.f_code.co_filename == self._path:
                line = frame.f_lineno
                text = linecache.getline(self._path, line).strip()
                name = self._executor.fn.path.name
                return f"{name}:{line} (`{text}`)" if text else f"{name}:{line}"
            frame = frame.f_back
        return None
