"""A race between candidates: which artifact is best, at what confidence, for how much.

Every surviving candidate is evaluated on the same examples in rounds (paired), the
examples taken in a seeded random order; after each round a candidate is dropped once
another is better than it at the race's confidence, and the race ends when one is left,
when the survivors are tied under the ``ties`` rule, when the examples run out, or when
``max_evaluations`` or the spending budget (``spend``, ``llm_client/_spend.py``) is spent:
then the standing is reported, and the examples the budget cut are ``budget_exhausted``
cells, counted in no mean and no test. The method and its guarantee are written down in
docs/architecture/race.md.

The statistics are pure functions of numpy arrays (:func:`betting_log_wealth`,
:func:`mean_interval`, :func:`pair_delta`, :func:`decide`); :func:`run_race` is the
loop, which evaluates through a callable (``Evaluator.evaluate_many``, so the cache and
the rate budget apply to a race as to any run).
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import msgspec

from ._call._results import Result
from ._exceptions import ConfigError, ResultsFileError
from ._report import BudgetSummary, budget_summary, result_cost

if TYPE_CHECKING:  # numpy is imported where a race computes: a run that races nothing skips it
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float64]

__all__ = [
    "RaceCandidate",
    "RaceResult",
    "RaceRound",
    "RaceSpend",
    "Ties",
    "betting_log_wealth",
    "decide",
    "is_race_file",
    "mean_interval",
    "pair_delta",
    "parse_ties",
    "read_race_file",
    "round_ends",
    "run_race",
    "write_race_file",
]


#: Examples in the first round, and how much each later round grows the examples seen.
FIRST_ROUND = 16
GROWTH = 1.1


class Ties(msgspec.Struct, frozen=True):
    """What "best" means when candidates cannot be told apart. ``epsilon`` None
    ("report"): the race runs on until one is left or the examples end, and reports the
    survivors as tied. ``epsilon`` E: it also stops once every two survivors are known to
    be within E of each other, and reports them tied within E."""

    epsilon: float | None = None

    def __str__(self) -> str:
        return "report" if self.epsilon is None else f"epsilon={self.epsilon:g}"


def parse_ties(value: str | Ties, option: str = "ties") -> Ties:
    """``"report"`` or ``"epsilon=0.01"`` (or a :class:`Ties`) as a :class:`Ties`."""
    if isinstance(value, Ties):
        return value
    text = str(value).strip().lower()
    if text == "report":
        return Ties()
    if text.startswith("epsilon="):
        try:
            epsilon = float(text.partition("=")[2])
        except ValueError:
            epsilon = math.nan
        if math.isfinite(epsilon) and epsilon > 0:
            return Ties(epsilon)
    raise ConfigError(
        f"must be 'report' (report the candidates that cannot be told apart as tied) or "
        f"'epsilon=E' with E > 0 (also stop when they are within E of each other), got "
        f"{value!r}",
        option=option,
        value=value,
    )


# -- statistics ----------------------------------------------------------------------


def betting_log_wealth(z: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The log-wealth, after each value, of a bettor against "the mean of ``z`` is at
    most 0" (values in [-1, 1], along the last axis). Each bet is ``1 + lam_t z_t`` with
    ``lam_t`` in [0, 1/2] chosen from the values before t only (the growth-rate-optimal
    ``mean / second moment`` of the past, shrunk by one prior value of second moment 1:
    Waudby-Smith and Ramdas 2023, aGRAPA). Under the null the wealth is a nonnegative
    supermartingale starting at 1, so by Ville's inequality it ever reaches ``1/delta``
    with probability at most ``delta``, whenever it is looked at: anytime-valid."""
    import numpy as np

    v = np.asarray(z, dtype=np.float64)
    n = v.shape[-1]
    before = np.zeros((*v.shape[:-1], 1))
    s1 = np.concatenate([before, np.cumsum(v, axis=-1)[..., :-1]], axis=-1)
    s2 = np.concatenate([before, np.cumsum(v * v, axis=-1)[..., :-1]], axis=-1)
    count = np.arange(n, dtype=np.float64) + 1.0
    lam = np.clip((s1 / count) / ((1.0 + s2) / count), 0.0, 0.5)
    return np.cumsum(np.log1p(lam * v), axis=-1)


