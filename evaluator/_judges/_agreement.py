"""How far two judges agree, how far a judge agrees with itself, and which judge is worth
its cost: pure statistics for the judges comparison.

Verdicts are any hashable labels (``"PASS"``/``"FAIL"``, ``True``/``False``, class
names); scores are real numbers. Repeated ratings are one row per item, one column per
repeat (``ratings[item][repeat]``). Everything here is plain Python on small inputs (a few
thousand examples, a handful of judges, a few repeats), exact and deterministic. Their
intervals are :func:`evaluator._stats.bootstrap_ci`'s.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import TypeVar

__all__ = [
    "agreement_rate",
    "cohens_kappa",
    "confusion_counts",
    "fleiss_kappa",
    "icc_oneway",
    "majority",
    "mean_difference",
    "pareto_front",
    "pearson",
    "stable_share",
    "within_std",
]

P = TypeVar("P")


def _paired(a: Sequence[object], b: Sequence[object], what: str) -> int:
    """The common length of two paired sequences; refuses unequal or empty ones."""
    if len(a) != len(b):
        raise ValueError(
            f"{what}: the two sequences must pair up one to one, got {len(a)} and {len(b)} items"
        )
    if not a:
        raise ValueError(f"{what}: needs at least one pair, got none")
    return len(a)


def agreement_rate(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """The fraction of positions where ``a`` and ``b`` hold the same verdict."""
    n = _paired(a, b, "agreement_rate")
    return _agreeing(a, b) / n


def _agreeing(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    # map(eq) runs in C; a bootstrap calls this thousands of times.
    return list(map(operator.eq, a, b)).count(True)


def cohens_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's kappa of two raters' verdicts (binary or categorical): agreement beyond chance.

    ``kappa = (p_o - p_e) / (1 - p_e)`` with ``p_o`` the observed agreement and ``p_e`` the
    agreement expected from each rater's label frequencies. 1 is perfect agreement, 0 is
    chance level, negative is worse than chance.

    Edge case: when ``p_e`` is 1 the formula is 0/0. That happens only when both raters
    give one and the same label to every item, so they agree perfectly, and kappa is
    defined here as 1.0 (rather than NaN, which no report or Pareto front can use).
    """
    n = _paired(a, b, "cohens_kappa")
    # Integer counts throughout, one division at the end: kappa is exact up to that rounding.
    agree = _agreeing(a, b)
    count_a = Counter(a)
    count_b = Counter(b)
    chance = sum(count * count_b[label] for label, count in count_a.items())  # p_e * n**2
    if chance == n * n:
        return 1.0
    return (agree * n - chance) / (n * n - chance)


def _finite(values: Sequence[float], what: str) -> list[float]:
    out = list(map(float, values))
    if not all(map(math.isfinite, out)):
        bad = next(v for v in out if not math.isfinite(v))
        raise ValueError(f"{what}: every value must be a finite number, got {bad!r}")
    return out


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's correlation of paired scores, or None when either has no variance."""
    _paired(x, y, "pearson")
    xs = _finite(x, "pearson")
    ys = _finite(y, "pearson")
    n = len(xs)
    mean_x = math.fsum(xs) / n
    mean_y = math.fsum(ys) / n
    dx = [v - mean_x for v in xs]
    dy = [v - mean_y for v in ys]
    sxx = math.fsum(map(operator.mul, dx, dx))
    syy = math.fsum(map(operator.mul, dy, dy))
    if sxx == 0.0 or syy == 0.0:
        return None
    sxy = math.fsum(map(operator.mul, dx, dy))
    # Rounding can push |r| a hair past 1 for perfectly linear data.
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def pareto_front(points: Sequence[tuple[float | None, float | None]]) -> list[bool]:
    """Which (cost, agreement) points are Pareto-optimal: cheaper or more agreeing.

    A point is on the front unless another point costs no more and agrees no less, and is
    strictly better in one of the two. A point whose cost (or agreement) is unknown
    (None) is never on the front and dominates nothing: an unmeasured cost is not a free
    one. Equal points are all on the front.
    """
    known: list[tuple[float, float] | None] = []
    for cost, agreement in points:
        if cost is None or agreement is None:
            known.append(None)
            continue
        if math.isnan(cost) or math.isnan(agreement):
            raise ValueError(
                f"pareto_front: a point is NaN ({cost!r}, {agreement!r}); "
                "use None for an unknown value"
            )
        known.append((float(cost), float(agreement)))
    front: list[bool] = []
    # Quadratic, but the points are judges (a handful); clarity wins over a sweep.
    for i, point in enumerate(known):
        if point is None:
            front.append(False)
            continue
        cost, agreement = point
        dominated = any(
            other is not None
            and j != i
            and other[0] <= cost
            and other[1] >= agreement
            and (other[0] < cost or other[1] > agreement)
            for j, other in enumerate(known)
        )
        front.append(not dominated)
    return front


# -- one judge against itself: repeated ratings of the same items -----------------------


def _repeated(ratings: Sequence[Sequence[P]], what: str) -> int:
    """The number of repeats per item; refuses no items, fewer than 2 or unequal repeats."""
    if not ratings:
        raise ValueError(f"{what}: needs at least one item, got none")
    repeats = len(ratings[0])
    if repeats < 2:
        raise ValueError(f"{what}: needs at least 2 ratings per item, got {repeats}")
    for i, row in enumerate(ratings):
        if len(row) != repeats:
            raise ValueError(
                f"{what}: every item needs the same number of ratings; item 0 has "
                f"{repeats}, item {i} has {len(row)}"
            )
    return repeats


