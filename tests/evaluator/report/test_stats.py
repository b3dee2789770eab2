"""One run's numbers: the run's own definitions, exact percentiles, costs never made up."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evaluator import ReportBuilder
from evaluator._report._stats import (
    distribution,
    error_groups,
    histogram,
    log_edges,
    score_edges,
)
from evaluator._report.html import summarize

from .conftest import result

RESULTS = [
    result("a", 1.0, scores={"acc": 1.0, "fmt": 1.0}, duration_ms=10.0, cost_usd=0.002),
    result("b", 0.5, scores={"acc": 0.5}, duration_ms=20.0, cost_usd=0.001),
    result("c", 0.0, error="metric_timeout", message="timed out after 60 s", duration_ms=30.0),
    result(
        "d", 0.0, error="program_error", message="KeyError: 'x'\nTraceback ...", duration_ms=40.0
    ),
    result("e", 0.0, error="metric_timeout", message="timed out after 60 s", duration_ms=50.0),
]


class TestSummarize:
    def test_agrees_with_the_runs_own_report(self) -> None:
        """Counts, means, named scores and costs are those `skynet-eval run` prints."""
        builder = ReportBuilder()
        builder.add_many(RESULTS)
        run = builder.build()
        s = summarize(RESULTS)
        assert (s.n, s.ok, s.errors) == (run.n, run.ok, run.errors)
        assert s.mean_score == run.mean_score and s.mean_score_ok == run.mean_score_ok
        assert {m.name: (m.mean, m.count) for m in s.named} == {
            name: (named.mean, named.count) for name, named in run.scores.items()
        }
        assert s.program_cost_usd == pytest.approx(run.program_cost_usd)
        assert s.judge_cost_usd == run.judge_cost_usd

    def test_by_hand(self) -> None:
        """Five results, three errors: mean over all 1.5/5, over ok 1.5/2; errors by
        kind in the engine's order; errors were recorded at 0."""
        s = summarize(RESULTS)
        assert s.n == 5 and s.ok == 2 and s.error_count == 3
        assert list(s.errors.items()) == [("program_error", 1), ("metric_timeout", 2)]
        assert s.mean_score == 1.5 / 5 and s.mean_score_ok == 0.75
        assert s.failure_scores == [0.0]
        assert [(m.name, m.mean, m.count) for m in s.named] == [("acc", 0.75, 2), ("fmt", 1.0, 1)]

    def test_exact_percentiles(self) -> None:
        """Program times 10..50 ms: p50 30, p95 48, p99 49.6 (linear interpolation)."""
        s = summarize(RESULTS)
        assert (s.program_ms.p50, s.program_ms.p95, s.program_ms.p99) == pytest.approx(
            (30.0, 48.0, 49.6)
        )
        assert s.program_ms.min == 10.0 and s.program_ms.max == 50.0 and s.program_ms.mean == 30.0

    def test_an_unmeasured_cost_is_never_zero(self) -> None:
        """One example without a known price makes the total unmeasured (None), counted,
        with the reason the run recorded."""
        note = "cost not measured: no price known for model 'm'; set --price-input"
        results = [result("a", 1.0, cost_usd=0.5), result("b", 1.0, cost_usd=None, notes=(note,))]
        s = summarize(results)
        assert s.program_cost_usd is None and s.program_cost_unmeasured == 1
        assert s.program_cost.total == 0.5 and s.program_cost.count == 1
        assert s.cost_notes == [(f"program: {note}", 1)]

    def test_judge_cost_unmeasured(self) -> None:
        """A judge call without a price makes the judge's cost unmeasured."""
        s = summarize([result("a", 1.0, judge_calls=1, judge_cost=None)])
        assert s.judge_cost_usd is None and s.judge_cost_unmeasured == 1
        assert s.cost_notes == [("judge: no reason recorded", 1)]

    def test_a_score_only_run_has_no_program_cost(self) -> None:
        """Without a program there is no program time nor cost, rather than zeros."""
        s = summarize([result("a", 1.0, duration_ms=None)])
        assert s.program_ran == 0 and s.program_cost_usd is None and s.program_ms.count == 0

    def test_wall_time_comes_from_the_run(self) -> None:
        """A file does not record wall time: unknown unless the run gives it."""
        assert summarize(RESULTS).wall_s is None and summarize(RESULTS).throughput is None
        s = summarize(RESULTS, {"wall_s": 2.0})
        assert s.wall_s == 2.0 and s.throughput == 2.5


class TestErrorGroups:
    def test_messages_grouped_by_first_line_with_first_examples(self) -> None:
        """Each kind lists its messages by count (first line only) and where they occur."""
        groups = {g.kind: g for g in error_groups(RESULTS)}
        timeout = groups["metric_timeout"]
        assert timeout.count == 2
        assert [(m.message, m.count, m.rows) for m in timeout.messages] == [
            ("timed out after 60 s", 2, [2, 4])
        ]
        assert groups["program_error"].messages[0].message == "KeyError: 'x'"

    def test_many_messages_are_cut_to_the_commonest(self) -> None:
        """Past five distinct messages, the rest are counted, not listed."""
        results = [result(i, 0.0, error="llm_error", message=f"m{i % 7}") for i in range(70)]
        (group,) = error_groups(results)
        assert len(group.messages) == 5 and group.other_messages == 2
        assert group.messages[0].rows == [0, 7, 14, 21, 28]


class TestDistribution:
    def test_none_values_are_counted_as_missing(self) -> None:
        """Unmeasured values are left out of the figures and counted."""
        d = distribution([1.0, None, 3.0])
        assert (d.count, d.missing, d.total, d.mean, d.p50) == (2, 1, 4.0, 2.0, 2.0)

    def test_nothing_measured(self) -> None:
        """No value: no figure at all, not zeros."""
        d = distribution([None, None])
        assert d.count == 0 and d.missing == 2 and d.p50 is None and d.total is None


class TestHistograms:
    def test_scores_in_the_unit_interval_use_twenty_fixed_bins(self) -> None:
        """Scores in [0, 1] share fixed bins, so two runs' charts line up."""
        edges = score_edges([0.2, 0.3])
        assert len(edges) == 21 and edges[0] == 0.0 and edges[-1] == 1.0

    def test_other_scores_span_their_range(self) -> None:
        """Scores outside [0, 1] get bins over their own span; one value gets one bin."""
        assert score_edges([-2.0, 3.0])[0] == -2.0 and score_edges([-2.0, 3.0])[-1] == 3.0
        assert score_edges([5.0, 5.0]) == [4.5, 5.5]

    @given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=200))
    def test_every_score_lands_in_exactly_one_bin(self, scores: list[float]) -> None:
        """The bins count each score once, the top score included."""
        bins = histogram(score_edges(scores), scores)
        assert sum(b.counts[0] for b in bins) == len(scores)

    @given(st.lists(st.floats(1e-6, 1e6), min_size=1, max_size=200))
    def test_log_bins_hold_every_positive_value(self, values: list[float]) -> None:
        """Log-scale bins span the positive values exactly, ends included."""
        edges = log_edges(values)
        assert edges is not None
        assert sum(b.counts[0] for b in histogram(edges, values)) == len(values)

    def test_log_bins_without_positive_values(self) -> None:
        """Only zeros: no log-scale bins (the chart counts the zeros apart)."""
        assert log_edges([0.0, 0.0]) is None
        edges = log_edges([2.0, 2.0])
        assert edges is not None and len(edges) == 6
        assert math.isclose(edges[0], 1.6) and math.isclose(edges[-1], 2.5)
        assert sum(b.counts[0] for b in histogram(edges, [2.0, 2.0])) == 2
