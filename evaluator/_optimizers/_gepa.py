"""A GEPA adapter on the engine: ``gepa.optimize(..., adapter=EvaluatorAdapter(ev))``.

GEPA (gepa 0.1.4, read from its source) drives an adapter synchronously:
``evaluate(batch, candidate, capture_traces)`` returns an ``EvaluationBatch``; the engine
and the reflective proposer prefer ``batch_evaluate(items)`` for many (candidate, batch)
pairs at once; ``make_reflective_dataset`` feeds the reflection model; and the proposer
reads ``adapter.propose_new_texts`` on every proposal, so an adapter without that
attribute fails every proposal (GEPA logs and skips the iteration): it is ``None`` here.

The engine is async and lives on an event loop; GEPA's calls are bridged onto that loop:

- a synchronous host opens its own engine with ``EvaluatorAdapter.open(...)``, which runs
  the loop in a blocking portal on a thread of its own;
- an async host opens the ``Evaluator`` itself, builds the adapter on its loop, and runs
  ``gepa.optimize`` in a worker thread (``await anyio.to_thread.run_sync(...)``); each
  call then hops onto the loop with ``run_coroutine_threadsafe``.

Never ``asyncio.run`` inside a running loop, and never a blocking call on the loop's own
thread (that would deadlock: the adapter says so instead).

A judge metric (``from skynet import llm``) needs a model. An ``Evaluator`` the host opens
takes ``models=``; ``open(...)`` takes the judge's model the ways a GEPA or DSPy user has
it too (``metric_lm=``, and ``reflection_lm=``: the model name given to ``gepa.optimize``,
the fallback), ``rpm``/``tpm``, and a ``simulator`` that serves every model locally, all
resolved by :mod:`evaluator._lm`. Keys are read before anything runs, and a metric that
imports ``skynet.llm`` with no model to serve it gets a warning at open, not a run of
failure scores.

Nothing handed to GEPA carries the examples' ``expected`` values, by construction rather
than by masking (see :mod:`evaluator._optimizers._reflection`): trajectories and reflective records
hold the inputs as copied before the evaluation, the program's output, the score, the
metric's own feedback and named scores, and for an error the engine's words for it (a
metric's exception message is never among them; it is logged for people instead). Each
evaluation hands the engine private copies of the examples' data, so a metric that edits
``input`` or ``expected`` cannot change GEPA's dataset or what the next candidate sees.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Self, TypeVar

import anyio
import anyio.from_thread

from .._call._copy import private_copy
from .._call._loader import UserFunction
from .._call._results import Result
from .._data._dataset import NO_OUTPUT, Example, examples_from_rows
from .._exceptions import ConfigError
from .._lm import check_keys, resolve_models, served, simulator_config
from ._reflection import from_program, reflection_feedback

if TYPE_CHECKING:
    from gepa.core.adapter import EvaluationBatch, ProposalFn

    from .._pipeline import EvaluatorStatistics

__all__ = ["EvaluatorAdapter", "Trajectory"]

T = TypeVar("T")

logger = logging.getLogger("evaluator.gepa")
#: Distinct metric errors logged per adapter; more are counted, not shown.
_LOGGED_ERRORS = 20

#: One example's trajectory: what the reflective dataset is built from. No ``expected``.
Trajectory = dict[str, Any]


class EvaluatorAdapter:
    """A GEPA adapter whose candidates are scored by an open ``Evaluator``.

    ``evaluator`` must be open (inside ``async with``); the adapter finds the loop that
    opened it (or pass that ``loop``). A candidate (component name -> text) becomes the
    artifact handed to ``run``: its text when it has one component, else the whole dict
    (override :meth:`artifact` to change that). An error result keeps the engine's
    failure score (or ``failure_score`` when given) and its message as the feedback.
    """

    #: GEPA reads this attribute on every proposal; ``None`` means "use reflection_lm".
    propose_new_texts: ProposalFn | None = None

    def __init__(
        self,
        evaluator: Any,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        failure_score: float | None = None,
        propose_new_texts: ProposalFn | None = None,
    ) -> None:
        if not callable(getattr(evaluator, "evaluate_many", None)):
            raise TypeError(
                "`evaluator` must be an open evaluator.Evaluator (it has no evaluate_many); "
                "or use `with EvaluatorAdapter.open(metric=..., program=...) as adapter:`"
            )
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                # Built off the loop: the open engine knows its loop; failing that, an
                # AnyIO worker thread finds it per call.
                loop = getattr(evaluator, "loop", None)  # a stand-in may not have one
        self.evaluator = evaluator
        self.failure_score = failure_score
        self.propose_new_texts = propose_new_texts
        self._loop = loop
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._logged: set[str] = set()

    @classmethod
    @contextmanager
    def open(
        cls,
        *,
        propose_new_texts: ProposalFn | None = None,
        backend: str = "asyncio",
        backend_options: dict[str, Any] | None = None,
        metric_lm: Any = None,
        reflection_lm: Any = None,
        rpm: float | None = None,
        tpm: float | None = None,
        simulator: Any = None,
        **evaluator_options: Any,
    ) -> Iterator[Self]:
        """Open an ``Evaluator(**evaluator_options)`` on a loop of its own, for a sync host.

        ``with EvaluatorAdapter.open(metric="metric.py", program="program.py") as adapter:
        gepa.optimize(..., adapter=adapter)``. The loop runs in a portal thread; leaving
        the block closes the engine (its pools and workers) and stops the loop. Errors
        score the engine's ``failure_score`` (an ``Evaluator`` option, like the others).

        A judge metric's model: ``metric_lm`` (a ``dspy.LM``, an ``llm_client.ModelConfig``
        or a litellm-style name such as ``"openai/gpt-4o-mini"``), else ``reflection_lm``
        (the fallback: the model name you give ``gepa.optimize``), or ``models=`` as for
        ``Evaluator``. ``rpm``/``tpm`` limit every model; ``simulator`` (a
        ``SimulatorConfig``, a dict of its fields or a JSON file) serves them all from a
        local simulator, with no key. Keys are read here, before anything runs.

        The result cache is on, in memory, unless ``cache=False``: GEPA re-scores the
        parent on each minibatch and accepted candidates on the valset, and an
        (artifact, example) pair scored once is not paid for again. ``cache="DIR"``
        keeps results on disk too, across runs (see ``Evaluator``).
        """
        from .._pipeline import Evaluator

        evaluator_options.setdefault("cache", True)
        judge = resolve_models(
            lm=metric_lm,
            reflection_lm=reflection_lm,
            models=evaluator_options.pop("models", None),
            rpm=rpm,
            tpm=tpm,
            lm_option="metric_lm",
            keep_program=True,
        )
        if judge.options:
            names = ", ".join(map(repr, sorted(judge.options)))
            raise ConfigError(
                f"the judge's model carries request options ({names}) that an Evaluator "
                "does not add to each call; drop them from the LM and pass them in the "
                "metric's llm(...) call instead"
            )
        served_by = simulator_config(simulator)
        models = judge.models
        if served_by is None:
            check_keys(judge)
        elif models.program is None and models.judge is None:
            raise ConfigError(
                "serves the models, but no model is given: pass metric_lm=, reflection_lm= "
                "or models= too",
                option="simulator",
            )
        with (
            anyio.from_thread.start_blocking_portal(backend, backend_options) as portal,
            portal.wrap_async_context_manager(served(models, served_by)) as models,
        ):
            # Built on the portal's loop: the engine binds nothing to a loop outside it.
            engine = portal.call(lambda: Evaluator(models=models, **evaluator_options))
            if models.judge is None and _calls_llm(engine.metric):
                logger.warning(
                    "%s calls skynet.llm, but no model serves the metric: pass metric_lm=, "
                    "reflection_lm= or models= to EvaluatorAdapter.open (each example "
                    "scores as an error otherwise)",
                    engine.metric.path.name,
                )
            with portal.wrap_async_context_manager(engine) as evaluator:
                adapter = cls(evaluator, propose_new_texts=propose_new_texts)
                adapter._portal = portal
                yield adapter

    def statistics(self) -> EvaluatorStatistics:
        """The engine's statistics: examples, executors, and the models' calls, 429s,
        retries and cost (``models.judge_cost_usd`` is the judge's)."""
        stats: EvaluatorStatistics = self.evaluator.statistics()
        return stats

    # -- the bridge from GEPA's synchronous calls to the engine's loop --------------------

    def _call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        if self._portal is not None:
            future: concurrent.futures.Future[T] = self._portal.start_task_soon(fn, *args)
        else:
            loop = self._loop
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if loop is None:
                # In an AnyIO worker thread (``anyio.to_thread.run_sync``) the loop is known.
                try:
                    loop = anyio.from_thread.run_sync(asyncio.get_running_loop)
                except RuntimeError:
                    raise RuntimeError(
                        "EvaluatorAdapter does not know the engine's event loop: build it "
                        "inside the loop that opened the Evaluator (or pass loop=), or use "
                        "`with EvaluatorAdapter.open(...) as adapter:` from synchronous code"
                    ) from None
            if running is loop:
                raise RuntimeError(
                    "gepa.optimize was called on the event loop that runs the Evaluator; it "
                    "blocks, so the engine could never run. Call it from a worker thread: "
                    "`await anyio.to_thread.run_sync(lambda: gepa.optimize(...))`"
                )
            future = asyncio.run_coroutine_threadsafe(_awaited(fn, *args), loop)
        try:
            return future.result()
        except BaseException:
            # The host gave up (KeyboardInterrupt, a timeout): cancel the work on the
            # loop rather than leave it running for nobody.
            future.cancel()
            raise

    # -- the GEPAAdapter protocol ---------------------------------------------------------

    def artifact(self, candidate: Mapping[str, str]) -> Any:
        """The artifact handed to ``run``: the text of a one-component candidate, else the
        dict of component texts."""
        if len(candidate) == 1:
            return next(iter(candidate.values()))
        return dict(candidate)

    def evaluate(
        self,
        batch: Sequence[Any],
        candidate: dict[str, str],
        capture_traces: bool = False,
    ) -> EvaluationBatch[Trajectory, Any]:
        """Score ``candidate`` on ``batch`` (``Example``s or canonical row dicts)."""
        return self._call(self._evaluate, batch, candidate, capture_traces)

    def batch_evaluate(
        self, items: Sequence[tuple[dict[str, str], Sequence[Any]]], *, capture_traces: bool = True
    ) -> list[EvaluationBatch[Trajectory, Any]]:
        """Score many (candidate, batch) pairs at once: concurrent ``evaluate_many`` calls on
        one engine, sharing its pools and its rate budget."""
        return self._call(self._evaluate_all, items, capture_traces)

    def make_reflective_dataset(
        self,
        candidate: dict[str, str],
        eval_batch: EvaluationBatch[Trajectory, Any],
        components_to_update: list[str],
    ) -> dict[str, list[dict[str, Any]]]:
        """Per component, one record per example: inputs, output, score and feedback.

        The program is scored as a whole, so every component gets the same records.
        """
        trajectories = eval_batch.trajectories
        if not trajectories:
            raise ValueError(
                "make_reflective_dataset needs the trajectories of evaluate(..., "
                "capture_traces=True); this EvaluationBatch has none"
            )
        records = [_record(t) for t in trajectories]
        return {name: [dict(r) for r in records] for name in components_to_update}

    # -- on the loop ----------------------------------------------------------------------

    async def _evaluate(
        self, batch: Sequence[Any], candidate: dict[str, str], capture_traces: bool
    ) -> EvaluationBatch[Trajectory, Any]:
        # GEPA may draw an example twice into one minibatch: ids need not be unique here.
        examples = list(examples_from_rows(batch, check_unique=False))
        # What the reflection shows as inputs is copied before anything runs; the engine
        # gets copies of its own, so user code that edits them changes neither GEPA's
        # rows (scored again for every candidate) nor what the reflection sees.
        shown = [private_copy(ex.input) for ex in examples]
        private = [_private(ex) for ex in examples]
        results = await self.evaluator.evaluate_many(
            self.artifact(candidate), private, unique_ids=False
        )
        return self._to_batch(examples, shown, results, capture_traces)

    async def _evaluate_all(
        self, items: Sequence[tuple[dict[str, str], Sequence[Any]]], capture_traces: bool
    ) -> list[EvaluationBatch[Trajectory, Any]]:
        out: list[EvaluationBatch[Trajectory, Any] | None] = [None] * len(items)

        async def one(index: int, candidate: dict[str, str], batch: Sequence[Any]) -> None:
            out[index] = await self._evaluate(batch, candidate, capture_traces)

        async with anyio.create_task_group() as tg:
            for index, (candidate, batch) in enumerate(items):
                tg.start_soon(one, index, candidate, batch)
        return [b for b in out if b is not None]

    def _log_hidden(self, example: Example, result: Result) -> None:
        """Log an error the reflection is not told in full (a metric's message may quote
        ``expected``): the user still learns why the metric failed."""
        error = result.error
        if error is None or from_program(error):
            return
        if error.message in self._logged or len(self._logged) > _LOGGED_ERRORS:
            return
        self._logged.add(error.message)
        more = (
            " (further distinct errors are not logged)"
            if len(self._logged) > _LOGGED_ERRORS
            else ""
        )
        logger.warning(
            "example %r: %s: %s; GEPA's reflection sees only that the metric failed%s",
            example.id,
            error.kind,
            error.message,
            more,
        )

    def _to_batch(
        self,
        examples: list[Example],
        shown: list[dict[str, Any]],
        results: list[Result],
        capture_traces: bool,
    ) -> EvaluationBatch[Trajectory, Any]:
        from gepa.core.adapter import EvaluationBatch

        if len(results) != len(examples):
            raise RuntimeError(
                f"the engine returned {len(results)} results for {len(examples)} examples"
            )
        outputs: list[Any] = []
        scores: list[float] = []
        objectives: list[dict[str, float]] = []
        trajectories: list[Trajectory] = []
        for example, inputs, result in zip(examples, shown, results, strict=True):
            score = result.score
            if result.error is not None:
                if self.failure_score is not None:
                    score = self.failure_score
                self._log_hidden(example, result)
            outputs.append(result.output)
            scores.append(score)
            objectives.append(dict(result.scores))
            if capture_traces:
                trajectories.append(
                    {
                        "example_id": example.id,
                        "input": inputs,
                        "output": result.output,
                        "score": score,
                        "scores": dict(result.scores),
                        "feedback": reflection_feedback(result),
                        "error": result.error.kind if result.error is not None else None,
                    }
                )
        return EvaluationBatch(
            outputs=outputs,
            scores=scores,
            trajectories=trajectories if capture_traces else None,
            objective_scores=_objective_scores(objectives, scores, results),
        )


def _calls_llm(metric: UserFunction) -> bool:
    """Whether the metric's module imported ``skynet.llm`` or ``skynet.allm`` by name."""
    from .._facade import allm, llm

    module = metric.module
    return module is not None and any(v is llm or v is allm for v in vars(module).values())


def _private(example: Example) -> Example:
    """The example with copies of its data, for the engine to hand to user code."""
    output = example.output
    return Example(
        id=example.id,
        input=private_copy(example.input),
        expected=private_copy(example.expected),
        output=output if output is NO_OUTPUT else private_copy(output),
    )


async def _awaited(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await fn(*args)


def _objective_scores(
    named: list[dict[str, float]], scores: list[float], results: list[Result]
) -> list[dict[str, float]] | None:
    """Named scores per example, or None when the metric names none.

    An error result has no named scores; GEPA's objective frontiers expect every
    objective on every example, so it gets its failure score under each name.
    """
    names: dict[str, None] = {}
    for item in named:
        names.update(dict.fromkeys(item))
    if not names:
        return None
    out: list[dict[str, float]] = []
    for item, score, result in zip(named, scores, results, strict=True):
        if result.error is not None and not item:
            item = dict.fromkeys(names, score)
        out.append(item)
    return out


def _record(trajectory: Trajectory) -> dict[str, Any]:
    """A reflective record (the shape GEPA's proposal prompt renders): no ``expected``."""
    output = trajectory["output"]
    if trajectory["error"] is not None and output is None:
        output = f"(no output: {trajectory['error']})"
    record: dict[str, Any] = {
        "Inputs": trajectory["input"],
        "Generated Outputs": output,
        "Feedback": trajectory["feedback"],
        "Score": trajectory["score"],
    }
    if trajectory["scores"]:
        record["Scores"] = dict(trajectory["scores"])
    return record
