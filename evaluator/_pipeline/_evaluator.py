"""The :class:`Evaluator`: its options, its lifetime, and the public API.

Options are checked when it is built (``ConfigError`` naming the option and the value),
its executors and model clients are opened by ``async with`` inside the running loop and
closed when it exits, and its public methods hand the examples to the flow
(``_flow.py``). Every example yields exactly one :class:`Result`, whatever happens to it.

Each stage's executor is chosen here (:func:`choose_execution`), with the reason the
report gives: a model-bound function (one that calls a model) runs in threads, as many
as its model budget allows, because its calls wait on the model, not on a core.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from collections.abc import AsyncIterable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from llm_client import ModelConfig, Share, Spend

from .._aio import shielded
from .._cache import CacheStatistics, KeyMaker, ResultCache, check_directory, check_key_files
from .._cache import depends_on_measurements as _depends_on_measurements
from .._call._calls import LLMHandler
from .._call._context import Stage
from .._call._kinds import refusal
from .._call._loader import UserFunction, load_metric, load_program
from .._call._results import Result
from .._data._dataset import examples_from_rows
from .._exceptions import ConfigError
from .._executors._async import AsyncExecutorStatistics
from .._executors._base import Executor, ExecutorOptions
from .._executors._factory import open_executor
from .._executors._threads import ThreadExecutorStatistics
from .._models import Budget, ModelRouter, Models, ModelStatistics
from .._options import MAX_TIMEOUT, validate_count, validate_ray_address, validate_timeout
from .._race import RaceResult, Ties, run_race
from .._report import (
    ClusterSummary,
    ModelBudget,
    Report,
    ReportBuilder,
    StageExecution,
    budget_summary,
    combine_clusters,
)
from .._telemetry import available, open_telemetry
from ._flow import Flow, ResultStream, Source
from ._scheduler import caller_share

__all__ = [
    "DEFAULT_MODEL_BUDGET",
    "Evaluator",
    "EvaluatorStatistics",
    "ExecutionChoice",
    "choose_execution",
]

#: The calls in flight a model-bound function may keep when its model is not known
#: (an SDK with its own base URL): the model client's starting in-flight limit. A stage
#: with a known model follows that model's live limit instead (``model_limit``).
DEFAULT_MODEL_BUDGET: int = 64


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
    abandoned_tasks: int = 0
    executors: tuple[StageExecution, ...] = ()
    """Where each stage ran, how many calls at once, and why (empty until opened)."""
    model_budgets: tuple[ModelBudget, ...] = ()
    """The rate budget in force for each model (empty until opened)."""
    cluster: ClusterSummary | None = None
    """The Ray cluster's part, when a stage runs on ``execution="ray"``."""
    cache: CacheStatistics | None = None
    """The result cache's lookups, hits and stores (None when it is off)."""


class ExecutionChoice(msgspec.Struct, frozen=True, kw_only=True):
    """Where one stage's function runs, what chose it and why, and its model budget."""

    kind: str
    source: str
    """ "automatic", "EXECUTION" (the user's file) or "option"."""
    reason: str
    option: str | None = None
    model_budget: int | None = None
    """Calls in flight its model allows, when the function is model-bound."""


def _reason(fn: UserFunction) -> str:
    if fn.is_async:
        return "async def"
    if fn.model_bound:
        uses = ", ".join(fn.model_use) or "skynet.llm"
        return f"calls {uses} (model-bound)"
    return "plain sync function (calls no model)"


