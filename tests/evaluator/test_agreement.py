"""Tests of ``evaluator._agreement``: agreement, kappa, Pearson, bootstrap, Pareto front,
each against values worked out by hand on small fixed sets."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import pytest

from evaluator._agreement import (
    agreement_rate,
    bootstrap_ci,
    cohens_kappa,
    pareto_front,
    pearson,
)

# The textbook 2x2 table: 20 both yes, 5 A-yes/B-no, 10 A-no/B-yes, 15 both no.
# p_o = 35/50 = 0.7; A says yes 25/50, B 30/50; p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa 0.4.
TABLE_A = ["yes"] * 20 + ["yes"] * 5 + ["no"] * 10 + ["no"] * 15
TABLE_B = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15


def _rate(sample: Sequence[tuple[Hashable, Hashable]]) -> float:
    return agreement_rate([a for a, _ in sample], [b for _, b in sample])


def _mean_first(sample: Sequence[tuple[float, float]]) -> float:
    return sum(a for a, _ in sample) / len(sample)


class TestAgreementRate:
    def test_hand_computed(self) -> None:
        """Three of four verdicts agree: 0.75."""
        assert agreement_rate([1, 1, 0, 0], [1, 0, 0, 0]) == 0.75

    def test_table(self) -> None:
        """The textbook table agrees on 35 of 50 items."""
        assert agreement_rate(TABLE_A, TABLE_B) == 0.7

    def test_categorical(self) -> None:
        """Any labels compare by equality."""
        assert agreement_rate(["a", "b", "c"], ["a", "b", "b"]) == pytest.approx(2 / 3)

    def test_unequal_lengths(self) -> None:
        """Sequences that do not pair up are refused with both lengths."""
        with pytest.raises(ValueError, match="3 and 2"):
            agreement_rate([1, 0, 1], [1, 0])

    def test_empty(self) -> None:
        """No pairs at all is refused rather than divided by zero."""
        with pytest.raises(ValueError, match="at least one pair"):
            agreement_rate([], [])


class TestCohensKappa:
    def test_textbook_table(self) -> None:
        """p_o 0.7 and p_e 0.5 give kappa 0.4."""
        assert cohens_kappa(TABLE_A, TABLE_B) == pytest.approx(0.4)

    def test_chance_level(self) -> None:
        """Agreement exactly at chance (p_o = p_e = 0.5) gives 0."""
        assert cohens_kappa([1, 1, 0, 0], [1, 0, 1, 0]) == 0.0

    def test_one_rater_constant(self) -> None:
        """A rater who always says yes agrees only by chance: p_o = p_e = 3/4, kappa 0."""
        assert cohens_kappa([1, 1, 1, 1], [1, 1, 1, 0]) == 0.0

    def test_perfect_disagreement(self) -> None:
        """Opposite verdicts on a balanced set give -1."""
        assert cohens_kappa([1, 0, 1, 0], [0, 1, 0, 1]) == -1.0

    def test_perfect_agreement(self) -> None:
        """Identical varied verdicts give 1."""
        assert cohens_kappa(["a", "b", "a", "c"], ["a", "b", "a", "c"]) == 1.0

    def test_all_agree_on_one_label(self) -> None:
        """Both raters give one same label everywhere (p_e = 1, 0/0): defined as 1.0."""
        assert cohens_kappa(["PASS"] * 5, ["PASS"] * 5) == 1.0

    def test_categorical(self) -> None:
        """Three classes: p_o = 3/4, p_e = (2*1 + 1*2 + 1*1)/16 = 5/16, kappa = 7/11."""
        assert cohens_kappa(["A", "A", "B", "C"], ["A", "B", "B", "C"]) == pytest.approx(7 / 11)

    def test_symmetric(self) -> None:
        """Swapping the raters does not change kappa."""
        assert cohens_kappa(TABLE_B, TABLE_A) == cohens_kappa(TABLE_A, TABLE_B)

    def test_unequal_lengths(self) -> None:
        """Sequences that do not pair up are refused."""
        with pytest.raises(ValueError, match="cohens_kappa"):
            cohens_kappa([1], [1, 0])


class TestPearson:
    def test_perfect(self) -> None:
        """An exact positive and negative linear relation give 1 and -1."""
        assert pearson([1, 2, 3], [2, 4, 6]) == 1.0
        assert pearson([1, 2, 3], [6, 4, 2]) == -1.0

    def test_hand_computed(self) -> None:
        """Deviations (-1.5,-.5,.5,1.5) and (-1.5,.5,-.5,1.5): 4 / sqrt(5*5) = 0.8."""
        assert pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)

    def test_uncorrelated(self) -> None:
        """Deviations (-1,-1,1,1) and (-1,1,-1,1) have zero covariance."""
        assert pearson([0, 0, 1, 1], [0, 1, 0, 1]) == 0.0

    @pytest.mark.parametrize(
        ("x", "y"), [([1, 1, 1], [1, 2, 3]), ([1, 2, 3], [0.5, 0.5, 0.5]), ([1], [2])]
    )
    def test_no_variance_is_none(self, x: list[float], y: list[float]) -> None:
        """A constant side (or a single pair) has no correlation: None."""
        assert pearson(x, y) is None

    @pytest.mark.parametrize("bad", [math.nan, math.inf])
    def test_non_finite_refused(self, bad: float) -> None:
        """NaN or infinite scores are refused."""
        with pytest.raises(ValueError, match="finite"):
            pearson([1.0, bad, 2.0], [1.0, 2.0, 3.0])


class TestBootstrapCi:
    def test_deterministic_for_a_seed(self) -> None:
        """The same seed gives the same interval."""
        pairs = list(zip(TABLE_A, TABLE_B, strict=True))
        assert bootstrap_ci(_rate, pairs, seed=7) == bootstrap_ci(_rate, pairs, seed=7)

    def test_constant_statistic(self) -> None:
        """When every pair agrees, every resample agrees: the interval is (1, 1)."""
        pairs = [(True, True), (False, False), (True, True)]
        assert bootstrap_ci(_rate, pairs, n_resamples=50) == (1.0, 1.0)

    def test_known_resampling_distribution(self) -> None:
        """Two values 0 and 1: resample means are 0, .5, 1 with odds 1/4, 1/2, 1/4.

        The 95% interval spans (0, 1); the central 40% (30th to 70th percentile) is 0.5.
        """
        pairs = [(0.0, 0.0), (1.0, 0.0)]
        assert bootstrap_ci(_mean_first, pairs) == (0.0, 1.0)
        assert bootstrap_ci(_mean_first, pairs, confidence=0.4) == (0.5, 0.5)

    def test_contains_the_estimate(self) -> None:
        """The interval of the textbook table's agreement brackets the estimate 0.7."""
        pairs = list(zip(TABLE_A, TABLE_B, strict=True))
        interval = bootstrap_ci(_rate, pairs, n_resamples=500)
        assert interval is not None
        low, high = interval
        assert 0.5 < low < 0.7 < high < 0.9

    def test_wider_at_higher_confidence(self) -> None:
        """A 99% interval contains the 80% one (same seed, same resamples)."""
        pairs = list(zip(TABLE_A, TABLE_B, strict=True))
        narrow = bootstrap_ci(_rate, pairs, n_resamples=500, confidence=0.8)
        wide = bootstrap_ci(_rate, pairs, n_resamples=500, confidence=0.99)
        assert narrow is not None
        assert wide is not None
        assert wide[0] <= narrow[0] <= narrow[1] <= wide[1]

    def test_undefined_resamples_are_left_out(self) -> None:
        """A statistic that is None on every resample gives None, not a made-up interval."""
        pairs = [(1.0, 2.0), (1.0, 3.0)]
        interval = bootstrap_ci(
            lambda s: pearson([a for a, _ in s], [b for _, b in s]), pairs, n_resamples=20
        )
        assert interval is None

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"n_resamples": 0}, "n_resamples"),
            ({"n_resamples": True}, "n_resamples"),
            ({"confidence": 1.0}, "confidence"),
            ({"confidence": 0.0}, "confidence"),
        ],
    )
    def test_bad_options(self, kwargs: dict[str, float], match: str) -> None:
        """Out-of-range options are refused, naming the option."""
        with pytest.raises(ValueError, match=match):
            bootstrap_ci(_rate, [(True, True)], **kwargs)  # type: ignore[arg-type]

    def test_empty(self) -> None:
        """No pairs is refused."""
        with pytest.raises(ValueError, match="at least one pair"):
            bootstrap_ci(_rate, [])