def mean_interval(
    values: npt.ArrayLike, low: float, high: float, delta: float, grid: int = 401
) -> tuple[float, float]:
    """An interval that holds the mean of i.i.d. ``values`` in [``low``, ``high``] with
    probability at least 1 - ``delta``, at whatever moment it is read (a confidence
    sequence: Waudby-Smith and Ramdas 2023, by betting). A mean ``m`` on a grid of the
    range is left out when a bettor against "the mean is at most m", or one against "at
    least m", has ever reached ``2/delta`` on the values so far."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return low, high
    m = np.linspace(low, high, grid)[:, None]
    scale = np.maximum(np.maximum(high - m, m - low), 1e-12)
    threshold = math.log(2.0 / delta)
    above = betting_log_wealth((x[None, :] - m) / scale).max(axis=-1) >= threshold
    below = betting_log_wealth((m - x[None, :]) / scale).max(axis=-1) >= threshold
    kept = m[~(above | below), 0]
    if kept.size == 0:  # only between two grid points: the closest pair around the mean
        centre = float(x.mean())
        step = (high - low) / (grid - 1)
        return max(low, centre - step), min(high, centre + step)
    step = (high - low) / (grid - 1)
    return max(low, float(kept.min()) - step), min(high, float(kept.max()) + step)


def pair_delta(delta: float, candidates: int, *, epsilon: bool) -> tuple[float, float]:
    """The error allowed to one drop test and to one tie test.

    The best candidate is dropped only when one of the K-1 tests "the best is at least as
    good as j" rejects a true null, so ``delta`` split over K-1 bounds that chance (the
    tests of the other candidates cannot drop the best). With a ties epsilon, half of
    ``delta`` goes to those, half to the K(K-1) ordered tie tests, so that a reported
    "within epsilon" also holds: both, at every round, with probability 1 - ``delta``."""
    others = max(1, candidates - 1)
    if not epsilon:
        return delta / others, 0.0
    return delta / (2 * others), delta / (2 * others * candidates)


def round_ends(total: int, first: int = FIRST_ROUND, growth: float = GROWTH) -> list[int]:
    """How many examples the race has seen after each round: ``first``, then growing
    by ``growth`` each round, the last one ``total``."""
    ends: list[int] = []
    n = max(2, first)
    while n < total:
        ends.append(n)
        n = max(n + 1, math.ceil(n * growth))
    ends.append(total)
    return ends


class Decision(msgspec.Struct, frozen=True):
    """One round's verdict over the alive candidates (positions in ``scores``): who is
    dropped and by whom (``beaten_by[i]``), and whether the survivors are all known to be
    within the ties epsilon of each other."""

    dropped: list[int]
    beaten_by: dict[int, int]
    tied_within: bool
    p_values: dict[int, float] = {}
    """For each dropped ``i``: the anytime-valid p-value of "i is at least as good as
    ``beaten_by[i]``", 1 / the bettor's highest wealth."""


