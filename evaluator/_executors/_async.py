"""The async executor: ``async def`` user functions awaited on the event loop.

At most ``concurrency`` calls run at once, each cancelled at its timeout. Plain asyncio
primitives (a semaphore, a task group, a timer per call): an anyio task group and cancel
scope per call cost more than a cheap async metric.

A submit runs its calls in at most ``concurrency`` worker tasks that claim them one at a
time, not in a task per call: a submit of thousands of calls neither creates thousands
of tasks waiting for a slot (cancelling them stalled the loop) nor pays a task per call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Final, Self, cast

from .. import _failures as failures
from .._calls import Call, LLMHandler, Outcome, _clock, invoke_async
from .._context import Stage
from .._loader import UserFunction
from .._options import validate_count
from ._base import ExecutionKind, ExecutorStatistics, check_executor
from ._bridge import LoopBridge

__all__ = ["ASYNC_CONCURRENCY", "AsyncExecutor"]

#: Default bound of concurrent calls on the loop.
ASYNC_CONCURRENCY = 256

#: A worker that has not let the loop run for this long (its calls never suspend: a
#: cheap async metric) yields before its next call.
YIELD_NS = 2_000_000

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
    """Awaits an ``async def`` user function on the loop, bounded and timed out per call."""

    kind: Final[ExecutionKind] = "async"

    def __init__(
        self,
        fn: UserFunction,
        stage: Stage,
        *,
        timeout: float,
        concurrency: int = ASYNC_CONCURRENCY,
        llm_handler: LLMHandler | None = None,
    ) -> None:
        self.timeout = check_executor(fn, stage, "async", timeout)
        self.concurrency = validate_count(concurrency, "concurrency") or ASYNC_CONCURRENCY
        self.fn = fn
        self.stage: Stage = stage
        self._handler = llm_handler
        self._limiter: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._calls = 0
        self._timeouts = 0
        self._busy = 0
        self._state = "new"

    @property
    def parallelism(self) -> int:
        return self.concurrency

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError("an executor cannot be reopened; create a new one")
        self._loop = asyncio.get_running_loop()
        self._limiter = asyncio.Semaphore(self.concurrency)
        self._state = "open"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Nothing to release: every call runs inside a submit, which its caller awaits.
        self._state = "closed"

    async def _one(self, call: Call, outcomes: list[Outcome | None], index: int) -> None:
        """One call, in a slot its caller holds."""
        loop = self._loop
        assert loop is not None
        bridge = (
            LoopBridge(loop, self._handler, call.token, self.stage)
            if self._handler is not None
            else None
        )
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
                failures.timed_out(self.stage, self.timeout, call.example_id),
                started,
                _clock(),
            )
        outcomes[index] = outcome

    async def _work(
        self, calls: Sequence[Call], outcomes: list[Outcome | None], claims: Iterator[int]
    ) -> None:
        """Run calls of a submit, claimed one at a time, each in a slot of the executor."""
        limiter = self._limiter
        assert limiter is not None
        since = _clock()
        for index in claims:
            async with limiter:
                await self._one(calls[index], outcomes, index)
            if _clock() - since > YIELD_NS:
                # Calls that never suspend would otherwise hold the loop for a whole batch.
                await asyncio.sleep(0)
                since = _clock()

    async def submit(self, calls: Sequence[Call]) -> list[Outcome]:
        """Run ``calls``; one outcome per call, in order. Cancel-safe."""
        if self._limiter is None or self._state != "open":
            raise RuntimeError("the executor is not open; use `async with` first")
        n = len(calls)
        outcomes: list[Outcome | None] = [None] * n
        claims = iter(range(n))
        workers = min(n, self.concurrency)
        if workers <= 1:
            await self._work(calls, outcomes, claims)  # no task group for one call
        else:
            # One task per slot the submit can use, not per call; this one is a worker too.
            async with asyncio.TaskGroup() as tg:
                for _ in range(workers - 1):
                    tg.create_task(self._work(calls, outcomes, claims))
                await self._work(calls, outcomes, claims)
        return cast(list[Outcome], outcomes)

    def statistics(self) -> ExecutorStatistics:
        return ExecutorStatistics(
            kind="async",
            stage=self.stage,
            parallelism=self.concurrency,
            calls=self._calls,
            timeouts=self._timeouts,
            busy=self._busy,
        )
