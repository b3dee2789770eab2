"""Percentiles and bootstrap intervals: the engine's one implementation of each, on NumPy.

- :func:`percentiles` (and :func:`percentile`) of measured values interpolate linearly
  between order statistics, NumPy's default method: exact over the values given.
- :func:`bootstrap_ci` is a percentile bootstrap: ``resamples`` draws with replacement
  of as many items as there are, by NumPy's ``default_rng(seed)`` (the same seed gives
  the same interval), the statistic computed on each draw, and the interval read off
  those values with :func:`percentiles`.
- :func:`bootstrap_mean_ci` is the same interval for the mean of numbers (the paired
  differences of two runs), vectorised: a multinomial draw of how often each value is
  picked when there are few distinct values, index draws in bounded chunks otherwise.

A quantile is written as a fraction throughout: 0.95 is the 95th percentile. NumPy is
imported on first use: the engine's workers and ``--help`` never pay for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["bootstrap_ci", "bootstrap_mean_ci", "percentile", "percentiles"]

T = TypeVar("T")
_INDEX_BUDGET = 4_000_000  # resample indices held at once (16 MB), whatever the run size
_FEW_VALUES = 64  # up to this many distinct differences, resample by counting them


def percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    """The quantiles ``qs`` (each a fraction in [0, 1]) of ``values``, interpolated
    linearly between order statistics. Raises ValueError for no values or a ``q`` out
    of range."""
    if not values:
        raise ValueError("percentiles: needs at least one value, got none")
    bad = [q for q in qs if not (isinstance(q, (int, float)) and 0.0 <= q <= 1.0)]
    if bad:
        raise ValueError(f"percentiles: each q must be a fraction in [0, 1], got {bad[0]!r}")
    import numpy as np

    found = np.quantile(np.asarray(values, dtype=np.float64), list(qs))
    return [float(v) for v in found]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The quantile ``q`` (a fraction: 0.95 is the 95th percentile) of ``values``; None
    when there are none (unmeasured, never 0)."""
    if not values:
        return None
    return percentiles(values, [q])[0]


def bootstrap_ci(
    statistic: Callable[[list[T]], float | None],
    items: Sequence[T],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """A percentile bootstrap confidence interval of ``statistic`` over ``items``.

    Each resample draws ``len(items)`` items with replacement and passes that list to
    ``statistic``, e.g. ``lambda s: cohens_kappa([x for x, _ in s], [y for _, y in s])``
    over pairs. Resamples where the statistic is undefined (it returns None, as a
    correlation does without variance) are left out; None is returned when no resample
    gives a value. The same seed gives the same interval.
    """
    if not items:
        raise ValueError("bootstrap_ci: needs at least one item, got none")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"bootstrap_ci: `resamples` must be a positive int, got {resamples!r}")
    if not (isinstance(confidence, (int, float)) and 0.0 < confidence < 1.0):
        raise ValueError(
            f"bootstrap_ci: `confidence` must lie strictly between 0 and 1, got {confidence!r}"
        )
    import numpy as np

    rng = np.random.default_rng(seed)
    n = len(items)
    # An array of the items themselves (a row stays one item): drawing from it is
    # one indexing in C per resample.
    population = np.fromiter(items, dtype=object, count=n)
    values: list[float] = []
    for _ in range(resamples):
        value = statistic(population[rng.integers(0, n, size=n)].tolist())
        if value is not None:
            values.append(value)
    if not values:
        return None
    tail = (1.0 - confidence) / 2.0
    low, high = percentiles(values, [tail, 1.0 - tail])
    return low, high


def bootstrap_mean_ci(
    differences: Sequence[float],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``differences`` (one per pair).

    Deterministic for a seed. Memory stays bounded (resamples are drawn in chunks whose
    size depends only on the number of pairs, so the same data and seed always give the
    same interval).
    """
    import numpy as np

    if not differences:
        raise ValueError("bootstrap_mean_ci: needs at least one difference, got none")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(
            f"bootstrap_mean_ci: `resamples` must be a positive int, got {resamples!r}"
        )
    if not 0.0 < confidence < 1.0:
        raise ValueError(
            f"bootstrap_mean_ci: `confidence` must lie strictly between 0 and 1, got {confidence!r}"
        )
    d = np.asarray(differences, dtype=np.float64)
    if not np.isfinite(d).all():
        raise ValueError("bootstrap_mean_ci: every difference must be a finite number")
    n = int(d.size)
    rng = np.random.default_rng(seed)
    values, counts = np.unique(d, return_counts=True)
    if values.size <= _FEW_VALUES:
        # Few distinct differences (an exact-match metric gives -1, 0 and 1): a resample
        # is then exactly a multinomial draw of how often each value is picked, which
        # costs per distinct value rather than per pair.
        picked = rng.multinomial(n, counts / n, size=resamples)
        means = picked @ values / n
    else:
        means = np.empty(resamples, dtype=np.float64)
        chunk = max(1, min(resamples, _INDEX_BUDGET // n))
        for start in range(0, resamples, chunk):
            rows = min(chunk, resamples - start)
            picks = rng.integers(0, n, size=(rows, n), dtype=np.uint32)
            means[start : start + rows] = d[picks].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = percentiles(means.tolist(), [tail, 1.0 - tail])
    return low, high