class TestParetoFront:
    def test_hand_computed(self) -> None:
        """Dominated points (more cost, no more agreement) and unknown costs are off."""
        points: list[tuple[float | None, float | None]] = [
            (1.0, 0.8),  # on: nothing cheaper agrees as much
            (2.0, 0.9),  # on: the most agreeing at a known cost
            (3.0, 0.85),  # off: (2.0, 0.9) is cheaper and agrees more
            (None, 0.99),  # off: unknown cost
            (1.0, 0.7),  # off: same cost as (1.0, 0.8), agrees less
            (0.5, 0.5),  # on: the cheapest
        ]
        assert pareto_front(points) == [True, True, False, False, False, True]

    def test_equal_points_both_on(self) -> None:
        """Two identical points do not dominate each other."""
        assert pareto_front([(1.0, 0.5), (1.0, 0.5)]) == [True, True]

    def test_unknown_cost_dominates_nothing(self) -> None:
        """A point of unknown cost does not push a known point off the front."""
        assert pareto_front([(None, 1.0), (5.0, 0.1)]) == [False, True]

    def test_unknown_agreement_is_off(self) -> None:
        """A point without an agreement figure is not on the front."""
        assert pareto_front([(1.0, None), (2.0, 0.3)]) == [False, True]

    def test_empty(self) -> None:
        """No points, no front."""
        assert pareto_front([]) == []

    def test_nan_refused(self) -> None:
        """NaN is refused: None is how an unknown value is written."""
        with pytest.raises(ValueError, match="None"):
            pareto_front([(math.nan, 0.5)])
