"""Hedged calls: a second copy of a call that has waited past its model's usual latency.

An optimizer's minibatch of three waits for its slowest judge call; a provider's tail (one
call in twenty taking ten times the median) sets the minibatch's time. With ``hedge=`` on a
:class:`~llm_client.ModelConfig`, a call that has waited longer than a quantile of the
model's recent latencies (:class:`LatencyTracker`, a bounded ring of replies) sends
a second copy; the first good answer wins and the other copy is cancelled. Both run in one
anyio task group, so the loser is cancelled and awaited before the call returns: no task is
left behind.

Rules (:class:`Hedger`):

* no hedging until the ring holds ``min_samples`` latencies (the quantile means nothing
  before);
* a hedge is admitted by the rate governor's :meth:`~llm_client.RateGovernor.try_acquire`
  only: a free slot, the request and token budgets, nobody queued. It never waits, so it
  never takes budget from a call in line and never pushes the run past the rate budget;
  one that does not fit is counted as refused and not sent;
* under a spending budget (``_spend.py``) the copy first reserves its own worst case,
  without waiting; one that does not fit is refused too (``refused_budget``), and the
  reservation is settled with the copy's real cost when it replies (its worst case
  stays spent when it is cancelled in flight). So hedging never pushes spent past the
  budget;
* at most ``max_extra`` extra copies per call made (10% by default);
* the hedge copy makes one attempt, never retried: if it fails, the first copy goes on.

What the extra copies cost (:meth:`Hedger.settle`). A loser that replied before it was
cancelled is metered like any reply: its tokens and cost are added to the call's
:class:`~llm_client.Completion`. A loser cancelled in flight may still be billed by the
provider (the request reached it, and a server need not stop generating when the client
goes), and its usage is never seen: the call's cost is then *unmeasured*, with that reason,
never $0 and never a guess. A copy refused with an HTTP error is not billed (0).
:class:`HedgeStatistics` counts hedges sent, won, refused and capped, and the extra spend
measured or the reason it is not; the client's statistics carry it, and so does the run
report's model budget row.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import msgspec

from ._exceptions import ModelConfigError
from ._usage import TokenUsage

if TYPE_CHECKING:
    from ._governor import Permit

__all__ = ["Hedge", "HedgeStatistics", "Hedger", "LatencyTracker", "Raced"]

_R = TypeVar("_R")
_C = TypeVar("_C", bound=TokenUsage)

#: Why the extra spend of a hedged call is not known when a copy was cancelled in flight.
CANCELLED_NOTE = (
    "a hedged copy was cancelled in flight: the provider may bill it, and its usage is "
    "never reported"
)


class Hedge(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """When to send a second copy of a call (``ModelConfig(hedge=...)``).

    ``quantile`` of the model's recent latencies (0.95: past the p95); ``max_extra`` the
    extra copies at most, as a share of the calls made; ``min_samples`` the latencies
    needed before any hedge; ``window`` how many recent latencies the quantile is read
    from.
    """

    quantile: float = 0.95
    max_extra: float = 0.1
    min_samples: int = 20
    window: int = 200

    def __post_init__(self) -> None:
        q = self.quantile
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0.5 <= q < 1:
            raise ModelConfigError(
                f"`hedge` quantile must be at least 0.5 and below 1 (0.95: past the p95), "
                f"got {q!r}",
                field="hedge",
                value=q,
            )
        extra = self.max_extra
        if isinstance(extra, bool) or not isinstance(extra, int | float) or not 0 < extra <= 1:
            raise ModelConfigError(
                f"`hedge` max_extra must be above 0 and at most 1 (0.1: 10% extra calls), "
                f"got {extra!r}",
                field="hedge",
                value=extra,
            )
        for name, low in (("min_samples", 1), ("window", max(1, self.min_samples))):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value:
                raise ModelConfigError(
                    f"`hedge` {name} must be a whole number, at least {low}, got {value!r}",
                    field="hedge",
                    value=value,
                )


def as_hedge(value: object) -> Hedge | None:
    """``ModelConfig.hedge`` as a :class:`Hedge`: a number is the quantile; None is off."""
    if value is None or isinstance(value, Hedge):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelConfigError(
            f"`hedge` must be a quantile such as 0.95, a Hedge(...) or None, got {value!r}",
            field="hedge",
            value=value,
        )
    return Hedge(quantile=value)


class LatencyTracker:
    """The latencies of a model's recent successful calls, and a quantile of them.

    A bounded ring (``window``); the quantile is None until ``min_samples`` are in, and is
    recomputed only after a new sample. ``clock`` times the calls (:meth:`started`).
    Nearest rank over a sorted copy of at most ``window`` values, here rather than the
    engine's ``evaluator._stats``: it runs on every call and ``llm_client`` imports
    nothing of the engine's.
    """

    __slots__ = ("_clock", "_min", "_q", "_ring", "_threshold")

    def __init__(
        self,
        quantile: float,
        *,
        window: int = 200,
        min_samples: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._q = quantile
        self._min = min_samples
        self._ring: deque[float] = deque(maxlen=window)
        self._threshold: float | None = None
        self._clock = clock

    def __len__(self) -> int:
        return len(self._ring)

    def started(self) -> float:
        """The clock now: pass it to :meth:`finished` when the call succeeds."""
        return self._clock()

    def finished(self, started: float) -> None:
        self.record(max(0.0, self._clock() - started))

    def record(self, seconds: float) -> None:
        self._ring.append(seconds)
        self._threshold = None

    def threshold(self) -> float | None:
        """The quantile of the ring (nearest rank), None while it holds too few samples."""
        if len(self._ring) < self._min:
            return None
        if self._threshold is None:
            ordered = sorted(self._ring)
            rank = max(1, math.ceil(self._q * len(ordered)))
            self._threshold = ordered[rank - 1]
        return self._threshold


class HedgeStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What hedging did for one model client.

    ``calls`` the calls made with hedging on; ``hedges_sent`` the second copies sent (each
    one extra call), ``hedges_won`` those whose answer was used; ``refused`` the hedges due
    that the rate governor or the spending budget had no room for (not sent;
    ``refused_budget`` of them by the budget), ``capped`` those held back by
    ``max_extra``. ``extra_cost_usd`` is what the losing copies cost, None when some
    loser was cancelled in flight (``extra_cost_note`` says why and how many).
    """

    quantile: float
    threshold_s: float | None  # the quantile now (None: too few samples)
    samples: int
    calls: int = 0
    hedges_sent: int = 0
    hedges_won: int = 0
    refused: int = 0
    refused_budget: int = 0
    capped: int = 0
    extra_cost_usd: float | None = 0.0
    extra_cost_note: str | None = None

    @property
    def extra_calls(self) -> float:
        """Extra copies sent, as a share of the calls made."""
        return self.hedges_sent / self.calls if self.calls else 0.0

    def describe(self) -> str:
        """``"hedged past p95: 12 of 400 calls (+3.0% calls), 9 won, 3 refused by the rate
        budget; extra spend unmeasured: ..."``."""
        text = (
            f"hedged past p{self.quantile * 100:g}: {self.hedges_sent} of {self.calls} calls "
            f"(+{self.extra_calls:.1%} calls), {self.hedges_won} won"
        )
        by_rate = self.refused - self.refused_budget
        if by_rate:
            text += f", {by_rate} refused by the rate budget"
        if self.refused_budget:
            text += f", {self.refused_budget} refused by the spending budget"
        if self.capped:
            text += f", {self.capped} held back by max_extra"
        if self.extra_cost_usd is None:
            text += f"; extra spend unmeasured: {self.extra_cost_note}"
        elif self.hedges_sent:
            text += f"; extra spend ${self.extra_cost_usd:.4f}"
        return text


