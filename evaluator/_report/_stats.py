"""The numbers of one run: counts, means, costs, percentiles, histograms, error groups.

The counts, means and costs are the run's own summary's (``evaluator._report``'s
``ReportBuilder`` computes them for both): ``n`` = ``ok``
+ the errors of each kind; the mean over all examples counts each error at the score it
was recorded with (the failure score), the mean over the ok ones says how many it covers;
a named score's mean covers the ok examples that returned it; a cost is a measured number
only when every example it sums was measured, otherwise it is None and the count of
unmeasured examples (and their reasons) says why. Percentiles are exact, as the run's:
:func:`evaluator._stats.percentiles` (linear interpolation between order statistics).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from .._call._results import ERROR_KINDS, Result, repeat_of
from .._stats import percentiles
from ._summary import RepeatSummary, ReportBuilder

__all__ = [
    "Bin",
    "Distribution",
    "ErrorGroup",
    "ErrorMessage",
    "NamedMean",
    "RunSummary",
    "distribution",
    "histogram",
    "log_edges",
    "score_edges",
    "summarize",
]

_TOP_MESSAGES = 5
_FIRST_EXAMPLES = 5
_MESSAGE_CHARS = 240


class Distribution(msgspec.Struct, frozen=True, kw_only=True):
    """One measured quantity over the examples that have it; None where nothing was."""

    count: int = 0
    missing: int = 0
    total: float | None = None
    mean: float | None = None
    min: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


class NamedMean(msgspec.Struct, frozen=True):
    """The mean of one named score over the ``count`` ok examples that returned it."""

    name: str
    mean: float
    count: int


class ErrorMessage(msgspec.Struct, frozen=True):
    """One distinct error message (its first line) of a kind: how often, and where first."""

    message: str
    count: int
    rows: list[int]  # indices into the run's results, the first few in file order


class ErrorGroup(msgspec.Struct, frozen=True):
    """The errors of one kind: their count, and their commonest messages."""

    kind: str
    count: int
    messages: list[ErrorMessage]
    other_messages: int  # distinct messages beyond those listed


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """Counts, means, costs, time and errors of one run, with explicit denominators."""

    n: int
    ok: int
    errors: dict[str, int]
    failure_scores: list[float]  # the distinct scores errors were recorded with
    mean_score: float
    mean_score_ok: float | None
    named: list[NamedMean]
    program_ran: int  # examples whose program ran (0 in a score-only run)
    program_cost_usd: float | None
    program_cost_unmeasured: int
    judge_calls: int
    judge_cost_usd: float | None
    judge_cost_unmeasured: int
    cost_notes: list[tuple[str, int]]  # why costs were not measured, with counts
    program_calls: int
    input_tokens: int
    output_tokens: int
    rate_limited: int
    retries: int
    program_ms: Distribution
    program_own_ms: Distribution
    metric_ms: Distribution
    program_cost: Distribution  # per example, over the measured ones
    judge_cost: Distribution
    error_groups: list[ErrorGroup]
    wall_s: float | None = None
    throughput: float | None = None
    repeats: RepeatSummary | None = None
    """Each example's score variance over the passes of ``run --repeat K``."""

    @property
    def error_count(self) -> int:
        return self.n - self.ok


def distribution(values: Sequence[float | None]) -> Distribution:
    """Count, total, mean, min, p50/p95/p99 and max of the values that are not None."""
    measured = [v for v in values if v is not None]
    missing = len(values) - len(measured)
    if not measured:
        return Distribution(missing=missing)
    p50, p95, p99 = percentiles(measured, [0.5, 0.95, 0.99])
    total = math.fsum(measured)
    return Distribution(
        count=len(measured),
        missing=missing,
        total=total,
        mean=total / len(measured),
        min=float(min(measured)),
        p50=p50,
        p95=p95,
        p99=p99,
        max=float(max(measured)),
    )


class Bin(msgspec.Struct, frozen=True):
    """One histogram bar: ``[lo, hi)`` (the last bin includes ``hi``), a count per series."""

    lo: float
    hi: float
    counts: tuple[int, ...]


def score_edges(values: Sequence[float], bins: int = 20) -> list[float]:
    """Bin edges for scores: twenty steps of 0.05 when every score lies in [0, 1] (the
    usual case, so two runs' charts line up), else the span of the values."""
    if not values:
        return [0.0, 1.0]
    low, high = min(values), max(values)
    if low >= 0.0 and high <= 1.0:
        low, high = 0.0, 1.0
    elif low == high:
        return [low - 0.5, high + 0.5]
    # i / bins rather than i * step: 19 / 20 is the double nearest 0.95, 19 * 0.05 is not.
    return [low + (high - low) * i / bins for i in range(bins)] + [high]


def histogram(edges: Sequence[float], *series: Sequence[float]) -> list[Bin]:
    """Counts of each series in the bins between ``edges`` (values outside are left out)."""
    import numpy as np

    counted = [
        np.histogram(np.asarray(values, dtype=np.float64), bins=np.asarray(edges))[0]
        if len(values)
        else np.zeros(len(edges) - 1, dtype=np.int64)
        for values in series
    ]
    return [
        Bin(float(edges[i]), float(edges[i + 1]), tuple(int(c[i]) for c in counted))
        for i in range(len(edges) - 1)
    ]


