"""The streaming evaluation pipeline: :class:`Evaluator`.

Examples are pulled lazily from any iterable or async iterable, in *chunks*. A chunk's
calls go to an executor as one batch (the run stage, then the score stage), and its
results are built in a tight loop: per-item awaits and hand-offs cost more than an
exact-match metric, so cheap work must move in batches. Chunks are sized adaptively
from the measured time per example (small at first, for latency; growing while calls
are cheap; capped for memory; one example per chunk when calls are slow, so that a
slow example never holds up others), and several run at once to keep every worker busy.
The number of examples in flight is bounded, so memory does not grow with the dataset.

Every example yields exactly one :class:`Result`, whatever happens to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
)
from itertools import islice
from pathlib import Path
from typing import Any, cast

import anyio
import msgspec

from ._calls import Call, Outcome
from ._context import Stage
from ._dataset import NO_OUTPUT, Example, _row_to_example
from ._exceptions import ConfigError
from ._loader import EXECUTIONS, UserFunction, load_metric, load_program
from ._local import AsyncExecutor, InlineExecutor, ThreadExecutor
from ._models import ModelRouter, Models, ModelStatistics
from ._options import MAX_TIMEOUT, validate_count, validate_timeout
from ._report import Report, ReportBuilder
from ._results import ErrorInfo, Observation, Result, Usage

__all__ = ["Evaluator", "EvaluatorStatistics"]

#: Upper bound of a chunk: caps the memory held per chunk in flight.
MAX_CHUNK = 4096
#: The first chunk of an Evaluator that has measured nothing yet.
START_CHUNK = 8
#: A chunk should take about this long: long enough to amortise the hand-off to the
#: executor, short enough that results stream out smoothly.
TARGET_CHUNK_S = 0.02
#: Default bound of the async executor (concurrent calls on the loop).
ASYNC_CONCURRENCY = 256

_SCORE_ONLY = Observation(
    duration_ms=None,
    cost_usd=None,
    notes=(
        "time not measured: score-only run (no program)",
        "cost not measured: score-only run (no program)",
    ),
)
_NO_USAGE = Usage()
_EXAMPLES_ONLY = {Example}


class EvaluatorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of an open Evaluator: examples done, in flight, executors, models."""

    examples: int
    ok: int
    errors: int
    in_flight: int
    chunk_size: int
    metric_execution: str
    program_execution: str | None
    metric: Any
    program: Any
    models: ModelStatistics
    abandoned_threads: int


def choose_execution(fn: UserFunction, override: str | None, *, option: str) -> str:
    """Where ``fn`` runs: the option, else the module's ``EXECUTION``, else by its kind.

    No automatic choice runs user code on the loop's own thread unless it is
    ``async def``: a sync function that calls ``skynet.llm`` (I/O bound) gets threads,
    any other sync function gets worker processes.
    """
    chosen = override if override is not None else fn.execution
    source = f"`{option}`" if override is not None else f"EXECUTION in {fn.path}"
    if chosen is None:
        if fn.is_async:
            return "async"
        return "thread" if fn.uses_llm else "process"
    if chosen not in EXECUTIONS:
        raise ConfigError(
            f"{source} must be one of {', '.join(map(repr, EXECUTIONS))}, got {chosen!r}"
        )
    if fn.is_async and chosen != "async":
        raise ConfigError(
            f"{source} is {chosen!r} but `{fn.name}` in {fn.path} is `async def`; an async "
            "function is awaited on the event loop: use 'async' (or leave it unset)"
        )
    if not fn.is_async and chosen == "async":
        raise ConfigError(
            f"{source} is 'async' but `{fn.name}` in {fn.path} is a plain `def`; define it "
            "with `async def`, or use 'thread', 'process' or 'inline'"
        )
    return chosen


class _Sizer:
    """Adaptive chunk size from a moving average of the wall time per example."""

    __slots__ = ("per_example", "size")

    def __init__(self) -> None:
        self.per_example: float | None = None
        self.size = START_CHUNK

    def observe(self, n: int, seconds: float) -> None:
        if n <= 0:
            return
        per = max(seconds / n, 1e-8)
        # Weighted by n: a chunk of one says less about cheap calls than a chunk of 4096.
        weight = min(1.0, 0.2 + n / 64)
        self.per_example = (
            per
            if self.per_example is None
            else self.per_example + weight * (per - self.per_example)
        )
        self.size = max(1, min(MAX_CHUNK, int(TARGET_CHUNK_S / self.per_example)))


