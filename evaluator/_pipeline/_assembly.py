"""Result assembly: from examples to calls, and from outcomes to results. Pure functions.

The per-example work here is the engine's own cost per example, paid once per example
on the event loop's thread: comprehensions and positional struct construction (in field
order: twice as fast as keywords, see ``Result``), no per-example function calls beyond
the structs themselves. Nothing here awaits or touches an executor; the meters of model
usage (token -> :class:`~evaluator._models.Meter`) are popped as their examples are done.

Every example yields exactly one :class:`Result`: a failed call's result carries its
``ErrorInfo`` (kind and message, from :mod:`evaluator._failures`) as its feedback, and
scores ``failure_score``.
"""

from __future__ import annotations

from typing import Any

from .. import _failures as failures
from .._calls import Outcome, RunCall, ScoreCall
from .._dataset import NO_OUTPUT, Example
from .._models import Meter
from .._results import Observation, Result, Usage

__all__ = [
    "NO_USAGE",
    "SCORE_ONLY",
    "after_program",
    "fill_holes",
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
    for i, (ex, call, outcome) in enumerate(zip(examples, calls, outcomes, strict=True)):
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


def fill_holes(
    results: list[Result | None], where: list[int], scored: list[Result]
) -> list[Result]:
    """The run stage's results with the scored ones in their places."""
    for i, result in zip(where, scored, strict=True):
        results[i] = result
    return results  # type: ignore[return-value]  # every hole is filled