def log_edges(*series: Sequence[float], bins: int = 24) -> list[float] | None:
    """Bin edges of equal ratio spanning the positive values of every series (None when
    there is none: a zero has no place on a log axis, so charts count zeros apart)."""
    import numpy as np

    positive = [v for values in series for v in values if v > 0.0]
    if not positive:
        return None
    low, high = min(positive), max(positive)
    if low == high:
        # One value: a few narrow bins around it, so it reads as one bar, not a wall.
        return [float(e) for e in np.geomspace(low / 1.25, high * 1.25, 6)]
    edges = [float(e) for e in np.geomspace(low, high, bins + 1)]
    edges[0], edges[-1] = low, high  # exact ends: geomspace may round them
    return edges


def _named_means(results: Sequence[Result]) -> list[NamedMean]:
    sums: dict[str, list[float]] = {}
    for result in results:
        if result.error is None and result.scores:
            for name, value in result.scores.items():
                sums.setdefault(name, []).append(value)
    return [NamedMean(name, math.fsum(v) / len(v), len(v)) for name, v in sorted(sums.items())]


def _first_line(message: str) -> str:
    line = message.strip().split("\n", 1)[0].strip()
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 1] + "…"


def error_groups(results: Sequence[Result]) -> list[ErrorGroup]:
    """Errors by kind (in the engine's order of kinds), each with its commonest messages
    and the first examples that gave each."""
    by_kind: dict[str, dict[str, list[int]]] = {}
    counts: Counter[str] = Counter()
    for index, result in enumerate(results):
        error = result.error
        if error is None:
            continue
        counts[error.kind] += 1
        rows = by_kind.setdefault(error.kind, {}).setdefault(_first_line(error.message), [])
        rows.append(index)
    kinds = [k for k in ERROR_KINDS if k in counts] + sorted(
        k for k in counts if k not in ERROR_KINDS
    )
    groups = []
    for kind in kinds:
        messages = sorted(by_kind[kind].items(), key=lambda item: (-len(item[1]), item[1][0]))
        groups.append(
            ErrorGroup(
                kind=kind,
                count=counts[kind],
                messages=[
                    ErrorMessage(message, len(rows), rows[:_FIRST_EXAMPLES])
                    for message, rows in messages[:_TOP_MESSAGES]
                ],
                other_messages=max(0, len(messages) - _TOP_MESSAGES),
            )
        )
    return groups


def _cost_notes(results: Sequence[Result]) -> list[tuple[str, int]]:
    notes: Counter[str] = Counter()
    for result in results:
        obs = result.observation
        if obs.cost_usd is None and obs.duration_ms is not None:
            notes.update([f"program: {n}" for n in obs.notes] or ["program: no reason recorded"])
        judge = result.judge
        if judge.cost_usd is None:
            notes.update([f"judge: {n}" for n in judge.notes] or ["judge: no reason recorded"])
    return notes.most_common(3)


def summarize(results: Sequence[Result], meta: Mapping[str, Any] | None = None) -> RunSummary:
    """The summary of ``results``; ``meta`` may give ``wall_s`` (and ``throughput``), which
    a results file does not record, so a report of a file alone shows them as unknown.

    What is counted is the run's own builder's (:class:`ReportBuilder`, the one place the
    counts are defined); a file's report holds every value, so its sums are exact
    (``math.fsum``, where the live builder keeps running sums that agree to rounding); and
    it adds what only a page shows: distributions, error groups, why costs went
    unmeasured."""
    passes = 1 + max((repeat_of(r) for r in results), default=0)
    builder = ReportBuilder(repeats=passes)
    builder.add_many(results)
    run = builder.build(wall_s=0.0)
    # Column by column (comprehensions), which is several times faster than one loop
    # that appends to many lists: a report of 100,000 examples is built in seconds.
    ran = [o for o in (r.observation for r in results) if o.duration_ms is not None]
    program_ms: list[float | None] = [o.duration_ms for o in ran]
    own_ms: list[float | None] = [max(0.0, o.duration_ms - o.queued_ms) for o in ran]  # type: ignore[operator]
    n = len(results)
    program = distribution([o.cost_usd for o in ran])
    judges = distribution([r.judge.cost_usd for r in results])
    ok_scores = [r.score for r in results if r.error is None]
    wall = _number(meta, "wall_s")
    throughput = _number(meta, "throughput")
    if throughput is None and wall and "throughput" not in (meta or {}):
        # Only when nothing says otherwise: a run that recorded None could not tell
        # its rate (its results were made before its clock started).
        throughput = n / wall
    return RunSummary(
        n=n,
        ok=run.ok,
        errors=run.errors,
        failure_scores=sorted({r.score for r in results if r.error is not None}),
        mean_score=math.fsum(r.score for r in results) / n if n else math.nan,
        mean_score_ok=math.fsum(ok_scores) / len(ok_scores) if ok_scores else None,
        named=_named_means(results),
        program_ran=len(program_ms),
        program_cost_usd=program.total if run.program_cost_usd is not None else None,
        program_cost_unmeasured=run.program_cost_unmeasured,
        judge_calls=run.judge_llm_calls,
        judge_cost_usd=(judges.total or 0.0) if run.judge_cost_usd is not None else None,
        judge_cost_unmeasured=run.judge_cost_unmeasured,
        cost_notes=_cost_notes(results),
        program_calls=run.program_llm_calls,
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        rate_limited=run.rate_limited,
        retries=run.retries,
        program_ms=distribution(program_ms),
        program_own_ms=distribution(own_ms),
        metric_ms=distribution([r.metric_ms for r in results]),
        program_cost=program,
        judge_cost=judges,
        error_groups=error_groups(results),
        wall_s=wall,
        throughput=throughput,
        repeats=run.repeats,
    )


def _number(meta: Mapping[str, Any] | None, key: str) -> float | None:
    if not meta:
        return None
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None
