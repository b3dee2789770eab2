"""Result assembly: from examples to calls, and from outcomes to results. Pure functions.

The per-example work here is the engine's own cost per example, paid once per example
on the event loop's thread: comprehensions and positional struct construction (in field
order: twice as fast as keywords, see ``Result``), no per-example function calls beyond
the structs themselves. Nothing here awaits or touches an executor; the meters of model
usage (token -> :class:`~evaluator._models.Meter`) are popped as their examples are done.

Every example yields exactly one :class:`Result`: a failed call's result carries its
``ErrorInfo`` (kind and message, from :mod:`evaluator._call._failures`) as its feedback, and
scores ``failure_score``. That holds by construction, not only by each executor's
promise: a call without an outcome, or a chunk without its results, gets an explicit
``cancelled`` error result naming the engine as the cause (:func:`complete`,
:func:`lost`), and :func:`check_result_count` is the last check a caller (the command
line) makes: a run with fewer results than examples must not pass for a complete one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .._call import _failures as failures
from .._call._calls import Outcome, RunCall, ScoreCall
from .._call._context import Stage
from .._call._results import Observation, Result, Usage
from .._data._dataset import NO_OUTPUT, Example
from .._models import Meter

__all__ = [
    "NO_USAGE",
    "SCORE_ONLY",
    "after_program",
    "budget_exhausted",
    "check_result_count",
    "complete",
    "fill_holes",
    "lost",
    "missing_output",
    "run_calls",
    "score_only_calls",
    "scored_results",
    "with_missing_outputs",
]

#: The observation of every example of a score-only run: nothing was measured.
SCORE_ONLY = Observation(
    duration_ms=None,
    cost_usd=None,
    notes=(
        "time not measured: score-only run (no program)",
        "cost not measured: score-only run (no program)",
    ),
)
#: The observation of a program call whose worker ended before it could report.
_WORKER_ENDED = ("time not measured: the program's worker ended",)
#: The judge usage of a metric call that made no model call.
NO_USAGE = Usage()
#: The observation of an example not run: its budget ran out first (nothing was spent).
_NOT_RUN = Observation(
    duration_ms=None, notes=("time not measured: not run, its budget ran out first",)
)
#: The observation of an example whose result the engine lost.
_NOT_MEASURED = Observation(
    duration_ms=None,
    cost_usd=None,
    notes=("time not measured: no result", "cost not measured: no result"),
)


def run_calls(artifact: Any, examples: list[Example], base: int) -> list[RunCall]:
    """The program's calls on ``examples``, with tokens ``base ..``."""
    tokens = range(base, base + len(examples))
    return [
        RunCall(token, ex.id, artifact, ex.input)
        for token, ex in zip(tokens, examples, strict=True)
    ]


def score_only_calls(examples: list[Example], base: int) -> list[ScoreCall]:
    """The metric's calls of a score-only run: each example's own output, if it has one."""
    obs = SCORE_ONLY
    tokens = range(base, base + len(examples))
    return [
        ScoreCall(token, ex.id, ex.input, ex.output, ex.expected, obs)
        for token, ex in zip(tokens, examples, strict=True)
        if ex.output is not NO_OUTPUT
    ]


def _program_observation(outcome: Outcome, meter: Meter | None) -> Observation:
    """What the engine measured of one program call: its time, and its model usage."""
    if outcome.started_ns:
        duration: float | None = (outcome.ended_ns - outcome.started_ns) / 1e6
    else:
        duration = None
    if meter is not None:
        return meter.observation(duration)
    if duration is None:
        return Observation(duration_ms=None, notes=_WORKER_ENDED)
    return Observation(duration_ms=duration)


def after_program(
    examples: list[Example],
    calls: list[RunCall],
    outcomes: list[Outcome],
    meters: dict[int, Meter],
    failure_score: float,
) -> tuple[list[Result | None], list[ScoreCall], list[int]]:
    """The run stage's results: an error result per failed program call, a hole (None)
    per example to score, the metric's calls for those, and where each goes."""
    results: list[Result | None] = []
    score_calls: list[ScoreCall] = []
    where: list[int] = []
    if len(outcomes) != len(calls):  # an executor broke its promise: pad, never drop
        outcomes = [*outcomes[: len(calls)], *[None] * (len(calls) - len(outcomes))]  # type: ignore[list-item]
    for i, (ex, call, outcome) in enumerate(zip(examples, calls, outcomes, strict=True)):
        if outcome is None:  # no outcome for this call (a bug of the engine's)
            outcome = _no_outcome("run")
        meter = meters.pop(call.token, None) if meters else None
        observation = _program_observation(outcome, meter)
        error = outcome.error
        if error is not None:
            results.append(
                Result(ex.id, failure_score, {}, error.message, error, observation, NO_USAGE)
            )
        else:
            results.append(None)
            score_calls.append(
                ScoreCall(call.token, ex.id, ex.input, outcome.value, ex.expected, observation)
            )
            where.append(i)
    return results, score_calls, where