class _Source:
    """Pulls examples in chunks from an iterable or async iterable of examples or rows."""

    __slots__ = ("_aiter", "_iter", "_lock", "position")

    def __init__(self, examples: Iterable[Any] | AsyncIterable[Any]) -> None:
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
        return rows


class _Flight:
    """Examples in flight in one evaluation, and a wake-up for the dispatcher."""

    __slots__ = ("count", "event")

    def __init__(self) -> None:
        self.count = 0
        self.event = asyncio.Event()


Emit = Callable[[int, list[Result]], Awaitable[None]]


class Evaluator:
    """Runs a program and scores its outputs with a metric, streaming, in bounded memory.

    ::

        async with Evaluator(metric="metric.py", program="program.py") as ev:
            results = await ev.evaluate_many(artifact, examples)   # input order
            async for result in ev.stream(artifact, examples): ...  # as completed
            report = await ev.evaluate(artifact, examples)         # a Report

    ``metric`` and ``program`` are file paths or loaded :class:`UserFunction` s; without
    a program the run is score-only and each example's ``output`` field is scored.
    ``timeout`` bounds each metric call (0 < timeout <= 600 s), ``program_timeout`` each
    program call (default 600 s). ``execution`` / ``program_execution`` choose the
    executor ("process", "thread", "async", "inline"); by default the module's
    ``EXECUTION``, else ``async`` for ``async def``, ``thread`` for a sync function that
    calls ``skynet.llm``, ``process`` for any other. ``workers`` sizes the thread pool or
    the worker processes; ``concurrency`` bounds the examples in flight (and the async
    executor's concurrent calls). ``models`` chooses the program, metric and reflection
    models for ``skynet.llm``. An error result scores ``failure_score``.

    Pools, model clients and processes are created by ``async with`` inside the running
    loop and released when it exits; a closed Evaluator cannot be reopened. Concurrent
    calls on one Evaluator share its pools and rate budget.
    """

    def __init__(
        self,
        metric: str | Path | UserFunction,
        program: str | Path | UserFunction | None = None,
        *,
        timeout: float = 60.0,
        program_timeout: float | None = None,
        workers: int | None = None,
        concurrency: int | None = None,
        execution: str | None = None,
        program_execution: str | None = None,
        models: Models | None = None,
        failure_score: float = 0.0,
        max_calls_per_worker: int | None = None,
        memory_limit_mb: int | None = None,
    ) -> None:
        self.timeout = validate_timeout(timeout, "timeout", upper=MAX_TIMEOUT)
        self.program_timeout = (
            MAX_TIMEOUT
            if program_timeout is None
            else validate_timeout(program_timeout, "program_timeout", upper=None)
        )
        self.workers = validate_count(workers, "workers")
        self.concurrency = validate_count(concurrency, "concurrency")
        self.max_calls_per_worker = validate_count(max_calls_per_worker, "max_calls_per_worker")
        self.memory_limit_mb = validate_count(memory_limit_mb, "memory_limit_mb")
        if (
            isinstance(failure_score, bool)
            or not isinstance(failure_score, (int, float))
            or not math.isfinite(failure_score)
        ):
            raise ConfigError(f"`failure_score` must be a finite number, got {failure_score!r}")
        self.failure_score = float(failure_score)
        if models is not None and not isinstance(models, Models):
            raise ConfigError(f"`models` must be an evaluator.Models, got {type(models).__name__}")
        self.models = models or Models()
        self.metric = metric if isinstance(metric, UserFunction) else load_metric(metric)
        self.program: UserFunction | None = (
            None
            if program is None
            else program
            if isinstance(program, UserFunction)
            else load_program(program)
        )
        self.metric_execution = choose_execution(self.metric, execution, option="execution")
        self.program_execution = (
            None
            if self.program is None
            else choose_execution(self.program, program_execution, option="program_execution")
        )
        self._state = "new"
        self._stack: contextlib.AsyncExitStack | None = None
        self._router: ModelRouter | None = None
        self._metric_exec: Any = None
        self._program_exec: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_token = 0
        self._sizer = _Sizer()
        self._streams: set[asyncio.Task[None]] = set()
        self._examples = 0
        self._ok = 0
        self._in_flight = 0

    # -- lifetime ---------------------------------------------------------------------

    async def __aenter__(self) -> Evaluator:
        if self._state != "new":
            raise RuntimeError(
                "this Evaluator was already opened; an Evaluator cannot be reused once "
                "closed: create a new one"
            )
        self._state = "opening"
        self._loop = asyncio.get_running_loop()
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            router = await stack.enter_async_context(ModelRouter(self.models))
            self._router = router
            judge_handler = router.handler if router.has_judge_model else None
            self._metric_exec = await stack.enter_async_context(
                self._executor(
                    self.metric, "score", self.metric_execution, self.timeout, judge_handler
                )
            )
            if self.program is not None:
                assert self.program_execution is not None
                program_handler = router.handler if router.has_program_model else None
                self._program_exec = await stack.enter_async_context(
                    self._executor(
                        self.program,
                        "run",
                        self.program_execution,
                        self.program_timeout,
                        program_handler,
                    )
                )
        except BaseException:
            self._state = "closed"
            with anyio.CancelScope(shield=True):
                await stack.aclose()
            raise
        self._stack = stack
        self._state = "open"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop running streams, then close executors and model clients (idempotent)."""
        if self._state == "closed":
            return
        self._state = "closed"
        with anyio.CancelScope(shield=True):
            streams = set(self._streams)
            for task in streams:
                task.cancel()
            if streams:
                await asyncio.wait(streams)
            if self._stack is not None:
                stack, self._stack = self._stack, None
                await stack.aclose()

    def _executor(
        self, fn: UserFunction, stage: Stage, execution: str, timeout: float, handler: Any
    ) -> Any:
        if execution == "async":
            return AsyncExecutor(
                fn,
                stage,
                timeout=timeout,
                concurrency=self.concurrency or ASYNC_CONCURRENCY,
                llm_handler=handler,
            )
        if execution == "thread":
            return ThreadExecutor(
                fn, stage, timeout=timeout, workers=self.workers, llm_handler=handler
            )
        if execution == "inline":
            return InlineExecutor(fn, stage, timeout=timeout, llm_handler=handler)
        from ._process import ProcessExecutor

        return ProcessExecutor(
            fn,
            stage,
            timeout=timeout,
            workers=self.workers,
            llm_handler=handler,
            max_calls_per_worker=self.max_calls_per_worker,
            memory_limit_mb=self.memory_limit_mb,
        )

    def _check_open(self) -> None:
        if self._state != "open":
            if self._state == "closed":
                raise RuntimeError("this Evaluator is closed; create a new one")
            raise RuntimeError(
                "the Evaluator is not open: use `async with Evaluator(...) as ev:` first"
            )

    # -- public API -------------------------------------------------------------------

    async def evaluate_many(
        self, artifact: Any, examples: Iterable[Any] | AsyncIterable[Any]
    ) -> list[Result]:
        """Evaluate ``examples`` with ``artifact``; one result per example, in input order."""
        self._check_open()
        if isinstance(examples, (list, tuple)):
            items: list[Any] = list(examples)
            if 0 < len(items) <= self._chunk_size():
                # An optimizer's minibatch: one chunk, in the caller's task, no task group.
                source = _Source(items)
                return await self._chunk(artifact, await source.take(len(items)))
            source = _Source(items)
        else:
            source = _Source(examples)
        results: list[Result] = []

        async def place(position: int, chunk: list[Result]) -> None:
            end = position + len(chunk)
            if end > len(results):
                results.extend([cast(Result, None)] * (end - len(results)))
            results[position:end] = chunk

        await self._drive(artifact, source, place)
        return results

    def stream(self, artifact: Any, examples: Iterable[Any] | AsyncIterable[Any]) -> ResultStream:
        """Results as they complete, in bounded memory.

        ``async for result in ev.stream(artifact, examples)``; use
        ``async with ev.stream(...) as results`` (or ``await results.aclose()``) to stop
        early and release at once what is still in flight.
        """
        self._check_open()
        return ResultStream(self, artifact, _Source(examples))

    async def evaluate(self, artifact: Any, examples: Iterable[Any] | AsyncIterable[Any]) -> Report:
        """Evaluate ``examples`` and return the :class:`Report` (no list of results kept)."""
        self._check_open()
        builder = ReportBuilder(failure_score=self.failure_score)

        async def add(position: int, chunk: list[Result]) -> None:
            builder.add_many(chunk)

        await self._drive(artifact, _Source(examples), add)
        return builder.build(abandoned_threads=self._abandoned())

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the Evaluator was opened in (None before it opens): where a
        synchronous host in another thread must send its calls."""
        return self._loop

    def statistics(self) -> EvaluatorStatistics:
        """A snapshot of examples done, in flight, and of the executors and models."""
        router = self._router
        return EvaluatorStatistics(
            examples=self._examples,
            ok=self._ok,
            errors=self._examples - self._ok,
            in_flight=self._in_flight,
            chunk_size=self._sizer.size,
            metric_execution=self.metric_execution,
            program_execution=self.program_execution,
            metric=self._metric_exec.statistics() if self._metric_exec is not None else None,
            program=self._program_exec.statistics() if self._program_exec is not None else None,
            models=router.statistics() if router is not None else ModelStatistics(),
            abandoned_threads=self._abandoned(),
        )

    # -- the engine -------------------------------------------------------------------

    def _abandoned(self) -> int:
        total = 0
        for ex in (self._metric_exec, self._program_exec):
            if ex is not None:
                total += getattr(ex.statistics(), "abandoned_threads", 0)
        return total

    def _slots(self) -> int:
        """How many calls the executors run at once: the parallelism to keep fed."""
        slots = 1
        for execution, ex in (
            (self.metric_execution, self._metric_exec),
            (self.program_execution, self._program_exec),
        ):
            if ex is None:
                continue
            if execution == "async":
                slots = max(slots, ex.concurrency)
            elif execution == "thread":
                slots = max(slots, ex.workers)
            elif execution == "process":
                slots = max(slots, self.workers or 2)
        return slots

    def _chunk_size(self) -> int:
        size = self._sizer.size
        return min(size, self.concurrency) if self.concurrency is not None else size

    def _limit(self, size: int) -> int:
        if self.concurrency is not None:
            return self.concurrency
        return max(2 * self._slots(), 3 * size)

    async def _drive(self, artifact: Any, source: _Source, emit: Emit) -> None:
        """Pull chunks, run several at once within the in-flight bound, emit results."""
        flight = _Flight()

        async def run(chunk: list[Example], position: int) -> None:
            try:
                await emit(position, await self._chunk(artifact, chunk))
            finally:
                # Counted until emitted: a slow consumer must hold up the dispatcher.
                flight.count -= len(chunk)
                self._in_flight -= len(chunk)
                flight.event.set()

        with _unwrap_group():
            await self._dispatch(source, flight, run)

    async def _dispatch(
        self,
        source: _Source,
        flight: _Flight,
        run: Callable[[list[Example], int], Coroutine[Any, Any, None]],
    ) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                size = self._chunk_size()
                limit = self._limit(size)
                while flight.count and flight.count + size > limit:
                    flight.event.clear()
                    await flight.event.wait()
                position = source.position
                chunk = await source.take(size)
                if not chunk:
                    break
                flight.count += len(chunk)
                self._in_flight += len(chunk)
                tg.start_soon(run, chunk, position)

    async def _chunk(self, artifact: Any, examples: list[Example]) -> list[Result]:
        """Run one chunk through both stages; one result per example, in order.

        The per-example work here (building calls, then results) is the engine's own
        cost per example: comprehensions and positional struct construction, no
        per-example function calls beyond the structs themselves.
        """
        n = len(examples)
        started = time.perf_counter()
        base = self._next_token
        self._next_token = base + n
        if self._program_exec is not None:
            results, errors = await self._with_program(artifact, examples, base)
        else:
            obs = _SCORE_ONLY
            calls = [
                Call(token, ex.id, ex.input, ex.output, ex.expected, obs)
                for token, ex in zip(range(base, base + n), examples, strict=True)
                if ex.output is not NO_OUTPUT
            ]
            outcomes: list[Outcome] = await self._metric_exec.submit(calls) if calls else []
            results, errors = self._score_results(calls, outcomes)
            if len(calls) != n:  # some examples have no output to score: each its own error
                it = iter(results)
                results = [
                    self._missing_output(ex) if ex.output is NO_OUTPUT else next(it)
                    for ex in examples
                ]
                errors += n - len(calls)
        self._sizer.observe(n, time.perf_counter() - started)
        self._examples += n
        self._ok += n - errors
        return results

    async def _with_program(
        self, artifact: Any, examples: list[Example], base: int
    ) -> tuple[list[Result], int]:
        """The run stage, then the score stage for the examples whose program succeeded."""
        calls = [
            Call(token, ex.id, artifact, ex.input)
            for token, ex in zip(range(base, base + len(examples)), examples, strict=True)
        ]
        outcomes: list[Outcome] = await self._program_exec.submit(calls)
        assert self._router is not None
        meters = self._router.program_meters
        fail = self.failure_score
        results: list[Result | None] = []
        score_calls: list[Call] = []
        where: list[int] = []
        for i, (ex, call, outcome) in enumerate(zip(examples, calls, outcomes, strict=True)):
            if outcome.started_ns:
                duration: float | None = (outcome.ended_ns - outcome.started_ns) / 1e6
            else:
                duration = None
            meter = meters.pop(call.token, None) if meters else None
            if meter is not None:
                observation = meter.observation(duration)
            elif duration is None:
                observation = Observation(
                    duration_ms=None, notes=("time not measured: the program's worker ended",)
                )
            else:
                observation = Observation(duration_ms=duration)
            error = outcome.error
            if error is not None:
                results.append(
                    Result(ex.id, fail, {}, error.message, error, observation, _NO_USAGE)
                )
            else:
                results.append(None)
                score_calls.append(
                    Call(call.token, ex.id, ex.input, outcome.value, ex.expected, observation)
                )
                where.append(i)
        errors = len(examples) - len(score_calls)
        if score_calls:
            scored, score_errors = self._score_results(
                score_calls, await self._metric_exec.submit(score_calls)
            )
            errors += score_errors
            for i, result in zip(where, scored, strict=True):
                results[i] = result
        return cast(list[Result], results), errors

    def _score_results(
        self, calls: list[Call], outcomes: list[Outcome]
    ) -> tuple[list[Result], int]:
        """The results of scored calls, in order, and how many are errors: the hot loop
        of a cheap metric."""
        assert self._router is not None
        meters = self._router.judge_meters
        fail = self.failure_score
        no_usage = _NO_USAGE
        out: list[Result] = []
        append = out.append
        errors = 0
        for call, outcome in zip(calls, outcomes, strict=True):
            judge = no_usage
            if meters:
                meter = meters.pop(call.token, None)
                if meter is not None:
                    judge = meter.usage()
            started = outcome.started_ns
            metric_ms = (outcome.ended_ns - started) / 1e6 if started else None
            error = outcome.error
            # Positional, in field order (see Result): twice as fast as keywords.
            if error is None:
                s = outcome.value
                append(
                    Result(
                        call.example_id,
                        s.score,
                        s.scores,
                        s.feedback,
                        None,
                        call.observation,  # type: ignore[arg-type]  # set on every score call
                        judge,
                        metric_ms,
                        call.second,
                        s.extra,
                    )
                )
            else:
                errors += 1
                append(
                    Result(
                        call.example_id,
                        fail,
                        {},
                        error.message,
                        error,
                        call.observation,  # type: ignore[arg-type]  # set on every score call
                        judge,
                        metric_ms,
                        call.second,
                        {},
                    )
                )
        return out, errors

    def _missing_output(self, ex: Example) -> Result:
        message = (
            f"example {ex.id!r} has no output: a score-only run (no program) scores each "
            "example's 'output' field; add \"output\" to the row, or give a program "
            "(--program) to produce it"
        )
        return Result(
            example_id=ex.id,
            score=self.failure_score,
            feedback=message,
            error=ErrorInfo("missing_output", message),
            observation=_SCORE_ONLY,
        )


@contextlib.contextmanager
def _unwrap_group() -> Iterator[None]:
    """Raise the one real error of a task group as itself, not inside an ExceptionGroup."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
        real = [e for e in leaves if not isinstance(e, asyncio.CancelledError)]
        if len(real) == 1:
            raise real[0] from None
        if not real and leaves:
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup[Any]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


_END = object()


class ResultStream:
    """The async iterator returned by :meth:`Evaluator.stream`.

    Its producer runs in a task owned by the Evaluator (a generator cannot hold a task
    group across ``yield``); results travel in chunks through a small bounded queue, so
    a slow consumer holds up the producer instead of letting memory grow.
    """

    def __init__(self, evaluator: Evaluator, artifact: Any, source: _Source) -> None:
        self._ev = evaluator
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
            self._ev._check_open()
            self._task = asyncio.get_running_loop().create_task(self._produce())
            self._ev._streams.add(self._task)
            self._task.add_done_callback(self._ev._streams.discard)
        item = await self._queue.get()
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
            await self._ev._drive(self._artifact, self._source, put)
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
