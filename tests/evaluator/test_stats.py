"""Tests of ``evaluator._stats``: the one percentile and the one bootstrap interval,
against values worked out by hand and NumPy's own quantiles."""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence

import numpy as np
import pytest

from evaluator._agreement import agreement_rate, pearson
from evaluator._stats import bootstrap_ci, percentile, percentiles

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