def decide(scores: Matrix, width: float, delta: tuple[float, float], ties: Ties) -> Decision:
    """Drop each candidate ``i`` (a row of ``scores``, one column per example, all seen
    by all) that some ``j`` beats: the bettor against "i is at least as good as j" has
    reached ``1/delta[0]`` on the differences ``scores[j] - scores[i]`` (bounded by
    ``width``). ``tied_within``: with an epsilon, for every two survivors the bettor
    against "i is ahead of j by epsilon or more" has reached ``1/delta[1]``."""
    k = scores.shape[0]
    threshold = math.log(1.0 / delta[0])
    diff = scores[None, :, :] - scores[:, None, :]  # diff[i, j] = scores[j] - scores[i]
    wealth = betting_log_wealth(diff / width).max(axis=-1)
    beaten_by: dict[int, int] = {}
    for i in range(k):
        rivals = [j for j in range(k) if j != i and wealth[i, j] >= threshold]
        if rivals:
            beaten_by[i] = max(rivals, key=lambda j: float(wealth[i, j]))
    p_values = {i: math.exp(-float(wealth[i, j])) for i, j in beaten_by.items()}
    survivors = [i for i in range(k) if i not in beaten_by]
    tied = False
    if ties.epsilon is not None and len(survivors) > 1:
        e = ties.epsilon
        near = betting_log_wealth((diff + e) / (width + e)).max(axis=-1)
        bar = math.log(1.0 / delta[1])
        tied = all(near[i, j] >= bar for i in survivors for j in survivors if i != j)
    return Decision(sorted(beaten_by), beaten_by, tied, p_values)


# -- the result ----------------------------------------------------------------------


class RaceSpend(msgspec.Struct, frozen=True, kw_only=True):
    """What a race (or one candidate) spent, against evaluating every example.

    ``evaluations``: examples evaluated now (the program and metric ran), ``cached``:
    taken from the cache; ``model_calls`` and ``cost_usd``: all the race made and paid
    now (cost None when some cost was unmeasured), the calls of examples the budget cut
    part way included. ``full_*``: the same for every candidate on every example,
    estimated from each candidate's evaluations as their figure per example times the
    examples it did not see (None when its per-example cost is unmeasured or no example
    was evaluated). ``exhausted``: (candidate, example) cells the budget cut.
    """

    evaluations: int
    cached: int
    model_calls: int
    cost_usd: float | None
    full_evaluations: int
    full_model_calls: int | None
    full_cost_usd: float | None
    exhausted: int = 0


class RaceCandidate(msgspec.Struct, frozen=True, kw_only=True):
    """One candidate's standing: its mean over the examples it saw and that mean's
    interval (empirical Bernstein, at the race's confidence), how many it saw, the round
    it was dropped in and why (None: it was not), and what it spent."""

    index: int
    label: str
    rank: int
    mean: float | None
    low: float | None
    high: float | None
    examples: int
    errors: int
    """Of its results, those with an error (scored at the failure score)."""
    exhausted: int = 0
    """Its examples the budget cut (``budget_exhausted``: in no mean, no test)."""
    dropped_round: int | None
    dropped_reason: str | None
    spend: RaceSpend


class RaceRound(msgspec.Struct, frozen=True, kw_only=True):
    """One round: the examples seen after it, who ran in it, who was dropped."""

    number: int
    examples: int
    ran: list[int]
    dropped: list[int]


class RaceResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of a race. ``winners``: the best candidate, or several when they
    could not be told apart (``tied``): never one picked silently. ``outcome``: "winner",
    "tied" (the examples ran out, or the survivors are within the ties epsilon) or
    "budget" (``max_evaluations`` or the spending budget ended the race: ``winners`` is
    the standing then). ``ranking``: candidate indices, best first. ``scores[i][c]``:
    candidate i's score on ``example_ids[c]`` (None where it was not evaluated: after its
    drop, or cut by the budget, ``exhausted[i]`` lists those columns). ``budget``: the
    spending budget the race ran under against what was spent (None: none)."""

    outcome: Literal["winner", "tied", "budget"]
    reason: str
    winners: list[int]
    tied: bool
    ranking: list[int]
    candidates: list[RaceCandidate]
    rounds: list[RaceRound]
    confidence: float
    ties: str
    score_range: tuple[float, float]
    example_ids: list[Any]
    scores: list[list[float | None]]
    spend: RaceSpend
    seed: int
    exhausted: list[list[int]] = []
    budget: BudgetSummary | None = None

    @property
    def winner(self) -> RaceCandidate | None:
        """The one best candidate, or None when the race ended in a tie."""
        return self.candidates[self.winners[0]] if len(self.winners) == 1 else None


# -- the loop ------------------------------------------------------------------------

Evaluate = Callable[[Any, list[Any]], Awaitable[list[Result]]]


class _Tally:
    """One candidate's running spend."""

    def __init__(self) -> None:
        self.evaluations = 0
        self.cached = 0
        self.model_calls = 0  # every call made, those of examples the budget cut too
        self.cost: float | None = 0.0
        self.eval_calls = 0  # of the evaluations only: the rate "everything" is read at
        self.eval_cost: float | None = 0.0
        self.seen = 0
        self.errors = 0
        self.exhausted = 0

    def add(self, results: Sequence[Result]) -> None:
        for r in results:
            cut = r.error is not None and r.error.kind == "budget_exhausted"
            if r.cached and not cut:
                self.cached += 1
                self.seen += 1
                continue
            calls = r.observation.llm_calls + r.judge.llm_calls
            cost = result_cost(r)
            self.model_calls += calls
            self.cost = _plus(self.cost, cost)
            if cut:
                self.exhausted += 1
                continue
            self.seen += 1
            self.errors += r.error is not None
            self.evaluations += 1
            self.eval_calls += calls
            self.eval_cost = _plus(self.eval_cost, cost)

    def spend(self, total: int) -> RaceSpend:
        left = total - self.seen
        fresh = self.evaluations
        if fresh:
            calls: int | None = round(self.eval_calls + self.eval_calls / fresh * left)
            cost = None if self.eval_cost is None else self.eval_cost * (1 + left / fresh)
        else:
            calls = cost = None
        return RaceSpend(
            evaluations=self.evaluations,
            cached=self.cached,
            model_calls=self.model_calls,
            cost_usd=self.cost,
            full_evaluations=total,
            full_model_calls=calls,
            full_cost_usd=cost,
            exhausted=self.exhausted,
        )


def _plus(total: float | None, cost: float | None) -> float | None:
    return None if total is None or cost is None else total + cost


def _total(spends: Sequence[RaceSpend]) -> RaceSpend:
    def add(values: Sequence[Any]) -> Any:
        return None if any(v is None for v in values) else sum(values)

    return RaceSpend(
        evaluations=sum(s.evaluations for s in spends),
        cached=sum(s.cached for s in spends),
        model_calls=sum(s.model_calls for s in spends),
        cost_usd=add([s.cost_usd for s in spends]),
        full_evaluations=sum(s.full_evaluations for s in spends),
        full_model_calls=add([s.full_model_calls for s in spends]),
        full_cost_usd=add([s.full_cost_usd for s in spends]),
        exhausted=sum(s.exhausted for s in spends),
    )


def _check_race(
    candidates: Sequence[Any],
    labels: Sequence[str] | None,
    confidence: float,
    score_range: tuple[float, float],
    max_evaluations: int | None,
) -> list[str]:
    if len(candidates) < 2:
        raise ConfigError(
            f"a race needs at least 2 candidates, got {len(candidates)}",
            option="candidates",
            value=len(candidates),
        )
    if not (isinstance(confidence, int | float) and 0 < confidence < 1):
        raise ConfigError(
            f"must be between 0 and 1 (0.95 for 95%), got {confidence!r}",
            option="confidence",
            value=confidence,
        )
    lo, hi = score_range
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ConfigError(
            f"must be (low, high) with low < high, both finite, got {score_range!r}",
            option="score_range",
            value=score_range,
        )
    if max_evaluations is not None and max_evaluations < len(candidates) * 2:
        raise ConfigError(
            f"must allow every candidate 2 examples at least ({len(candidates) * 2}), got "
            f"{max_evaluations}",
            option="max_evaluations",
            value=max_evaluations,
        )
    if labels is None:
        return [f"candidate {i + 1}" for i in range(len(candidates))]
    if len(labels) != len(candidates):
        raise ConfigError(
            f"needs one label per candidate ({len(candidates)}), got {len(labels)}",
            option="labels",
            value=len(labels),
        )
    return [str(label) for label in labels]