class Raced(Generic[_R]):
    """How one hedged call went: the value used, and what became of the other copy."""

    __slots__ = ("cancelled", "hedged", "loser", "loser_failed", "value", "won")

    def __init__(self, value: object) -> None:
        self.value = value  # the first copy's result (a reply or its failure), or the hedge's
        self.hedged = False  # a second copy was sent
        self.won = False  # the second copy's answer is the one used
        self.loser: _R | None = None  # the other copy's reply, when one came
        self.loser_failed = False  # the other copy got an error reply (not billed)
        self.cancelled = False  # the other copy was cancelled in flight


class Hedger:
    """Hedging for one model client: the latency ring, the counters, the race."""

    def __init__(self, hedge: Hedge, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.hedge = hedge
        self.tracker = LatencyTracker(
            hedge.quantile, window=hedge.window, min_samples=hedge.min_samples, clock=clock
        )
        self._calls = 0
        self._sent = 0
        self._won = 0
        self._refused = 0
        self._refused_budget = 0
        self._capped = 0
        self._extra_usd = 0.0
        self._cancelled = 0
        self._unpriced: str | None = None

    async def race(
        self,
        first: Callable[[], Awaitable[object]],
        second: Callable[[Permit], Awaitable[tuple[bool, _R | None]]],
        admit: Callable[[], Permit | None],
        ok: Callable[[object], bool],
    ) -> Raced[_R]:
        """Run ``first``; past the quantile, ``second`` under a permit from ``admit`` (None:
        no room, no hedge). ``second`` returns (got a reply, its value if it is a good
        one); ``ok`` says whether ``first``'s result is a good answer. ``first``'s
        exceptions propagate as they are (never wrapped in a group)."""
        self._calls += 1
        delay = self.tracker.threshold()
        started = self.tracker.started()
        if delay is None:
            value = await first()
            if ok(value):
                self.tracker.finished(started)
            return Raced(value)
        race: _Race[_R] = _Race(self, started, ok)
        async with anyio.create_task_group() as tg:
            race.scope = tg.cancel_scope
            tg.start_soon(race.first, first)
            tg.start_soon(race.second, delay, second, admit)
        outcome = race.outcome
        if race.error is not None and not outcome.won:
            raise race.error
        if outcome.hedged:
            outcome.cancelled = outcome.loser is None and not outcome.loser_failed
            self._won += outcome.won
        return outcome

    def _may_send(self, admit: Callable[[], Permit | None]) -> Permit | None:
        """A permit for a hedge due now, or None (counted: capped or refused)."""
        if self._sent + 1 > self.hedge.max_extra * self._calls:  # never past the share
            self._capped += 1
            return None
        permit = admit()
        if permit is None:
            self._refused += 1
            return None
        self._sent += 1
        return permit

    def refused_by_budget(self) -> None:
        """The hedge due now did not fit the spending budget (``admit`` then says None,
        which counts it as refused)."""
        self._refused_budget += 1

    def settle(self, winner: _C, loser: _C | None, outcome: Raced[Any]) -> _C:
        """The winning :class:`~llm_client.Completion`, with what the other copy cost
        folded in: its tokens and cost when it replied, an unmeasured cost (the reason in
        ``cost_note``) when it was cancelled in flight; the extra spend counted."""
        if not outcome.hedged:
            return winner
        changes: dict[str, Any] = {"hedges": 1, "hedge_won": outcome.won}
        if outcome.cancelled:
            self._cancelled += 1
            changes["cost_usd"], changes["cost_note"] = None, CANCELLED_NOTE
        elif loser is not None:
            changes.update(msgspec.structs.asdict(winner.tokens + loser.tokens))
            cost: float | None = getattr(loser, "cost_usd", None)
            if cost is None:
                note = getattr(loser, "cost_note", None)
                self._unpriced = note or "the losing copy's cost is unknown"
                changes["cost_usd"], changes["cost_note"] = None, self._unpriced
            else:
                self._extra_usd += cost
                mine: float | None = getattr(winner, "cost_usd", None)
                if mine is not None:
                    changes["cost_usd"] = mine + cost
        return msgspec.structs.replace(winner, **changes)

    def statistics(self) -> HedgeStatistics:
        note: str | None = None
        if self._cancelled:
            note = f"{self._cancelled} copies cancelled in flight ({CANCELLED_NOTE})"
        elif self._unpriced is not None:
            note = self._unpriced
        return HedgeStatistics(
            quantile=self.hedge.quantile,
            threshold_s=self.tracker.threshold(),
            samples=len(self.tracker),
            calls=self._calls,
            hedges_sent=self._sent,
            hedges_won=self._won,
            refused=self._refused,
            refused_budget=self._refused_budget,
            capped=self._capped,
            extra_cost_usd=None if note is not None else self._extra_usd,
            extra_cost_note=note,
        )


class _Race(Generic[_R]):
    """The two copies of one hedged call, in one task group (cancelled by the winner)."""

    def __init__(self, hedger: Hedger, started: float, ok: Callable[[object], bool]) -> None:
        self.hedger = hedger
        self.started = started
        self.ok = ok
        self.outcome: Raced[_R] = Raced(None)
        self.done = False
        self.error: Exception | None = None
        self.scope: anyio.CancelScope | None = None

    def _win(self) -> None:
        self.done = True
        assert self.scope is not None
        self.scope.cancel()

    async def first(self, call: Callable[[], Awaitable[object]]) -> None:
        outcome, tracker = self.outcome, self.hedger.tracker
        value: object = None
        try:
            value = await call()
        except Exception as exc:  # re-raised by race(), unwrapped
            self.error = exc
        if self.done:  # the hedge won in the same tick, and this copy's reply came too
            if self.error is None and self.ok(value):
                outcome.loser = value  # type: ignore[assignment]
            else:
                outcome.loser_failed = _replied(value)
            return
        outcome.value = value
        if self.error is None and self.ok(value):
            tracker.finished(self.started)
        self._win()

    async def second(
        self,
        delay: float,
        call: Callable[[Permit], Awaitable[tuple[bool, _R | None]]],
        admit: Callable[[], Permit | None],
    ) -> None:
        await anyio.sleep(delay)
        if self.done:  # the first copy answered in the tick this one woke
            return
        permit = self.hedger._may_send(admit)
        if permit is None:
            return
        outcome, tracker = self.outcome, self.hedger.tracker
        outcome.hedged = True
        started = tracker.started()
        try:
            replied, value = await call(permit)
        except Exception:  # a hedge's own failure never fails the call: the first goes on
            replied, value = False, None
        if self.done or value is None:
            # Too late, or a failed hedge (the first copy goes on): it is the loser.
            outcome.loser = value
            outcome.loser_failed = replied and value is None
            return
        outcome.value, outcome.won = value, True
        # The ring holds replies' latencies: this one's, not the cancelled first copy's
        # (unknown). A tail the hedges cut leaves the ring, so the quantile stays in the
        # body; ``max_extra`` bounds how far down that can pull it.
        tracker.finished(started)
        self._win()


def _replied(value: object) -> bool:
    """Whether a failed copy's result carries an error reply (not billed)."""
    return getattr(value, "response", None) is not None
