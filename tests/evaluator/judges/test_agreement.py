"""Tests of ``evaluator._judges._agreement``: agreement, kappa, Pearson, Pareto front,
repeatability (flip-free share, Fleiss' kappa, ICC, within-example std, majority) and the
confusion matrix, each against values worked out by hand on small fixed sets."""

from __future__ import annotations

import math
import random

import pytest

from evaluator._judges._agreement import (
    agreement_rate,
    cohens_kappa,
    confusion_counts,
    fleiss_kappa,
    icc_oneway,
    majority,
    mean_difference,
    pareto_front,
    pearson,
    stable_share,
    within_std,
)

# The textbook 2x2 table: 20 both yes, 5 A-yes/B-no, 10 A-no/B-yes, 15 both no.
# p_o = 35/50 = 0.7; A says yes 25/50, B 30/50; p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa 0.4.
TABLE_A = ["yes"] * 20 + ["yes"] * 5 + ["no"] * 10 + ["no"] * 15
TABLE_B = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15


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


# Six examples judged three times (1 = PASS). Counts (pass, fail) per example:
# (3,0) (2,1) (0,3) (1,2) (2,1) (0,3). P_i = (sum n_ij^2 - 3) / 6: 1, 1/3, 1, 1/3, 1/3, 1,
# so P = 4/6. Passes 8 of 18: p = 4/9, 5/9, P_e = 41/81.
# kappa = (54/81 - 41/81) / (40/81) = 13/40 = 0.325. Never flips: 3 of 6.
REPEATS = [[1, 1, 1], [1, 0, 1], [0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0]]


class TestStableShare:
    def test_hand_computed(self) -> None:
        """Three of the six examples keep one verdict across their repeats: 0.5."""
        assert stable_share(REPEATS) == 0.5

    def test_all_stable(self) -> None:
        """Repeats that never differ give 1.0."""
        assert stable_share([["a", "a"], ["b", "b"]]) == 1.0

    def test_uneven_repeats_refused(self) -> None:
        """Items with different numbers of ratings are refused, naming both."""
        with pytest.raises(ValueError, match="item 0 has 2, item 1 has 3"):
            stable_share([[1, 1], [1, 1, 1]])

    def test_one_repeat_refused(self) -> None:
        """One rating per item cannot show a flip: refused."""
        with pytest.raises(ValueError, match="at least 2 ratings"):
            stable_share([[1], [0]])


class TestFleissKappa:
    def test_hand_computed(self) -> None:
        """The six-example set above: kappa = 13/40."""
        assert fleiss_kappa(REPEATS) == pytest.approx(13 / 40)

    def test_wikipedia_table(self) -> None:
        """Fleiss' (1971) worked example as on Wikipedia: 10 items, 14 raters, 5 categories,
        kappa 0.210."""
        table = [
            [0, 0, 0, 0, 14],
            [0, 2, 6, 4, 2],
            [0, 0, 3, 5, 6],
            [0, 3, 9, 2, 0],
            [2, 2, 8, 1, 1],
            [7, 7, 0, 0, 0],
            [3, 2, 6, 3, 0],
            [2, 5, 3, 2, 2],
            [6, 5, 2, 1, 0],
            [0, 2, 2, 3, 7],
        ]
        ratings = [[j for j, c in enumerate(row) for _ in range(c)] for row in table]
        assert fleiss_kappa(ratings) == pytest.approx(0.20993, abs=1e-5)

    def test_two_repeats_are_scotts_pi(self) -> None:
        """With two ratings per item Fleiss' kappa is Scott's pi: agreement 3/4, pooled
        passes 5 of 8, P_e = 34/64, kappa (48/64 - 34/64) / (30/64) = 14/30."""
        assert fleiss_kappa([[1, 1], [0, 0], [1, 0], [1, 1]]) == pytest.approx(14 / 30)

    def test_one_label_everywhere(self) -> None:
        """Every rating the same label: perfect agreement, 1.0 (not 0/0)."""
        assert fleiss_kappa([["PASS"] * 3] * 4) == 1.0

    def test_every_item_split(self) -> None:
        """Every item split evenly between two labels: below chance, -1/(n-1) = -1."""
        assert fleiss_kappa([[1, 0], [0, 1], [1, 0]]) == pytest.approx(-1.0)


class TestIccOneway:
    def test_hand_computed(self) -> None:
        """Items (1,2), (3,4), (5,6): MSB 8, MSW 0.5, ICC (8 - 0.5) / (8 + 0.5) = 15/17."""
        assert icc_oneway([[1, 2], [3, 4], [5, 6]]) == pytest.approx(15 / 17)

    def test_no_within_variance(self) -> None:
        """Repeats that never differ, items that do: 1.0."""
        assert icc_oneway([[1.0, 1.0], [3.0, 3.0]]) == pytest.approx(1.0)

    def test_nothing_varies(self) -> None:
        """No score varies at all: the repeats agree perfectly, 1.0 (not 0/0)."""
        assert icc_oneway([[2.0, 2.0], [2.0, 2.0]]) == 1.0

    def test_one_item_is_none(self) -> None:
        """One item has no between-item variance to compare with: None."""
        assert icc_oneway([[1.0, 2.0]]) is None

    def test_close_to_fleiss_on_many_verdicts(self) -> None:
        """On 0/1 scores ICC(1,1) and Fleiss' kappa differ by a term that shrinks with the
        number of items: within 0.005 on 2,000 items (0.07 apart on the six above)."""
        rng = random.Random(1)
        items = []
        for _ in range(2000):
            p = rng.random()
            items.append([int(rng.random() < p) for _ in range(3)])
        assert icc_oneway(items) == pytest.approx(fleiss_kappa(items), abs=0.005)


class TestWithinStd:
    def test_hand_computed(self) -> None:
        """Sample std of (1, 3) is sqrt(2); of (2, 2) is 0: mean sqrt(2)/2."""
        assert within_std([[1, 3], [2, 2]]) == pytest.approx(math.sqrt(2) / 2)


class TestMajority:
    @pytest.mark.parametrize(
        ("verdicts", "want"),
        [
            ([True, True, False], (True, False)),
            ([False, True, False], (False, False)),
            ([True], (True, False)),
            ([False, True], (False, True)),
            ([True, False, False, True], (True, True)),
        ],
    )
    def test_values(self, verdicts: list[bool], want: tuple[bool, bool]) -> None:
        """The majority wins; a tie takes the first verdict and says it was a tie."""
        assert majority(verdicts) == want

    def test_empty(self) -> None:
        """No verdict has no majority: refused."""
        with pytest.raises(ValueError, match="at least one"):
            majority([])


class TestConfusionCounts:
    def test_hand_computed(self) -> None:
        """Judge P P P P F F F F against P P P F F F P P: 3 both pass, 1 false pass,
        2 false fails, 2 both fail."""
        judge = [True] * 4 + [False] * 4
        ref = [True, True, True, False, False, False, True, True]
        assert confusion_counts(judge, ref) == (3, 1, 2, 2)

    def test_unequal_lengths(self) -> None:
        """Verdicts must pair up with the reference's."""
        with pytest.raises(ValueError, match="pair up"):
            confusion_counts([True], [True, False])


class TestMeanDifference:
    def test_hand_computed(self) -> None:
        """(2,2,4,4) against (1,2,3,5): differences 1, 0, 1, -1, mean 0.25."""
        assert mean_difference([2, 2, 4, 4], [1, 2, 3, 5]) == pytest.approx(0.25)