def _scores_of(
    results: Sequence[Result], label: str, score_range: tuple[float, float]
) -> list[float | None]:
    """Each result's score; None for one the budget cut (it was not evaluated)."""
    lo, hi = score_range
    out: list[float | None] = []
    for r in results:
        if r.error is not None and r.error.kind == "budget_exhausted":
            out.append(None)
            continue
        s = float(r.score)
        if not (lo <= s <= hi):
            raise ConfigError(
                f"{label} scored {s!r} on example {r.example_id!r}, outside score_range "
                f"[{lo:g}, {hi:g}]: the race's bounds need bounded scores; give the metric's "
                "real range",
                option="score_range",
                value=score_range,
            )
        out.append(s)
    return out


class _State:
    """A race under way: the scores so far, who is alive, who was dropped when and why."""

    def __init__(self, names: list[str], score_range: tuple[float, float]) -> None:
        k = len(names)
        self.names = names
        self.score_range = score_range
        #: Each candidate's score per example taken (None: not evaluated, after its drop
        #: or cut by the budget), the columns of ``ids``.
        self.columns: list[list[float | None]] = [[] for _ in range(k)]
        self.ids: list[Any] = []
        self.tallies = [_Tally() for _ in range(k)]
        self.alive = list(range(k))
        self.dropped_round: dict[int, int] = {}
        self.reasons: dict[int, str] = {}
        self.rounds: list[RaceRound] = []
        self.cut: list[list[int]] = [[] for _ in range(k)]  # columns the budget cut
        self.spent = 0
        self.seen = 0

    async def run(
        self, evaluate: Evaluate, candidates: Sequence[Any], batch: list[Any]
    ) -> str | None:
        """Evaluate every alive candidate on ``batch``, all at once, and keep the scores;
        the feedback of a result the budget cut (None: none was)."""
        results: dict[int, list[Result]] = {}

        async def one(i: int) -> None:
            results[i] = await evaluate(candidates[i], batch)

        async with anyio.create_task_group() as tg:
            for i in self.alive:
                tg.start_soon(one, i)
        for i in self.alive:
            got = results[i]
            if len(got) != len(batch):
                raise RuntimeError(
                    f"the race's evaluate returned {len(got)} results for {len(batch)} "
                    "examples (it must return one per example)"
                )
        width = len(self.ids)
        for i in range(len(self.names)):
            # The dropped get no value for these examples: the matrix stays rectangular.
            if i not in results:
                self.columns[i].extend([None] * len(batch))
                continue
            self.columns[i].extend(_scores_of(results[i], self.names[i], self.score_range))
            self.tallies[i].add(results[i])
        self.ids.extend(r.example_id for r in results[self.alive[0]])
        cut = None
        for i in self.alive:
            for c, r in enumerate(results[i]):
                if r.error is not None and r.error.kind == "budget_exhausted":
                    cut = r.feedback
                    self.cut[i].append(width + c)
                else:
                    self.spent += 1
        self.seen += len(batch)
        assert all(len(c) == width + len(batch) for c in self.columns)
        return cut

    def paired(self) -> Matrix:
        """The alive candidates' scores on the examples every one of them was evaluated
        on (the paired test's columns: all of them but those the budget cut)."""
        import numpy as np

        rows = [self.columns[i] for i in self.alive]
        both = [c for c in range(len(self.ids)) if all(row[c] is not None for row in rows)]
        return np.array([[row[c] for c in both] for row in rows], dtype=np.float64).reshape(
            len(rows), len(both)
        )

    def drop(self, decision: Decision, matrix: Matrix, confidence: float, alpha: float) -> None:
        """Drop the candidates ``decision`` beats (positions among the alive), saying why."""
        import numpy as np

        number = len(self.rounds) + 1
        alive = self.alive
        for i in decision.dropped:
            j = decision.beaten_by[i]
            gap = float(np.mean(matrix[i] - matrix[j]))
            self.reasons[alive[i]] = (
                f"behind {self.names[alive[j]]} at {confidence:.0%} after {self.seen:,} "
                f"examples: mean difference {gap:+.4f}, paired test p <= "
                f"{decision.p_values[i]:.2g} (dropped at p <= {alpha:.2g})"
            )
            self.dropped_round[alive[i]] = number
        self.rounds.append(
            RaceRound(
                number=number,
                examples=self.seen,
                ran=list(alive),
                dropped=[alive[i] for i in decision.dropped],
            )
        )
        self.alive = [a for i, a in enumerate(alive) if i not in decision.beaten_by]