def choose_execution(
    fn: UserFunction, override: str | None, *, option: str, model: ModelConfig | None = None
) -> ExecutionChoice:
    """Where ``fn`` runs: the option, else the module's ``EXECUTION``, else by its kind.

    No automatic choice runs user code on the loop's own thread unless it is
    ``async def``: a model-bound sync function (it calls ``skynet.llm`` or a model SDK)
    gets threads, any other sync function gets worker processes. A model-bound
    function's budget is the ``max_concurrency`` of ``model`` (the stage's model), or
    :data:`DEFAULT_MODEL_BUDGET` when the stage has none (an SDK with its own base URL).
    """
    budget = None
    if fn.model_bound:
        budget = model.max_concurrency if model is not None else DEFAULT_MODEL_BUDGET
    chosen = override if override is not None else fn.execution
    if chosen is None:
        kind = "async" if fn.is_async else "thread" if fn.model_bound else "process"
        return ExecutionChoice(
            kind=kind, source="automatic", reason=_reason(fn), model_budget=budget
        )
    problem = refusal(fn, chosen)
    if problem is None and override is not None:
        return ExecutionChoice(
            kind=chosen,
            source="option",
            reason=f"option `{option}`",
            option=option,
            model_budget=budget,
        )
    if problem is None:
        return ExecutionChoice(
            kind=chosen,
            source="EXECUTION",
            reason=f"EXECUTION in {fn.path.name}",
            model_budget=budget,
        )
    if override is not None:
        raise ConfigError(problem, option=option, value=override)
    raise ConfigError(f"EXECUTION in {fn.path} {problem}")


def _ray_address(address: Any, *executions: str | None) -> str | None:
    """``ray_address``, checked, and only for a stage that runs on Ray."""
    checked = validate_ray_address(address)
    if checked is not None and "ray" not in executions:
        raise ConfigError(
            "is for execution 'ray': set `execution` or `program_execution` to 'ray' "
            "(or EXECUTION = 'ray' in the file), or leave it unset",
            option="ray_address",
            value=checked,
        )
    return checked


CacheOption = bool | str | os.PathLike[str] | None


def _cache_option(value: Any) -> tuple[bool, Path | None]:
    """``cache``: off (None, False), memory only (True), or memory and disk (a directory)."""
    if value is None or value is False:
        return False, None
    if value is True:
        return True, None
    return True, check_directory(value)


