"""The comparison statistics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from evaluator._report.html import compare_results
from evaluator._report.html._compare import pair_results, status_of

from ..conftest import result


class TestStatusOf:
    def test_tolerance_bounds_are_the_same(self) -> None:
        """A difference of exactly the tolerance is the same; past it, worse or better."""
        assert status_of(-0.1, 0.1) == "same" and status_of(0.1, 0.1) == "same"
        assert status_of(-0.11, 0.1) == "worse" and status_of(0.11, 0.1) == "better"
        assert status_of(0.0, 0.0) == "same" and status_of(1e-12, 0.0) == "better"


class TestPairResults:
    def test_matched_by_typed_id_in_this_runs_order(self) -> None:
        """Pairs follow this run's order; 1 and "1" do not match; the rest are listed."""
        current = [result("b", 1), result(1, 1), result("a", 1)]
        baseline = [result("a", 1), result("1", 1), result("b", 1), result("z", 1)]
        pairing = pair_results(current, baseline)
        assert pairing.pairs == [(0, 2), (2, 0)]
        assert pairing.only_current == [1]
        assert pairing.only_baseline == [1, 3]


class TestCompareResults:
    def test_by_hand(self) -> None:
        """Three matched examples (1 -> 0, 0.5 -> 0.5, 0 -> 0.75), one new, one missing:
        differences (-1, 0, 0.75), mean -0.25/3 exactly; one worse, one better, one same;
        the one-sided examples are counted apart and not in any mean."""
        current = [
            result("a", 0.0),
            result("b", 0.5),
            result("c", 0.75),
            result("new", 1.0),
        ]
        baseline = [
            result("c", 0.0),
            result("a", 1.0),
            result("b", 0.5),
            result("gone", 1.0),
        ]
        c = compare_results(current, baseline)
        assert c.matched == 3 and c.only_current == 1 and c.only_baseline == 1
        assert (c.worse, c.better, c.same) == (1, 1, 1)
        assert c.difference is not None
        assert c.difference.mean == math.fsum([-1.0, 0.0, 0.75]) / 3 == -0.25 / 3
        assert c.mean_current == 1.25 / 3 and c.mean_baseline == 1.5 / 3
        assert c.difference.low <= c.difference.mean <= c.difference.high
        assert c.difference.n == 3

    def test_errors_take_part_at_their_failure_score(self) -> None:
        """A new error is a regression at its recorded score, counted as newly failing;
        an error fixed is counted as fixed."""
        current = [result("a", 0.0, error="metric_timeout"), result("b", 1.0)]
        baseline = [result("a", 1.0), result("b", 0.0, error="program_error")]
        c = compare_results(current, baseline)
        assert (c.worse, c.better, c.newly_failing, c.fixed) == (1, 1, 1, 1)

    def test_tolerance_makes_small_moves_the_same(self) -> None:
        """With a tolerance, a reward's small speed jitter is not a change."""
        current = [result("a", 0.801), result("b", 0.5)]
        baseline = [result("a", 0.8), result("b", 0.7)]
        c = compare_results(current, baseline, tolerance=0.01)
        assert (c.worse, c.better, c.same) == (1, 0, 1)

    def test_nothing_in_common(self) -> None:
        """Disjoint runs: no difference and no interval, and the verdict says why."""
        c = compare_results([result("a", 1.0)], [result("b", 1.0)])
        assert c.matched == 0 and c.difference is None and c.mean_current is None
        assert c.verdict.startswith("no example is in both runs")

    def test_verdicts(self) -> None:
        """The verdict follows the interval: below 0, above 0, or spanning it."""
        same = [result(i, 1.0) for i in range(50)]
        worse = [result(i, 0.0) for i in range(50)]
        assert compare_results(worse, same).verdict.startswith("worse")
        assert compare_results(same, worse).verdict.startswith("better")
        mixed = [result(i, float(i % 2)) for i in range(50)]
        flipped = [result(i, float((i + 1) % 2)) for i in range(50)]
        assert compare_results(mixed, flipped).verdict.startswith("no clear difference")

    def test_named_scores_over_ok_pairs_that_have_them(self) -> None:
        """A named score's difference covers the pairs ok on both sides that returned it."""
        current = [
            result("a", 1.0, scores={"format": 1.0, "acc": 0.5}),
            result("b", 1.0, scores={"format": 0.0}),
            result("c", 0.0, scores={"format": 1.0}, error="metric_error"),
        ]
        baseline = [
            result("a", 1.0, scores={"format": 0.0, "acc": 1.0}),
            result("b", 1.0, scores={"format": 1.0}),
            result("c", 1.0, scores={"format": 0.0}),
        ]
        named = {n.name: n for n in compare_results(current, baseline).named}
        assert named["format"].n == 2 and named["format"].difference == 0.0
        assert named["acc"].n == 1 and named["acc"].difference == -0.5

    @pytest.mark.parametrize("tolerance", [-0.1, math.inf, math.nan])
    def test_a_bad_tolerance(self, tolerance: float) -> None:
        """A negative or non-finite tolerance is refused."""
        with pytest.raises(ValueError, match="`tolerance` must be 0 or more"):
            compare_results([result("a", 1.0)], [result("a", 1.0)], tolerance=tolerance)