async def run_race(
    evaluate: Evaluate,
    candidates: Sequence[Any],
    examples: Sequence[Any],
    *,
    confidence: float = 0.95,
    ties: str | Ties = "report",
    labels: Sequence[str] | None = None,
    score_range: tuple[float, float] = (0.0, 1.0),
    max_evaluations: int | None = None,
    seed: int = 0,
    first_round: int = FIRST_ROUND,
    spend: Any = None,
) -> RaceResult:
    """Race ``candidates`` on ``examples`` through ``evaluate(candidate, examples)``
    (one result per example, in order); see :meth:`evaluator.Evaluator.race`. ``spend``:
    the ``llm_client.Spend`` ledger the evaluations reserve against (None: no budget);
    no round starts once it is spent, and the race reports against it."""
    names = _check_race(candidates, labels, confidence, score_range, max_evaluations)
    rule = parse_ties(ties)
    order = list(examples)
    if len(order) < 2:
        raise ConfigError(
            f"a race needs at least 2 examples, got {len(order)}",
            option="examples",
            value=len(order),
        )
    random.Random(seed).shuffle(order)
    width = score_range[1] - score_range[0]
    deltas = pair_delta(1.0 - confidence, len(names), epsilon=rule.epsilon is not None)
    state = _State(names, score_range)
    outcome: Literal["winner", "tied", "budget"] = "tied"
    reason = (
        f"all {len(order):,} examples were used and the candidates left could not be told "
        f"apart at {confidence:.0%}"
    )
    for end in round_ends(len(order), first_round):
        why = None if spend is None else spend.stop_reason()
        if why is not None:
            outcome, reason = "budget", _ran_out(state.seen, why)
            break
        stop = end
        if max_evaluations is not None:
            stop = min(end, state.seen + (max_evaluations - state.spent) // len(state.alive))
            if stop <= state.seen:
                outcome, reason = "budget", f"max_evaluations={max_evaluations} was spent"
                break
        cut = await state.run(evaluate, candidates, order[state.seen : stop])
        matrix = state.paired()
        decision = (
            decide(matrix, width, deltas, rule)
            if matrix.shape[1]
            else Decision(dropped=[], beaten_by={}, tied_within=False)
        )
        state.drop(decision, matrix, confidence, deltas[0])
        if len(state.alive) == 1:
            outcome = "winner"
            reason = f"every other candidate was dropped after {state.seen:,} examples"
            break
        if cut is not None:
            # Whatever ran out (this race's budget or one around it), no next round fits.
            why = None if spend is None else spend.stop_reason()
            outcome, reason = "budget", _ran_out(state.seen, why or cut)
            break
        if decision.tied_within:
            reason = (
                f"the {len(state.alive)} left are within {rule.epsilon:g} of each other at "
                f"{confidence:.0%} after {state.seen:,} examples"
            )
            break
    result = _result(
        state,
        outcome=outcome,
        reason=reason,
        confidence=confidence,
        rule=rule,
        total=len(order),
        seed=seed,
    )
    if spend is None:
        return result
    return msgspec.structs.replace(result, budget=budget_summary(spend))


def _ran_out(seen: int, why: str) -> str:
    return f"the budget ran out after {seen:,} examples: {why}"


def _result(
    state: _State,
    *,
    outcome: Literal["winner", "tied", "budget"],
    reason: str,
    confidence: float,
    rule: Ties,
    total: int,
    seed: int,
) -> RaceResult:
    import numpy as np

    names, columns, ids, alive = state.names, state.columns, state.ids, state.alive
    dropped_round, reasons, rounds = state.dropped_round, state.reasons, state.rounds
    tallies, score_range = state.tallies, state.score_range
    k = len(names)
    values = [[v for v in c if v is not None] for c in columns]
    means = [float(np.mean(v)) if v else None for v in values]
    # Survivors first (by mean), then the dropped, the last dropped first.
    ranking = sorted(
        range(k),
        key=lambda i: (
            0 if i in alive else 1,
            -dropped_round.get(i, 0),
            -_or(means[i], -math.inf),
        ),
    )
    candidates = []
    for rank, i in enumerate(ranking, start=1):
        n = len(values[i])
        low = high = None
        m = means[i]
        if n and m is not None:
            # Both ends, every candidate: 1 - confidence split over K intervals.
            low, high = mean_interval(values[i], *score_range, (1.0 - confidence) / k)
        candidates.append(
            RaceCandidate(
                index=i,
                label=names[i],
                rank=rank,
                mean=means[i],
                low=low,
                high=high,
                examples=n,
                errors=tallies[i].errors,
                exhausted=tallies[i].exhausted,
                dropped_round=dropped_round.get(i),
                dropped_reason=reasons.get(i),
                spend=tallies[i].spend(total),
            )
        )
    candidates.sort(key=lambda c: c.index)
    matrix: list[list[float | None]] = [
        [*c, *([None] * (len(ids) - len(c)))] for c in map(list, columns)
    ]
    winners = sorted(alive, key=lambda i: ranking.index(i))
    return RaceResult(
        outcome=outcome,
        reason=reason,
        winners=winners,
        tied=len(winners) > 1,
        ranking=ranking,
        candidates=candidates,
        rounds=rounds,
        confidence=confidence,
        ties=str(rule),
        score_range=score_range,
        example_ids=ids,
        scores=matrix,
        spend=_total([c.spend for c in candidates]),
        seed=seed,
        exhausted=state.cut,
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


# -- the race file -------------------------------------------------------------------

#: The key of a race file's one JSON object (its value: the format's version).
RACE_KEY = "skynet_eval_race"


class _RaceFile(msgspec.Struct, frozen=True):
    skynet_eval_race: int
    race: RaceResult


def write_race_file(race: RaceResult, path: str | Path, option: str = "output") -> Path:
    """Write ``race`` as one JSON object (``skynet-eval race --output``), whole or not at
    all: to a temporary name beside ``path``, then renamed there."""
    from ._report.html._build import write_file

    target = Path(path)
    write_file(msgspec.json.encode(_RaceFile(1, race)).decode() + "\n", target, option=option)
    return target


def is_race_file(path: str | Path) -> bool:
    """Whether ``path`` starts like a race file (one JSON object keyed ``RACE_KEY``)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
    except OSError:
        return False
    return head.lstrip().startswith(b'{"' + RACE_KEY.encode() + b'"')


def read_race_file(path: str | Path) -> RaceResult:
    """The race a race file holds; a broken one is a ResultsFileError naming the file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ResultsFileError(
            path, None, f"cannot be read ({exc.strerror})", "check the path"
        ) from None
    try:
        return msgspec.json.decode(data, type=_RaceFile).race
    except msgspec.DecodeError as exc:
        raise ResultsFileError(
            path,
            None,
            f"is not a whole race file ({exc})",
            "write it again with `skynet-eval race --output FILE`",
        ) from None
