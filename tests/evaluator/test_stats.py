"""Tests of ``evaluator._stats``: the one percentile and the one bootstrap interval,
against values worked out by hand and NumPy's own quantiles."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Hashable, Sequence

import numpy as np
import pytest

from evaluator._judges._agreement import agreement_rate, pearson
from evaluator._stats import _FEW_VALUES, bootstrap_ci, bootstrap_mean_ci, percentile, percentiles

# The textbook 2x2 table: 20 both yes, 5 A-yes/B-no, 10 A-no/B-yes, 15 both no (p_o 0.7).
TABLE_A = ["yes"] * 20 + ["yes"] * 5 + ["no"] * 10 + ["no"] * 15
TABLE_B = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15


def _rate(sample: Sequence[tuple[Hashable, Hashable]]) -> float:
    return agreement_rate([a for a, _ in sample], [b for _, b in sample])


def _mean_first(sample: Sequence[tuple[float, float]]) -> float:
    return sum(a for a, _ in sample) / len(sample)


class TestPercentiles:
    def test_interpolates_between_order_statistics(self) -> None:
        """Linear interpolation between the sorted values: the median of 1..4 is 2.5, the
        90th percentile of 0, 10 is 9; the ends are the minimum and the maximum."""
        assert percentiles([4.0, 1.0, 3.0, 2.0], [0.5, 0.0, 1.0]) == [2.5, 1.0, 4.0]
        assert percentile([10.0, 0.0], 0.9) == pytest.approx(9.0)
        assert percentile([7.0], 0.99) == 7.0

    def test_the_same_as_numpy(self) -> None:
        """Exactly NumPy's default percentiles, on values of any order."""
        rng = random.Random(3)
        values = [rng.expovariate(1.0) for _ in range(1001)]
        want = np.percentile(values, [50.0, 95.0, 99.0]).tolist()
        assert percentiles(values, [0.5, 0.95, 0.99]) == want

    def test_nothing_measured_is_none(self) -> None:
        """No values: percentile is None (unmeasured), percentiles refuses."""
        assert percentile([], 0.5) is None
        with pytest.raises(ValueError, match="at least one value"):
            percentiles([], [0.5])

    @pytest.mark.parametrize("q", [95, -0.1, 1.5])
    def test_a_quantile_is_a_fraction(self, q: float) -> None:
        """A q outside [0, 1] (95 for the 95th percentile, say) is refused, naming it."""
        with pytest.raises(ValueError, match=f"fraction in \\[0, 1\\], got {q}"):
            percentiles([1.0, 2.0], [q])


class TestBootstrapCi:
    def test_deterministic_for_a_seed(self) -> None:
        """The same seed gives the same interval."""
        pairs = list(zip(TABLE_A, TABLE_B, strict=True))
        assert bootstrap_ci(_rate, pairs, seed=7) == bootstrap_ci(_rate, pairs, seed=7)

    def test_constant_statistic(self) -> None:
        """When every pair agrees, every resample agrees: the interval is (1, 1)."""
        pairs = [(True, True), (False, False), (True, True)]
        assert bootstrap_ci(_rate, pairs, resamples=50) == (1.0, 1.0)

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
        interval = bootstrap_ci(_rate, pairs, resamples=500)
        assert interval is not None
        low, high = interval
        assert 0.5 < low < 0.7 < high < 0.9

    def test_wider_at_higher_confidence(self) -> None:
        """A 99% interval contains the 80% one (same seed, same resamples)."""
        pairs = list(zip(TABLE_A, TABLE_B, strict=True))
        narrow = bootstrap_ci(_rate, pairs, resamples=500, confidence=0.8)
        wide = bootstrap_ci(_rate, pairs, resamples=500, confidence=0.99)
        assert narrow is not None
        assert wide is not None
        assert wide[0] <= narrow[0] <= narrow[1] <= wide[1]

    def test_undefined_resamples_are_left_out(self) -> None:
        """A statistic that is None on every resample gives None, not a made-up interval."""
        pairs = [(1.0, 2.0), (1.0, 3.0)]
        interval = bootstrap_ci(
            lambda s: pearson([a for a, _ in s], [b for _, b in s]), pairs, resamples=20
        )
        assert interval is None

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"resamples": 0}, "resamples"),
            ({"resamples": True}, "resamples"),
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
        with pytest.raises(ValueError, match="at least one item"):
            bootstrap_ci(_rate, [])