def scored_results(
    calls: list[ScoreCall],
    outcomes: list[Outcome],
    meters: dict[int, Meter],
    failure_score: float,
) -> tuple[list[Result], int]:
    """The results of scored calls, in order, and how many are errors: the hot loop of a
    cheap metric."""
    no_usage = NO_USAGE
    out: list[Result] = []
    append = out.append
    errors = 0
    if len(outcomes) != len(calls):  # an executor broke its promise: pad, never drop
        outcomes = [*outcomes[: len(calls)], *[None] * (len(calls) - len(outcomes))]  # type: ignore[list-item]
    for call, outcome in zip(calls, outcomes, strict=True):
        try:
            error = outcome.error
        except AttributeError:  # no outcome for this call (a bug of the engine's)
            outcome = _no_outcome("score")
            error = outcome.error
        judge = no_usage
        if meters:
            meter = meters.pop(call.token, None)
            if meter is not None:
                judge = meter.usage()
        started = outcome.started_ns
        metric_ms = (outcome.ended_ns - started) / 1e6 if started else None
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
                    call.output,
                    s.extra,
                )
            )
        else:
            errors += 1
            append(
                Result(
                    call.example_id,
                    failure_score,
                    {},
                    error.message,
                    error,
                    call.observation,  # type: ignore[arg-type]  # set on every score call
                    judge,
                    metric_ms,
                    call.output,
                    {},
                )
            )
    return out, errors


def missing_output(ex: Example, failure_score: float) -> Result:
    """The result of a score-only example with no output to score."""
    error = failures.missing_output(ex.id)
    return Result(
        example_id=ex.id,
        score=failure_score,
        feedback=error.message,
        error=error,
        observation=SCORE_ONLY,
    )


def with_missing_outputs(
    examples: list[Example], results: list[Result], failure_score: float
) -> list[Result]:
    """``results`` of the examples that had an output, with a ``missing_output`` result
    in the place of each example that had none."""
    it = iter(results)
    return [
        missing_output(ex, failure_score) if ex.output is NO_OUTPUT else next(it) for ex in examples
    ]


def _no_outcome(stage: Stage) -> Outcome:
    return Outcome(None, failures.no_outcome(stage))


def lost(examples: list[Example], failure_score: float, why: str) -> list[Result]:
    """An error result for each of ``examples``, whose results were lost (``why``)."""
    error = failures.lost_results(why)
    return [
        Result(ex.id, failure_score, {}, error.message, error, _NOT_MEASURED, NO_USAGE)
        for ex in examples
    ]


def budget_exhausted(examples: list[Example], failure_score: float, why: str) -> list[Result]:
    """A ``budget_exhausted`` result for each of ``examples``, not started (``why``)."""
    return [
        Result(ex.id, failure_score, {}, e.message, e, _NOT_RUN, NO_USAGE)
        for ex in examples
        for e in (failures.budget_exhausted(ex.id, why),)
    ]


def refused(
    results: list[Result], base: int, tokens: set[int], why: str, failure_score: float
) -> tuple[list[Result], int]:
    """``results`` (tokens ``base ..``) with each whose example had a model call refused
    by its budget (its token in ``tokens``, taken out) made ``budget_exhausted``, keeping
    what its calls before that spent; and how many were ok before."""
    out: list[Result] = []
    were_ok = 0
    for i, result in enumerate(results):
        token = base + i
        if token in tokens:
            tokens.discard(token)
            were_ok += result.error is None
            error = failures.budget_exhausted(result.example_id, why)
            result = msgspec.structs.replace(
                result, score=failure_score, error=error, feedback=error.message, scores={}
            )
        out.append(result)
    return out, were_ok


def complete(
    examples: list[Example], results: Sequence[Result | None], failure_score: float
) -> tuple[list[Result], int]:
    """``results`` (one per example, in order) with an error result in the place of each
    one missing; and how many were missing."""
    missing = 0
    out: list[Result] = []
    for i, ex in enumerate(examples):
        result = results[i] if i < len(results) else None
        if result is None:
            missing += 1
            result = lost([ex], failure_score, "the engine produced no result for it")[0]
        out.append(result)
    return out, missing


def check_result_count(examples: int, results: int) -> str | None:
    """None when a run has a result for each of its ``examples``; else what went wrong,
    in the words a command line prints before it exits non-zero.

    ``examples``: how many the run was given; ``results``: how many results it counted
    for them (resumed ones included).
    """
    if results >= examples:
        return None
    return (
        f"{examples - results:,} of {examples:,} examples have no result ({results:,} "
        "results): the run is incomplete. Every example should get exactly one result, "
        "even when it fails: this is a bug of skynet-eval, please report it with this "
        "message. The results written so far are kept; --resume runs the missing examples"
    )


def fill_holes(
    results: list[Result | None], where: list[int], scored: list[Result]
) -> list[Result]:
    """The run stage's results with the scored ones in their places (``scored_results``
    gives one per score call, so every hole is filled)."""
    for i, result in zip(where, scored, strict=True):
        results[i] = result
    return results  # type: ignore[return-value]  # every hole is filled
