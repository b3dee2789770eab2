"""The page's view of a run's :class:`~evaluator._report._summary.Report`, and its charts' bins.

Every number here is the report's: :func:`summarize` feeds the results to the run's own
:class:`ReportBuilder` (with ``detail=True``: distributions, error groups, cost notes)
and :class:`RunSummary` only names its fields as the page and the terminal report read
them. ``n`` = ``ok`` + the errors of each kind; the mean over all examples counts each
error at the score it was recorded with, the mean over the ok ones says how many it
covers; a cost is a measured number only when every example it sums was measured,
otherwise None, with the count of unmeasured examples (and their reasons).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from llm_client import TokenUsage

from .._call._results import Result, repeat_of
from ._summary import (
    Distribution,
    ErrorGroup,
    ErrorMessage,
    RepeatSummary,
    Report,
    ReportBuilder,
    distribution,
    error_groups,
)

__all__ = [
    "Bin",
    "Distribution",
    "ErrorGroup",
    "ErrorMessage",
    "NamedMean",
    "RunSummary",
    "distribution",
    "error_groups",
    "histogram",
    "log_edges",
    "offline_report",
    "score_edges",
    "summarize",
    "summary_of",
]


class NamedMean(msgspec.Struct, frozen=True):
    """The mean of one named score over the ``count`` ok examples that returned it."""

    name: str
    mean: float
    count: int


class RunSummary(TokenUsage, frozen=True, kw_only=True, gc=True):
    """A :class:`Report` with detail under the names the page reads (:func:`summary_of`):
    nothing here is computed, only named. Its tokens are the report's
    :class:`~llm_client.TokenUsage`; ``report`` is the report itself (the terminal's rows
    are its rows, :func:`~evaluator._report._terminal.summary_rows`), left out of
    ``report --json`` (:meth:`fields`), which holds the same numbers under these names."""

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
    report: Report

    @property
    def error_count(self) -> int:
        return self.n - self.ok

    def fields(self) -> dict[str, Any]:
        """The summary as ``report --json`` writes it: every field but ``report``."""
        out = msgspec.structs.asdict(self)
        del out["report"]
        return out


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


def offline_report(results: Sequence[Result]) -> Report:
    """The :class:`Report` of a results file's results: the run's own builder, with the
    page's detail, over as many passes as the results were made in."""
    passes = 1 + max((repeat_of(r) for r in results), default=0)
    builder = ReportBuilder(repeats=passes, detail=True)
    builder.add_many(results)
    return builder.build(wall_s=0.0)


def summarize(results: Sequence[Result], meta: Mapping[str, Any] | None = None) -> RunSummary:
    """The summary of ``results`` (:func:`offline_report`, viewed by :func:`summary_of`);
    ``meta`` may give ``wall_s`` (and ``throughput``), which a results file does not
    record, so a report of a file alone shows them as unknown."""
    return summary_of(offline_report(results), meta)


def summary_of(report: Report, meta: Mapping[str, Any] | None = None) -> RunSummary:
    """``report`` under the page's names (it must have been built with ``detail=True``)."""
    detail = report.detail
    if detail is None:
        raise ValueError("the report was built without detail: ReportBuilder(detail=True)")
    wall = _number(meta, "wall_s")
    throughput = _number(meta, "throughput")
    if throughput is None and wall and "throughput" not in (meta or {}):
        # Only when nothing says otherwise: a run that recorded None could not tell
        # its rate (its results were made before its clock started).
        throughput = report.n / wall
    return RunSummary(
        n=report.n,
        ok=report.ok,
        errors=report.errors,
        failure_scores=list(detail.failure_scores),
        mean_score=math.nan if report.mean_score is None else report.mean_score,
        mean_score_ok=report.mean_score_ok,
        named=[NamedMean(name, s.mean, s.count) for name, s in report.scores.items()],
        program_ran=detail.program_ms.count,
        program_cost_usd=report.program_cost_usd,
        program_cost_unmeasured=report.program_cost_unmeasured,
        judge_calls=report.judge_llm_calls,
        judge_cost_usd=report.judge_cost_usd,
        judge_cost_unmeasured=report.judge_cost_unmeasured,
        cost_notes=list(detail.cost_notes),
        program_calls=report.program_llm_calls,
        input_tokens=report.input_tokens,
        output_tokens=report.output_tokens,
        cached_tokens=report.cached_tokens,
        reasoning_tokens=report.reasoning_tokens,
        rate_limited=report.rate_limited,
        retries=report.retries,
        program_ms=detail.program_ms,
        program_own_ms=detail.program_own_ms,
        metric_ms=detail.metric_ms,
        program_cost=detail.program_cost,
        judge_cost=detail.judge_cost,
        error_groups=list(detail.error_groups),
        wall_s=wall,
        throughput=throughput,
        repeats=report.repeats,
        report=report,
    )


def _number(meta: Mapping[str, Any] | None, key: str) -> float | None:
    if not meta:
        return None
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None