class TestBootstrapMeanCi:
    def test_equal_differences_give_a_point(self) -> None:
        """When every pair differs by the same amount, every resample's mean is it."""
        assert bootstrap_mean_ci([0.25] * 40) == (0.25, 0.25)

    def test_one_pair(self) -> None:
        """One pair: every resample is that pair."""
        assert bootstrap_mean_ci([-0.5]) == (-0.5, -0.5)

    def test_a_skewed_three_pair_case_by_hand(self) -> None:
        """Differences (0, 0, 3): a resample's mean is the number K of 3s drawn, K ~
        Binomial(3, 1/3), so P(K=0) = 8/27 > 2.5 % and P(K=3) = 1/27 > 2.5 %: the 95 %
        interval is exactly [0, 3]."""
        assert bootstrap_mean_ci([0.0, 0.0, 3.0], resamples=4000, seed=1) == (0.0, 3.0)

    def test_a_symmetric_two_pair_case_by_hand(self) -> None:
        """Differences (-1, +1): resample means are -1, 0, +1 with probabilities 1/4, 1/2,
        1/4, so the 2.5th and 97.5th percentiles are -1 and +1."""
        assert bootstrap_mean_ci([-1.0, 1.0], seed=3) == (-1.0, 1.0)

    def test_the_same_seed_gives_the_same_interval(self) -> None:
        """Deterministic for a seed (the page is the same at every build); another seed
        draws other resamples."""
        rng = random.Random(5)
        d = [rng.gauss(0.1, 1.0) for _ in range(500)]
        assert bootstrap_mean_ci(d, seed=7) == bootstrap_mean_ci(d, seed=7)
        assert bootstrap_mean_ci(d, seed=7) != bootstrap_mean_ci(d, seed=8)

    def test_many_pairs_match_the_normal_approximation(self) -> None:
        """For 2,000 pairs the interval is close to mean ± 1.96 s/sqrt(n) (a check that
        resampling draws every pair with equal chance), within 10 % of its half-width."""
        rng = random.Random(11)
        d = [rng.gauss(0.2, 1.0) for _ in range(2000)]
        low, high = bootstrap_mean_ci(d, resamples=4000)
        mean = math.fsum(d) / len(d)
        half = 1.96 * statistics.pstdev(d) / math.sqrt(len(d))
        assert low < mean < high
        assert abs((mean - low) - half) < 0.1 * half
        assert abs((high - mean) - half) < 0.1 * half

    def test_counting_and_drawing_agree(self) -> None:
        """Few distinct differences are resampled by counting them (a multinomial draw),
        many by drawing indices: on the same data both give the same interval, within
        the resampling's own noise."""
        rng = random.Random(2)
        few = [rng.choice((-1.0, 0.0, 0.0, 1.0, 1.0)) for _ in range(3000)]
        # Distinct values past the threshold, each moved by far less than the interval.
        many = [v + 1e-9 * i for i, v in enumerate(few)]
        assert len(set(few)) <= _FEW_VALUES < len(set(many))
        a = bootstrap_mean_ci(few, resamples=4000)
        b = bootstrap_mean_ci(many, resamples=4000)
        width = a[1] - a[0]
        assert abs(a[0] - b[0]) < 0.08 * width and abs(a[1] - b[1]) < 0.08 * width

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"differences": []}, "needs at least one difference"),
            ({"differences": [1.0], "resamples": 0}, "`resamples` must be a positive int"),
            ({"differences": [1.0], "confidence": 1.0}, "`confidence` must lie strictly"),
            ({"differences": [math.nan]}, "every difference must be a finite number"),
        ],
    )
    def test_bad_arguments(self, kwargs: dict[str, object], message: str) -> None:
        """Bad arguments are refused, naming the parameter."""
        with pytest.raises(ValueError, match=message):
            bootstrap_mean_ci(**kwargs)  # type: ignore[arg-type]