def stable_share(ratings: Sequence[Sequence[Hashable]]) -> float:
    """The share of items whose ratings are all the same (the verdict never flips)."""
    _repeated(ratings, "stable_share")
    return sum(1 for row in ratings if len(set(row)) == 1) / len(ratings)


def fleiss_kappa(ratings: Sequence[Sequence[Hashable]]) -> float:
    """Fleiss' kappa of items each rated the same number of times: agreement among the
    ratings of an item beyond what the overall label frequencies give by chance.

    With ``N`` items, ``n`` ratings each and ``n_ij`` ratings of item ``i`` in category
    ``j``: ``P_i = (sum_j n_ij**2 - n) / (n (n - 1))``, ``P = mean(P_i)``,
    ``p_j = sum_i n_ij / (N n)``, ``P_e = sum_j p_j**2``, ``kappa = (P - P_e) / (1 - P_e)``.

    Edge case, as in :func:`cohens_kappa`: ``P_e`` is 1 only when every rating of every
    item is the same label, so the ratings agree perfectly; kappa is 1.0 then.
    """
    n = _repeated(ratings, "fleiss_kappa")
    items = len(ratings)
    totals: Counter[Hashable] = Counter()
    # Integer sums throughout, as in cohens_kappa: sum over items of sum_j n_ij**2.
    squares = 0
    for row in ratings:
        counts = Counter(row)
        totals.update(counts)
        squares += sum(c * c for c in counts.values())
    observed = (squares - items * n) / (items * n * (n - 1))
    chance = sum(c * c for c in totals.values()) / (items * n) ** 2
    if chance == 1.0:
        return 1.0
    return (observed - chance) / (1.0 - chance)


def icc_oneway(ratings: Sequence[Sequence[float]]) -> float | None:
    """ICC(1,1), the one-way random-effects intraclass correlation of repeated scores.

    The share of the score variance that lies between items rather than between repeats of
    an item: ``(MSB - MSW) / (MSB + (k - 1) MSW)`` with ``k`` repeats, ``MSB`` the mean
    square between items and ``MSW`` within them. 1 when repeats never differ, about 0
    when a repeat varies as much as the items do (it may dip below 0). For 0/1 scores it
    approaches Fleiss' kappa as items grow (within 0.01 from a few hundred), so the two
    read alike. None with fewer than 2 items;
    1.0 when no score varies at all (the repeats agree perfectly).
    """
    k = _repeated(ratings, "icc_oneway")
    rows = [_finite(row, "icc_oneway") for row in ratings]
    items = len(rows)
    if items < 2:
        return None
    means = [math.fsum(row) / k for row in rows]
    grand = math.fsum(means) / items
    between = k * math.fsum((m - grand) ** 2 for m in means) / (items - 1)
    within = math.fsum((x - m) ** 2 for row, m in zip(rows, means, strict=True) for x in row) / (
        items * (k - 1)
    )
    denominator = between + (k - 1) * within
    if denominator == 0.0:
        return 1.0
    return (between - within) / denominator


def within_std(ratings: Sequence[Sequence[float]]) -> float:
    """The mean over items of the sample standard deviation of an item's repeated scores:
    how far, in the score's own units, a rerun typically moves an example's score."""
    k = _repeated(ratings, "within_std")
    total = 0.0
    for row in ratings:
        values = _finite(row, "within_std")
        mean = math.fsum(values) / k
        total += math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (k - 1))
    return total / len(ratings)


def majority(verdicts: Sequence[bool]) -> tuple[bool, bool]:
    """The majority of repeated pass/fail verdicts, and whether it was a tie.

    A tie (as many passes as fails) is broken by the first verdict: the one a single run
    would have given, so that ``--repeat`` never changes a verdict for lack of a majority.
    """
    if not verdicts:
        raise ValueError("majority: needs at least one verdict, got none")
    passes = sum(1 for v in verdicts if v)
    fails = len(verdicts) - passes
    if passes == fails:
        return bool(verdicts[0]), True
    return passes > fails, False


def confusion_counts(judge: Sequence[bool], reference: Sequence[bool]) -> tuple[int, int, int, int]:
    """Pass/fail verdicts against a reference: ``(both_pass, false_pass, false_fail,
    both_fail)``. A false pass (the judge passes what the reference fails) is leniency; a
    false fail is strictness."""
    _paired(judge, reference, "confusion_counts")
    both_pass = false_pass = false_fail = both_fail = 0
    for mine, theirs in zip(judge, reference, strict=True):
        if mine and theirs:
            both_pass += 1
        elif mine:
            false_pass += 1
        elif theirs:
            false_fail += 1
        else:
            both_fail += 1
    return both_pass, false_pass, false_fail, both_fail


def mean_difference(x: Sequence[float], y: Sequence[float]) -> float:
    """The mean of ``x - y`` over pairs: a judge's bias against a reference, in score units."""
    n = _paired(x, y, "mean_difference")
    return math.fsum(a - b for a, b in zip(_finite(x, "x"), _finite(y, "y"), strict=True)) / n
