"""The streaming flow: examples in, in chunks, through the stages, results out.

Examples are pulled lazily from any iterable or async iterable (:class:`Source`), in
*chunks*. A chunk's calls go to an executor as one batch (the run stage, then the score
stage), and its results are built in a tight loop (``_assembly.py``): per-item awaits
and hand-offs cost more than an exact-match metric, so cheap work must move in batches.

Chunks are sized (:class:`Sizer`) from the engine's measured time per example: small at
first, for latency; growing while examples are cheap; capped for memory; one example per
chunk when calls are slow, so that a slow example never holds up others. Several chunks
run at once, within a bound on the examples in flight (so memory does not grow with the
dataset) that is large enough to keep every executor's ``parallelism`` busy.

A chunk's results go out together, so one slow call (a hang waiting out its timeout, a
model call timing out) holds its whole chunk. The bound therefore counts the examples
whose calls are still queued or running (*busy*), as executors report their calls done
(:data:`~evaluator._executors._base.Progress`): the finished examples of a held chunk
wait outside it, up to ``MAX_HELD`` more. Calls queued behind a slow one in a worker's
batch do not hold the others up either: while a stage is idle (``Executor.idle``) the
dispatcher gives it new chunks beyond the busy bound. With ``concurrency`` set, it
bounds every example in flight instead. A chunk waiting for its consumer counts whole
as busy: a slow consumer holds up the dispatcher. The stages' fair gates hand a
submit's units back the same way, as its calls finish.

Each call of the flow runs for a tenant (a :class:`~llm_client.Share`): its chunks
enter each stage's executor through that stage's fair gate, and its model calls are made
under its share (``_scheduler.py``), so concurrent callers share slots and budgets by
weight.

Tasks are asyncio-native (see ``evaluator._aio``): a dispatcher pulls chunks and starts
one task per chunk in an ``asyncio.TaskGroup``; a :class:`ResultStream` runs its producer
in a task owned by the Evaluator.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from itertools import islice
from typing import Any, cast

from llm_client import Share

from .._aio import shielded, unwrap_group
from .._cache import ResultCache
from .._call._calls import Outcome
from .._call._results import Result
from .._data._dataset import Example, _row_to_example, check_unique_ids
from .._data._seen_ids import SeenIds
from .._executors._base import Executor
from .._models import ModelRouter
from .._telemetry import Telemetry
from . import _assembly as assembly
from ._scheduler import FairSlots, TenantBook

__all__ = ["MAX_CHUNK", "Flow", "ResultStream", "Sizer", "Source"]

#: Upper bound of a chunk: caps the memory held per chunk in flight.
MAX_CHUNK = 4096
#: The most examples in flight that an executor's backlog (``Executor.backlog_s``) asks.
MAX_BACKLOG = 65_536
#: Examples at most, beyond the in-flight bound, whose calls are done but whose chunk
#: waits for a slow call of its own (their results go out with the chunk's). Enough for a
#: few thousand examples a second to flow past a hang of a few seconds; a memory bound.
MAX_HELD = 16_384
#: How often a dispatcher held up by its busy bound looks for an idle stage.
IDLE_CHECK_S = 0.01
#: The first chunk of an Evaluator that has measured nothing yet.
START_CHUNK = 8
#: A chunk should take about this much of the engine's time: long enough to amortise
#: the hand-off to the executor, short enough that results stream out smoothly.
TARGET_CHUNK_S = 0.02

_EXAMPLES_ONLY = {Example}


class Sizer:
    """Adaptive chunk size from a moving average of the engine's time per example.

    The time per example is a chunk's wall time divided by the examples in flight while
    it ran (Little's law: the engine's throughput), not by the chunk's own size: with
    several chunks in flight, a chunk's wall time includes its wait behind the others,
    and counting that wait as its examples' cost made chunks shrink as more of them ran
    at once, and more ran at once as they shrank, down to chunks of one example each
    whose overhead saturated the loop.

    Nor is a chunk held up by one slow call of its own (a hang waiting out its timeout)
    evidence that examples got slower, if other chunks finished meanwhile: a rise is
    taken only as far as the time since the last chunk finished, over this chunk's
    examples, agrees (``gap``; the engine's completion rate). Taking the held chunk at
    its word shrank chunks, and with them the in-flight bound and the stage gates, to a
    few examples behind every hang. And one chunk can raise the estimate at most
    twofold, so that a workload that really turns slow is followed within a few chunks,
    a lone outlier not at once.
    """

    __slots__ = ("per_example", "size")

    def __init__(self) -> None:
        self.per_example: float | None = None
        self.size = START_CHUNK

    def observe(self, n: int, seconds: float, in_flight: int, gap: float | None = None) -> None:
        """A chunk of ``n`` examples took ``seconds`` with ``in_flight`` examples in
        flight, its own included, and ended ``gap`` seconds after the chunk before it."""
        if n <= 0:
            return
        per = max(seconds / max(n, in_flight), 1e-8)
        current = self.per_example
        if current is None:
            self.per_example = current = per
        else:
            if per > current:
                # Slower, says this chunk: believe it only as far as the completion rate
                # agrees, and at most twofold. (Never faster by the completion rate alone:
                # chunks of slow calls end in bursts, gaps near zero, and taking those for
                # speed grew chunks until stages stopped overlapping.)
                if gap is not None:
                    per = max(current, min(per, gap / n))
                per = min(per, 2 * current)
            # Weighted by n: a chunk of one says less about cheap calls than one of 4096.
            weight = min(1.0, 0.2 + n / 64)
            self.per_example = current = current + weight * (per - current)
        self.size = max(1, min(MAX_CHUNK, int(TARGET_CHUNK_S / current)))


class Source:
    """Pulls examples in chunks from an iterable or async iterable of examples or rows."""

    __slots__ = ("_aiter", "_ids", "_iter", "_lock", "position")

    def __init__(
        self, examples: Iterable[Any] | AsyncIterable[Any], *, unique_ids: bool = True
    ) -> None:
        #: The ids taken so far and their positions (None: repeats allowed); runs of
        #: consecutive int ids in O(1) memory, so that streaming does not grow with them.
        self._ids: SeenIds | None = SeenIds() if unique_ids else None
        self._iter: Iterator[Any] | None = None
        self._aiter: AsyncIterator[Any] | None = None
        if isinstance(examples, AsyncIterable):
            self._aiter = aiter(examples)
            self._lock: asyncio.Lock | None = asyncio.Lock()
        elif isinstance(examples, (Iterable)):
            self._iter = iter(examples)
            self._lock = None
        else:
            raise TypeError(
                f"`examples` must be an iterable or async iterable of Example objects or "
                f"row dicts, got {type(examples).__name__}"
            )
        self.position = 0

    async def take(self, n: int) -> list[Example]:
        """The next ``n`` examples (fewer at the end), rows converted to ``Example``."""
        if self._iter is not None:
            rows: list[Any] = list(islice(self._iter, n))
        else:
            assert self._aiter is not None and self._lock is not None
            rows = []
            async with self._lock:
                async for row in self._aiter:
                    rows.append(row)
                    if len(rows) >= n:
                        break
        start = self.position
        self.position += len(rows)
        if rows and set(map(type, rows)) != _EXAMPLES_ONLY:  # one C-level pass when all are
            for i, row in enumerate(rows):
                if type(row) is not Example:
                    rows[i] = _row_to_example(
                        row, start + i, input_cols=None, output_cols=None, path=None, line=None
                    )
        if self._ids is not None and rows:
            check_unique_ids(self._ids, rows, start)
        return rows


Emit = Callable[[int, list[Result]], Awaitable[None]]


class Flow:
    """The stages of one Evaluator and the flow of its examples through them.

    Built unopened; :meth:`attach` gives it the opened executors and model router.
    Counts examples done and in flight for the Evaluator's statistics.
    """

    def __init__(
        self,
        failure_score: float,
        concurrency: int | None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.failure_score = failure_score
        self._clock = clock  # bound at import: user code patching `time` cannot move it
        self.concurrency = concurrency
        self.metric: Executor | None = None
        self.program: Executor | None = None
        self.router: ModelRouter | None = None
        self.cache: ResultCache | None = None
        self.telemetry: Telemetry | None = None
        self.sizer = Sizer()
        self._last_done: int | None = None  # when the last chunk ended (clock ns)
        self.streams: set[asyncio.Task[None]] = set()
        self.next_token = 0
        self.examples = 0
        self.ok = 0
        self.in_flight = 0
        self.tenants = TenantBook()
        self.metric_slots = FairSlots(
            lambda: self.capacity(self.metric), lambda: _idle(self.metric)
        )
        self.program_slots = FairSlots(
            lambda: self.capacity(self.program), lambda: _idle(self.program)
        )

    def attach(
        self,
        metric: Executor,
        program: Executor | None,
        router: ModelRouter,
        cache: ResultCache | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.metric, self.program, self.router, self.cache = metric, program, router, cache
        self.telemetry = router.telemetry = telemetry
        router.share_of = self.tenants.share_of

    # -- bounds -----------------------------------------------------------------------

    def slots(self) -> int:
        """How many calls the stages run at once between them: the parallelism to keep
        fed. Summed, not the larger: a model-bound program and a metric calling its judge keep
        their own model's calls in flight at the same time, on different examples."""
        return max(1, sum(ex.parallelism for ex in (self.metric, self.program) if ex is not None))

    def chunk_size(self) -> int:
        size = self.sizer.size
        return min(size, self.concurrency) if self.concurrency is not None else size

    def capacity(self, executor: Executor | None) -> int:
        """The calls a stage's fair gate lets into ``executor`` at once: its parallelism,
        so that its own FIFO queue never holds one caller's backlog ahead of another's;
        three chunks when chunks are larger (cheap calls, batched), as before."""
        parallelism = executor.parallelism if executor is not None else 1
        bound = max(1, parallelism, 3 * self.chunk_size())
        if executor is not None and self.concurrency is None:
            # An executor that asks for a backlog (Ray) is let that much in: the gate at
            # three 20 ms chunks held its calls to a few dozen, so its batches carried
            # what one or two chunks had (11-22 calls) whatever its own gathering did.
            bound = max(bound, self._backlog(executor.backlog_s))
        return bound

    def limit(self, size: int) -> int:
        """The examples in flight at most, with chunks of ``size``: twice the stages'
        parallelism, three chunks, and the backlog an executor asks for (Ray's), as
        examples at the engine's measured rate (Little's law)."""
        if self.concurrency is not None:
            return self.concurrency
        bound = max(2 * self.slots(), 3 * size)
        backlog = max(
            (ex.backlog_s for ex in (self.metric, self.program) if ex is not None), default=0.0
        )
        return max(bound, self._backlog(backlog))

    def _backlog(self, seconds: float) -> int:
        """``seconds`` of work as examples at the engine's measured rate (Little's law;
        0 while the rate is unknown), at most ``MAX_BACKLOG``."""
        per = self.sizer.per_example
        if seconds <= 0 or per is None:
            return 0
        return min(MAX_BACKLOG, int(seconds / per))

    # -- the flow ---------------------------------------------------------------------

    async def collect(
        self,
        artifact: Any,
        examples: Iterable[Any] | AsyncIterable[Any],
        *,
        share: Share | None = None,
        unique_ids: bool = True,
    ) -> list[Result]:
        """Every example's result, in input order."""
        if isinstance(examples, (list, tuple)):
            items: list[Any] = list(examples)
            source = Source(items, unique_ids=unique_ids)
            if 0 < len(items) <= self.chunk_size():
                # An optimizer's minibatch: one chunk, in the caller's task, no task group.
                chunk = await source.take(len(items))
                return await self.chunk(artifact, chunk, len(chunk), share=share)
        else:
            source = Source(examples, unique_ids=unique_ids)
        results: list[Result] = []

        async def place(position: int, chunk: list[Result]) -> None:
            end = position + len(chunk)
            if end > len(results):
                results.extend([cast(Result, None)] * (end - len(results)))
            results[position:end] = chunk

        await self.drive(artifact, source, place, share=share)
        return results

    async def drive(
        self, artifact: Any, source: Source, emit: Emit, *, share: Share | None = None
    ) -> None:
        """Pull chunks, run several at once within the in-flight bound, emit results."""
        flight = _Flight()

        async def run(chunk: list[Example], position: int, in_flight: int, busy: _Busy) -> None:
            try:
                results = await self.chunk(artifact, chunk, in_flight, share=share, busy=busy)
                busy.expect(len(chunk))  # waiting for its consumer: a slow one holds us up
                await emit(position, results)
            finally:
                # Counted until emitted: a slow consumer must hold up the dispatcher.
                busy.sent()
                busy.expect(0)
                flight.count -= len(chunk)
                self.in_flight -= len(chunk)
                flight.event.set()

        last: int | None = None  # the size of the chunk taken before
        with unwrap_group():
            async with asyncio.TaskGroup() as tg:
                while True:
                    size = self.chunk_size()
                    if last is not None:
                        # Slow start: a chunk at most twice the one before, so that the
                        # first measurement (cheap calls: 4096 at once) does not put a
                        # hang among the first hundred examples in a chunk of thousands.
                        size = min(size, 2 * last)
                    limit = self.limit(size)
                    # The user's `concurrency` bounds every example in flight.
                    held = MAX_HELD if self.concurrency is None else 0
                    while flight.count and not self._room(flight, size, limit, held):
                        flight.event.clear()
                        if flight.count + size > limit + held:
                            await flight.event.wait()
                            continue
                        # Held up behind slow calls: look again soon for an idle stage.
                        self.metric_slots.poke()
                        self.program_slots.poke()
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(IDLE_CHECK_S):
                                await flight.event.wait()
                    position = source.position
                    chunk = await source.take(size)
                    if not chunk:
                        break
                    last = len(chunk)
                    flight.count += len(chunk)
                    self.in_flight += len(chunk)
                    busy = _Busy(flight, len(chunk))
                    tg.create_task(run(chunk, position, flight.count, busy))

    def _room(self, flight: _Flight, size: int, limit: int, held: int) -> bool:
        """Room for a chunk of ``size``: within the bound on busy examples, or, within
        the memory bound, a stage is idle (the calls counted busy wait behind a slow
        one: a hang in a worker's batch)."""
        if flight.count + size > limit + held:
            return False
        if flight.busy + size <= limit:
            return True
        # Idle only counts once every chunk let in before has reached its executor: the
        # dispatcher takes chunks without yielding, and a stage still looks idle while the
        # chunks it was just given wait to run (that let in 16,384 examples at once).
        return (
            held > 0
            and not flight.unsent
            and any(ex.idle for ex in (self.program, self.metric) if ex is not None)
        )

    async def chunk(
        self,
        artifact: Any,
        examples: list[Example],
        in_flight: int,
        *,
        share: Share | None = None,
        busy: _Busy | None = None,
    ) -> list[Result]:
        """Run one chunk through both stages; one result per example, in order.

        ``in_flight``: the examples in flight when it started, its own included; ``busy``
        counts its calls still queued or running for the dispatcher.
        """
        n = len(examples)
        started = self._clock()
        # Started before any chunk ended: it waits out the executors' start (worker
        # processes importing the user's file take a second on a loaded machine), which
        # says nothing of the time per example. Taken as evidence, that second made the
        # chunks one example each, and thousands of them in flight took long to undo.
        cold = self._last_done is None
        base = self.next_token
        self.next_token = base + n
        self.tenants.add(base, n, share)
        try:
            if self.cache is not None:
                results, errors = await self._cached(
                    self.cache, artifact, examples, base, share, busy
                )
            else:
                results, errors = await self._stages(artifact, examples, base, share, busy)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                if self.telemetry is not None:
                    self.telemetry.drop(base, n)
                raise  # the run is cancelled
            # Raised inside without anyone cancelling the run: never a silent loss.
            why = "a cancellation raised inside the engine, not requested by the caller"
            results, errors = assembly.lost(examples, self.failure_score, why), n
        finally:
            self.tenants.discard(base)
        if len(results) != n:  # one result per example, whatever happened
            results, lost = assembly.complete(examples, results, self.failure_score)
            errors += lost
        now = self._clock()
        gap = (now - self._last_done) / 1e9 if self._last_done is not None else None
        self._last_done = now
        if not cold:
            self.sizer.observe(n, (now - started) / 1e9, in_flight, gap)
        self.examples += n
        self.ok += n - errors
        if self.telemetry is not None:  # OpenTelemetry hook: spans and metrics, after the fact
            self.telemetry.chunk(results, base, started, errors)
        return results

    async def _submit(
        self,
        slots: FairSlots,
        executor: Executor,
        calls: list[Any],
        share: Share | None,
        busy: _Busy | None,
    ) -> list[Outcome]:
        """``executor.submit(calls)`` once the stage's fair gate admits them; the gate's
        units and the busy count go down as the executor reports calls done."""
        if busy is not None:
            busy.expect(len(calls))
        units = await slots.acquire(share, len(calls))
        if busy is not None:
            busy.sent()  # nothing runs before the submit below: the executor has them
        submission = _Submission(slots, units, len(calls), busy)
        try:
            return await executor.submit(calls, submission)
        finally:
            submission.close()

    async def _stages(
        self,
        artifact: Any,
        examples: list[Example],
        base: int,
        share: Share | None,
        busy: _Busy | None,
    ) -> tuple[list[Result], int]:
        router = self.router
        assert router is not None
        spend = None if share is None else share.spend
        if spend is not None:
            # A spent budget starts no example: each gets its one budget_exhausted result.
            why = spend.stop_reason()
            if why is not None:
                return assembly.budget_exhausted(examples, self.failure_score, why), len(examples)
        if self.program is not None:
            made = await self._with_program(self.program, artifact, examples, base, share, busy)
        else:
            made = await self._score_only(examples, base, share, busy)
        results, errors = made
        if router.refused and spend is not None:
            # The examples a model call of which did not fit (whatever their code did
            # with the refusal) are budget_exhausted.
            why = spend.stop_reason() or "a model call did not fit what was left of it"
            results, were_ok = assembly.refused(
                results, base, router.refused, why, self.failure_score
            )
            errors += were_ok
        # The one place results are scrubbed of the run's keys: before the cache, the
        # caller, the results file, the reports and telemetry see them (_scrub.py).
        return router.scrubber.results(results), errors

    async def _cached(
        self,
        cache: ResultCache,
        artifact: Any,
        examples: list[Example],
        base: int,
        share: Share | None,
        busy: _Busy | None,
        again: bool = False,
    ) -> tuple[list[Result], int]:
        """The cache's hits, and the stages for its misses (stored when they succeed).

        A miss whose key another chunk (or process) is paying for waits for its result
        instead, after this chunk's own misses ran (so no two chunks wait on each other);
        one whose owner gave up is looked up again: one of its waiters then pays."""
        found = await cache.lookup(artifact, examples, again)
        if not found.misses and not found.waits:
            return found.merge(()), 0
        fresh: list[Result] = []
        errors = 0
        try:
            if found.misses:
                fresh, errors = await self._stages(artifact, found.misses, base, share, busy)
                if len(fresh) != len(found.misses):  # one result per example, whatever happened
                    fresh, lost = assembly.complete(found.misses, fresh, self.failure_score)
                    errors += lost
                cache.store(found, fresh)
            retry = await cache.wait(found, examples) if found.waits else []
        finally:
            cache.release(found)  # what it owned and did not store: its waiters take over
        results = found.merge(fresh)
        if retry:
            again_examples = [examples[i] for i in retry]
            # Its call tokens follow its own misses' (within the chunk's range: a retry is
            # one of its waits).
            redone, more = await self._cached(
                cache, artifact, again_examples, base + len(found.misses), share, busy, True
            )
            for i, result in zip(retry, redone, strict=True):
                results[i] = result
            errors += more
        return results, errors

    async def _with_program(
        self,
        program: Executor,
        artifact: Any,
        examples: list[Example],
        base: int,
        share: Share | None,
        busy: _Busy | None,
    ) -> tuple[list[Result], int]:
        """The run stage, then the score stage for the examples whose program succeeded."""
        assert self.metric is not None and self.router is not None
        fail = self.failure_score
        calls = assembly.run_calls(artifact, examples, base)
        outcomes = await self._submit(self.program_slots, program, calls, share, busy)
        holes, score_calls, where = assembly.after_program(
            examples, calls, outcomes, self.router.program_meters, fail
        )
        errors = len(examples) - len(score_calls)
        scored: list[Result] = []
        if score_calls:
            outcomes = await self._submit(self.metric_slots, self.metric, score_calls, share, busy)
            scored, score_errors = assembly.scored_results(
                score_calls, outcomes, self.router.judge_meters, fail
            )
            errors += score_errors
        return assembly.fill_holes(holes, where, scored), errors

    async def _score_only(
        self, examples: list[Example], base: int, share: Share | None, busy: _Busy | None
    ) -> tuple[list[Result], int]:
        """The score stage on each example's own output."""
        assert self.metric is not None and self.router is not None
        fail = self.failure_score
        calls = assembly.score_only_calls(examples, base)
        outcomes: list[Outcome] = (
            await self._submit(self.metric_slots, self.metric, calls, share, busy) if calls else []
        )
        results, errors = assembly.scored_results(calls, outcomes, self.router.judge_meters, fail)
        if len(calls) != len(examples):  # some examples have no output: each its own error
            results = assembly.with_missing_outputs(examples, results, fail)
            errors += len(examples) - len(calls)
        return results, errors


def _idle(executor: Executor | None) -> bool:
    return executor is not None and executor.idle


class _Flight:
    """Examples in flight in one evaluation (``count``: not yet emitted; ``busy``: those
    whose calls are queued or running), the chunks not yet handed to an executor
    (``unsent``), and a wake-up for the dispatcher."""

    __slots__ = ("busy", "count", "event", "unsent")

    def __init__(self) -> None:
        self.count = 0
        self.busy = 0
        self.unsent = 0
        self.event = asyncio.Event()


class _Busy:
    """One chunk's share of :attr:`_Flight.busy`: the calls of its current stage not yet
    done (all of its examples until its first stage starts)."""

    __slots__ = ("flight", "n", "unsent")

    def __init__(self, flight: _Flight, n: int) -> None:
        self.flight = flight
        self.n = n
        self.unsent = True
        flight.busy += n
        flight.unsent += 1

    def sent(self) -> None:
        """The chunk's calls are handed to an executor (or it needs none): an idle stage
        seen from now on is idle with them."""
        if self.unsent:
            self.unsent = False
            self.flight.unsent -= 1
            self.flight.event.set()

    def expect(self, n: int) -> None:
        """A stage of ``n`` calls starts (0: the chunk is done)."""
        flight = self.flight
        flight.busy += n - self.n
        if n < self.n:
            flight.event.set()
        self.n = n

    def done(self, k: int) -> None:
        """``k`` calls of the current stage are done."""
        k = min(k, self.n)
        if k > 0:
            self.n -= k
            self.flight.busy -= k
            self.flight.event.set()


class _Submission:
    """The :data:`~evaluator._executors._base.Progress` of one submit: hands the stage
    gate's units back in proportion to the calls done, and counts them off the chunk's
    busy calls."""

    __slots__ = ("busy", "calls", "done", "held", "slots", "units")

    def __init__(self, slots: FairSlots, units: int, calls: int, busy: _Busy | None) -> None:
        self.slots, self.units, self.calls, self.busy = slots, units, calls, busy
        self.held = units
        self.done = 0

    def __call__(self, k: int) -> None:
        self.done = done = min(self.calls, self.done + k)
        keep = -(-self.units * (self.calls - done) // self.calls)  # rounded up
        if keep < self.held:
            self.slots.release(self.held - keep)
            self.held = keep
        if self.busy is not None:
            self.busy.done(k)

    def close(self) -> None:
        """The submit is over: whatever it still holds goes back."""
        if self.held:
            self.slots.release(self.held)
            self.held = 0


_END = object()


class ResultStream:
    """The async iterator returned by :meth:`Evaluator.stream`.

    Its producer runs in a task owned by the Evaluator (a generator cannot hold a task
    group across ``yield``); results travel in chunks through a small bounded queue, so
    a slow consumer holds up the producer instead of letting memory grow.
    """

    def __init__(
        self,
        flow: Flow,
        check_open: Callable[[], None],
        artifact: Any,
        source: Source,
        share: Share | None = None,
    ) -> None:
        self._flow = flow
        self._share = share
        self._check_open = check_open
        self._artifact = artifact
        self._source = source
        self._queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=2)
        self._task: asyncio.Task[None] | None = None
        self._batch: Iterator[Result] = iter(())
        self._finished = False

    def __aiter__(self) -> ResultStream:
        return self

    async def __aenter__(self) -> ResultStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def __anext__(self) -> Result:
        for result in self._batch:
            return result
        batch = await self._next_batch()
        if batch is None:
            raise StopAsyncIteration
        self._batch = iter(batch)
        return next(self._batch)

    async def batches(self) -> AsyncIterator[list[Result]]:
        """The results in the chunks they complete in: cheaper than one at a time."""
        rest = list(self._batch)
        if rest:
            yield rest
        while (batch := await self._next_batch()) is not None:
            yield batch

    async def _next_batch(self) -> list[Result] | None:
        if self._finished:
            return None
        if self._task is None:
            self._check_open()
            self._task = asyncio.get_running_loop().create_task(self._produce())
            self._flow.streams.add(self._task)
            self._task.add_done_callback(self._flow.streams.discard)
        try:
            item = await self._queue.get()
        except asyncio.CancelledError:
            # The consumer was cancelled (a client that disconnected): its work stops
            # with it, now, rather than when the stream is collected; the cancellation
            # returns once that work has unwound (queued calls dropped, reservations
            # returned), whatever else cancels it meanwhile.
            await shielded(self.aclose())
            raise
        if item is _END:
            self._finished = True
            return None
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        return cast(list[Result], item)

    async def _produce(self) -> None:
        async def put(position: int, chunk: list[Result]) -> None:
            await self._queue.put(chunk)

        try:
            await self._flow.drive(self._artifact, self._source, put, share=self._share)
        except Exception as exc:
            await self._queue.put(exc)
        else:
            await self._queue.put(_END)

    async def aclose(self) -> None:
        """Stop producing: cancel what is in flight and wait for it to unwind."""
        self._finished = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})  # unlike `await task`, never raises its cancellation

    def __del__(self) -> None:
        task = self._task
        if task is not None and not task.done():
            # Dropped without aclose (a `break` out of `async for`): stop the producer.
            with contextlib.suppress(RuntimeError):
                task.get_loop().call_soon_threadsafe(task.cancel)