def _failure_score(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(
            f"must be a finite number, got {value!r}", option="failure_score", value=value
        )
    return float(value)


def _otel_provider(value: Any, option: str, method: str) -> Any:
    """A tracer or meter provider given to the Evaluator: None, or one OpenTelemetry's
    API can use (it has ``method``), with OpenTelemetry installed."""
    if value is None:
        return None
    if not available():
        raise ConfigError(
            "needs OpenTelemetry's API, which is not installed: pip install 'skynet-eval[otel]'",
            option=option,
            value=value,
        )
    if not callable(getattr(value, method, None)):
        raise ConfigError(
            f"must be an OpenTelemetry {option.replace('_', ' ')} (with a `{method}` method), "
            f"got {type(value).__name__}",
            option=option,
            value=value,
        )
    return value


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
    executor ("process", "thread", "async", "inline", "ray"); by default the module's
    ``EXECUTION``, else ``async`` for ``async def``, ``thread`` for a sync function that
    calls a model (``skynet.llm``, openai, litellm, dspy, anthropic), with as many
    threads as the stage's model admits in flight (its governor's in-flight limit, which
    follows the budget and the measured latency up to ``max_concurrency``), ``process``
    for any other. ``workers`` sizes the thread pool or the worker processes;
    ``concurrency`` bounds the examples in flight (and the calls at once of every
    executor). ``models`` chooses the program, metric and reflection models for
    ``skynet.llm``. An error result scores ``failure_score``. ``budget``
    (:class:`~evaluator._models.Budget`) caps the dollars, model calls and seconds of the
    Evaluator's whole life, never overrun (``llm_client/_spend.py``); the examples it
    leaves get ``budget_exhausted``.
    ``ray_address`` is the Ray cluster of a stage on "ray" ("auto", "HOST:PORT",
    "ray://HOST:PORT"; None: a local instance started and stopped with the Evaluator).
    ``cache`` keeps each example's result without an error, keyed by everything that can
    change it (metric and program sources, ``REWARD_SPEC``, the helpers and files their
    code read so far, the artifact, the example, the models' settings): ``True`` in
    memory for the life of the Evaluator, a directory in memory and on disk
    (``DIR/results.sqlite3``, shared by concurrent runs), ``None`` (the default) or
    ``False`` off. A result from the cache says ``cached=True``. ``cache_key_files``
    adds files to the key (a rubric the metric reads only inside ``score``, say).
    ``tracer_provider`` / ``meter_provider`` receive the spans and metrics of the work
    (``opentelemetry-api``; None: OpenTelemetry's global providers, when the process has
    imported OpenTelemetry by the time the Evaluator opens; otherwise none are made): a
    span per example, a child span per model call, under the caller's current span
    (``evaluator/_telemetry.py``).

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
        ray_address: str | None = None,
        cache: CacheOption = None,
        cache_key_files: Sequence[str | Path] = (),
        tracer_provider: Any = None,
        meter_provider: Any = None,
        budget: Budget | None = None,
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
        self.failure_score = _failure_score(failure_score)
        if models is not None and not isinstance(models, Models):
            raise ConfigError(
                f"must be an evaluator.Models, got {type(models).__name__}",
                option="models",
                value=models,
            )
        self.models = models or Models()
        self.metric = metric if isinstance(metric, UserFunction) else load_metric(metric)
        self.program: UserFunction | None = (
            None
            if program is None
            else program
            if isinstance(program, UserFunction)
            else load_program(program)
        )
        self.metric_choice = choose_execution(
            self.metric, execution, option="execution", model=self.models.judge
        )
        self.program_choice = (
            None
            if self.program is None
            else choose_execution(
                self.program,
                program_execution,
                option="program_execution",
                model=self.models.program,
            )
        )
        self.metric_execution = self.metric_choice.kind
        self.program_execution = None if self.program_choice is None else self.program_choice.kind
        self.ray_address = _ray_address(ray_address, self.metric_execution, self.program_execution)
        cache_on, self.cache_dir = _cache_option(cache)
        key_files = check_key_files(cache_key_files)
        self._cache_keys = (
            KeyMaker(self.metric, self.program, self.models, key_files) if cache_on else None
        )
        self._cache: ResultCache | None = None
        self.tracer_provider = _otel_provider(tracer_provider, "tracer_provider", "get_tracer")
        self.meter_provider = _otel_provider(meter_provider, "meter_provider", "get_meter")
        self._state = "new"
        self._stack: contextlib.AsyncExitStack | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flow = Flow(self.failure_score, self.concurrency)
        self.budget = _budget_option(budget, "budget")
        #: The lifetime budget's ledger, from when the Evaluator opens.
        self._spend: Spend | None = None

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
        try:
            if self._cache_keys is not None:
                self._cache = await stack.enter_async_context(
                    ResultCache(
                        self._cache_keys,
                        directory=self.cache_dir,
                        measured=_depends_on_measurements(self.metric),
                    )
                )
            router = await stack.enter_async_context(ModelRouter(self.models))
            metric = await stack.enter_async_context(self._open("score", router))
            program = None
            if self.program is not None:
                program = await stack.enter_async_context(self._open("run", router))
            # SDK hook: closed first, so that no thread waits on a routed call at close.
            stack.push_async_callback(router.close_gateway)
        except BaseException:
            self._state = "closed"
            await shielded(stack.aclose())
            raise
        if self.budget is not None:
            try:
                _check_priced(router, self.budget)
            except BaseException:
                self._state = "closed"
                await shielded(stack.aclose())
                raise
            self._spend = self.budget.ledger(name="Evaluator's budget")
        telemetry = open_telemetry(self.tracer_provider, self.meter_provider)
        self._flow.attach(metric, program, router, self._cache, telemetry)
        self._stack = stack
        self._state = "open"
        return self

    def _open(self, stage: Stage, router: ModelRouter) -> Executor:
        """The (unopened) executor of ``stage``, with the router's model port."""
        if stage == "score":
            fn, choice, timeout = self.metric, self.metric_choice, self.timeout
        else:
            assert self.program is not None and self.program_choice is not None
            fn, choice, timeout = self.program, self.program_choice, self.program_timeout
        # SDK hook: every call gets the router's port (skynet.llm when the stage has a
        # model, and the user's own SDK calls, routed: evaluator/_sdk/).
        handler: LLMHandler | None = router.port
        options = ExecutorOptions(
            timeout=timeout,
            workers=self.workers,
            model_budget=choice.model_budget,
            concurrency=self.concurrency,
            max_calls_per_worker=self.max_calls_per_worker,
            memory_limit_mb=self.memory_limit_mb,
            llm_handler=handler,
            ray_address=self.ray_address,
            model_limit=router.in_flight_limit(stage),
        )
        return open_executor(fn, stage, choice.kind, options)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop running streams, then close executors and model clients (idempotent)."""
        if self._state == "closed":
            return
        self._state = "closed"
        streams = set(self._flow.streams)
        for task in streams:
            task.cancel()
        stack, self._stack = self._stack, None
        await shielded(_close(streams, stack))

    def _check_open(self) -> None:
        if self._state != "open":
            if self._state == "closed":
                raise RuntimeError("this Evaluator is closed; create a new one")
            raise RuntimeError(
                "the Evaluator is not open: use `async with Evaluator(...) as ev:` first"
            )

    # -- public API -------------------------------------------------------------------

    async def evaluate_many(
        self,
        artifact: Any,
        examples: Iterable[Any] | AsyncIterable[Any],
        *,
        tenant: Hashable | None = None,
        weight: float = 1.0,
        budget: Budget | None = None,
        unique_ids: bool = True,
    ) -> list[Result]:
        """Evaluate ``examples`` with ``artifact``; one result per example, in input order.

        ``examples`` is an iterable or an async iterable (a list, a generator,
        :func:`load_examples`' iterator, an ``async def`` generator), read lazily, of
        :class:`Example` s or row dicts in the dataset's canonical form (``{"id": ...,
        "input": ..., "expected": ..., "output": ...}``: ``input`` required, ``output``
        for a score-only run, a row without ``id`` gets its position). Each example's id
        must be unique in the call: a repeated id raises :class:`DatasetError` naming it
        and both positions, unless ``unique_ids=False`` (an optimizer's minibatch that
        draws an example twice; results stay in input order). ``artifact`` is passed to
        the program's ``run`` as it is (ignored by a score-only run).

        ``tenant`` (default: the calling task) and ``weight`` (default 1) set this call's
        share of the executors' slots and the model budgets while other tenants want
        them too; alone, a tenant gets all of both. ``budget``: this call's own spending
        limit, inside the Evaluator's. Cancelling the calling task stops this call's
        work only.
        """
        self._check_open()
        share = self._share(tenant, weight, budget)
        return await self._flow.collect(artifact, examples, share=share, unique_ids=unique_ids)

    def stream(
        self,
        artifact: Any,
        examples: Iterable[Any] | AsyncIterable[Any],
        *,
        tenant: Hashable | None = None,
        weight: float = 1.0,
        budget: Budget | None = None,
        unique_ids: bool = True,
    ) -> ResultStream:
        """Results as they complete, in bounded memory.

        ``async for result in ev.stream(artifact, examples)``; use
        ``async with ev.stream(...) as results`` (or ``await results.aclose()``) to stop
        early and release at once what is still in flight. A consumer cancelled while it
        waits for the next result (a client that disconnected) stops the stream's work
        too. ``examples``, ``unique_ids``, ``tenant`` (default: the task that calls
        ``stream``), ``weight`` and ``budget``: as for :meth:`evaluate_many`.
        """
        self._check_open()
        share = self._share(tenant, weight, budget)
        source = Source(examples, unique_ids=unique_ids)
        return ResultStream(self._flow, self._check_open, artifact, source, share)

    async def evaluate(
        self,
        artifact: Any,
        examples: Iterable[Any] | AsyncIterable[Any],
        *,
        tenant: Hashable | None = None,
        weight: float = 1.0,
        budget: Budget | None = None,
        unique_ids: bool = True,
    ) -> Report:
        """Evaluate ``examples`` and return the :class:`Report` (no list of results kept).

        ``examples``, ``unique_ids``, ``tenant``, ``weight`` and ``budget``: as for
        :meth:`evaluate_many`; the report shows the call's budget (else the Evaluator's)
        against what was spent.
        """
        self._check_open()
        share = self._share(tenant, weight, budget)
        builder = ReportBuilder(failure_score=self.failure_score)

        async def add(position: int, chunk: list[Result]) -> None:
            builder.add_many(chunk)

        source = Source(examples, unique_ids=unique_ids)
        await self._flow.drive(artifact, source, add, share=share)
        return self.build_report(builder, share.spend)

    async def race(
        self,
        candidates: Sequence[Any],
        examples: Iterable[Any],
        *,
        confidence: float = 0.95,
        ties: str | Ties = "report",
        labels: Sequence[str] | None = None,
        score_range: tuple[float, float] = (0.0, 1.0),
        max_evaluations: int | None = None,
        seed: int = 0,
        tenant: Hashable | None = None,
        weight: float = 1.0,
        budget: Budget | None = None,
    ) -> RaceResult:
        """Race the ``candidates`` (artifacts) on the same ``examples`` in rounds and
        stop evaluating each one once another is better at ``confidence``.

        Returns a :class:`RaceResult`: the winner, or the candidates that could not be
        told apart reported as tied (never one picked silently); the ranking; each
        candidate's mean and interval over the examples it saw, how many, when and why
        it was dropped; the evaluations, model calls and cost spent against evaluating
        everything. ``ties``: "report" (run until one is left or the examples end), or
        "epsilon=E" (also stop once the survivors are within E of each other).
        ``score_range``: the bounds every score (and ``failure_score``) lies in, which
        the test needs. ``max_evaluations``: stop, and report the standing, before more
        than this many (candidate, example) evaluations; cached ones count too. ``seed``
        orders the examples (each round takes the next ones). ``budget``: the race's own
        spending limit (one ledger for all its rounds, inside the Evaluator's): when it
        ends the race stops with the standing (outcome "budget", the reason and
        ``RaceResult.budget``: the limits against what was spent); the cells it cut are
        ``budget_exhausted``, in no mean. Each round runs through the flow of
        :meth:`evaluate_many`, so the cache and the rate budget apply: a cached result
        costs nothing and says so. The method: docs/architecture/race.md.
        """
        self._check_open()
        rows = list(examples_from_rows(examples))
        lo, hi = score_range
        if not lo <= self.failure_score <= hi:
            raise ConfigError(
                f"failure_score {self.failure_score:g} is outside score_range "
                f"[{lo:g}, {hi:g}]: an error's score must lie in the range too",
                option="score_range",
                value=score_range,
            )

        ledger = self._share(tenant, weight, budget, name="race's budget").spend

        async def evaluate(candidate: Any, part: list[Any]) -> list[Result]:
            share = caller_share(tenant, weight)
            share.spend = ledger  # one ledger for every round of every candidate
            return await self._flow.collect(candidate, part, share=share, unique_ids=True)

        return await run_race(
            evaluate,
            candidates,
            rows,
            confidence=confidence,
            ties=ties,
            labels=labels,
            score_range=score_range,
            max_evaluations=max_evaluations,
            seed=seed,
            spend=ledger,
        )

    def _share(
        self,
        tenant: Hashable | None,
        weight: float,
        budget: Budget | None,
        name: str = "call's budget",
    ) -> Share:
        """One call's share, with its spending ledger: its own ``budget`` inside the
        Evaluator's, or the Evaluator's (None: no limit)."""
        share = caller_share(tenant, weight)
        budget = _budget_option(budget, "budget")
        if budget is None:
            share.spend = self._spend
        else:
            assert self._flow.router is not None
            _check_priced(self._flow.router, budget)
            share.spend = budget.ledger(self._spend, name)
        return share

    @property
    def spend(self) -> Spend | None:
        """The ledger of the Evaluator's lifetime budget (None: no budget, or unopened)."""
        return self._spend

    def build_report(self, builder: ReportBuilder, spend: Spend | None = None) -> Report:
        """``builder``'s report, with how this Evaluator ran: each stage's executor and
        why, the model budgets in force, the threads and async calls abandoned, and the
        spending budget against what was spent (``spend``: a call's ledger; default the
        Evaluator's)."""
        spend = self._spend if spend is None else spend
        return builder.build(
            budget=None if spend is None else budget_summary(spend),
            abandoned_threads=self._abandoned(),
            abandoned_tasks=self._abandoned_tasks(),
            executors=self._executors(),
            model_budgets=self._budgets(),
            cluster=self._cluster(),
            cache=self.cache_statistics(),
        )

    @property
    def cache_key_files(self) -> tuple[Path, ...] | None:
        """The files the cache key holds beside the metric and program files (their
        helpers, the files their code read, ``cache_key_files``); None without a cache."""
        return None if self._cache_keys is None else self._cache_keys.files

    def cache_statistics(self) -> CacheStatistics | None:
        """The result cache's lookups, hits and stores (None when it is off or unopened)."""
        return None if self._cache is None else self._cache.statistics()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the Evaluator was opened in (None before it opens): where a
        synchronous host in another thread must send its calls."""
        return self._loop

    def statistics(self) -> EvaluatorStatistics:
        """A snapshot of examples done, in flight, and of the executors and models."""
        flow = self._flow
        router = flow.router
        return EvaluatorStatistics(
            examples=flow.examples,
            ok=flow.ok,
            errors=flow.examples - flow.ok,
            in_flight=flow.in_flight,
            chunk_size=flow.sizer.size,
            metric_execution=self.metric_execution,
            program_execution=self.program_execution,
            metric=flow.metric.statistics() if flow.metric is not None else None,
            program=flow.program.statistics() if flow.program is not None else None,
            models=router.statistics() if router is not None else ModelStatistics(),
            abandoned_threads=self._abandoned(),
            abandoned_tasks=self._abandoned_tasks(),
            executors=self._executors(),
            model_budgets=self._budgets(),
            cluster=self._cluster(),
            cache=self.cache_statistics(),
        )

    def _executors(self) -> tuple[StageExecution, ...]:
        """Each opened stage: its executor's kind and parallelism (its own word), and why."""
        stages = []
        for executor, choice in (
            (self._flow.program, self.program_choice),
            (self._flow.metric, self.metric_choice),
        ):
            if executor is not None and choice is not None:
                stages.append(
                    StageExecution(
                        stage=executor.stage,
                        kind=executor.kind,
                        parallelism=executor.parallelism,
                        source=choice.source,
                        reason=choice.reason,
                        option=choice.option,
                    )
                )
        return tuple(stages)

    def _budgets(self) -> tuple[ModelBudget, ...]:
        router = self._flow.router
        return () if router is None else router.budgets()

    def _cluster(self) -> ClusterSummary | None:
        summaries = []
        for ex in (self._flow.metric, self._flow.program):
            stats = ex.statistics() if ex is not None else None
            summary = getattr(stats, "summary", None)  # a Ray executor's statistics
            if summary is not None:
                summaries.append(summary())
        return combine_clusters(*summaries)

    def _abandoned(self) -> int:
        total = 0
        for ex in (self._flow.metric, self._flow.program):
            if ex is not None:
                stats = ex.statistics()
                if isinstance(stats, ThreadExecutorStatistics):
                    total += stats.abandoned_threads
        return total

    def _abandoned_tasks(self) -> int:
        return sum(
            stats.abandoned_tasks
            for ex in (self._flow.metric, self._flow.program)
            if ex is not None and isinstance(stats := ex.statistics(), AsyncExecutorStatistics)
        )


def _budget_option(value: Any, option: str) -> Budget | None:
    if value is None or isinstance(value, Budget):
        return value
    raise ConfigError(
        f"must be an evaluator.Budget(usd=..., calls=..., seconds=...), got {type(value).__name__}",
        option=option,
        value=value,
    )


def _check_priced(router: ModelRouter, budget: Budget) -> None:
    """A dollar budget needs every configured model's price: a clear error before
    anything runs, naming the model and how to price it."""
    if budget.usd is None:
        return
    unpriced = router.unpriced()
    if unpriced:
        names = ", ".join(repr(m) for m in unpriced)
        raise ConfigError(
            f"a dollar budget (Budget(usd={budget.usd:g}), --max-cost on the command line) "
            f"needs a price for every model, and none is known for model {names}, so no "
            "call's worst case can be reserved: give it a price (ModelConfig's "
            "price_input/price_output, USD per million tokens; --price-input/--price-output "
            "on the command line), or drop the dollar limit"
        )


async def _close(streams: set[asyncio.Task[None]], stack: contextlib.AsyncExitStack | None) -> None:
    """Wait for the cancelled streams, then close the executors and model clients."""
    if streams:
        await asyncio.wait(streams)
    if stack is not None:
        await stack.aclose()
