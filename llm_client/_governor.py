"""The rate governor: request and token budgets, FIFO admission, a shared pause on 429.

Why not aiolimiter: its ``AsyncLimiter(R, 1.0)`` is a leaky bucket whose capacity is the
whole rate, starting empty, so R requests pass at once and R more drain during the next
second (2R in one second, measured on this machine); its waiters sit in a heap ordered by
the *amount* they ask for, so a small token reservation overtakes a large one, and a new
caller that finds capacity passes without queueing behind woken waiters. A judge run at a
provider's exact limit needs the opposite: a burst of at most two requests, strict FIFO
so a long prompt is never starved, a token budget settled after the fact from ``usage``,
and one pause that every waiter honours after a 429. Hence this module.

The budgets are token buckets refilling continuously:

* requests: capacity ``burst`` (2), one per request, admitted when the level is >= 1, so
  any window of W seconds holds at most ``rpm * W / 60 + burst`` requests;
* tokens: capacity 0, a request is admitted when the level is >= 0 and subtracts its
  reservation (the level may go negative), so any window holds at most ``tpm * W / 60``
  tokens plus the one reservation that drove the level below zero.

A reservation is settled when the attempt ends: refunded in full if no usage came back
(an error, a cancellation), otherwise corrected to the tokens the server reported.

Between tenants the order is fair, not FIFO (``_fair.py``): each caller's request is
queued under the :class:`~llm_client._fair.Share` in force where it called (a context
variable; none: the one default tenant), and when the budgets admit one more request the
backlogged tenant furthest behind its weighted share goes next. Each request is charged
the seconds of budget it uses, the larger of ``60 / rpm`` and ``tokens * 60 / tpm``, so a
tenant of long prompts and one of short ones share the *binding* budget by weight. It is
work-conserving: the budgets, not the shares, decide when a request starts, so one tenant
alone gets the whole budget and an idle tenant's share is lent to the others at once.

When no ``rpm``/``tpm`` is configured the budget is learned (``_budget.py``): from the
provider's rate-limit headers, which every reply is shown to (:meth:`RateGovernor.observe`),
else from bare 429s by AIMD. :meth:`RateGovernor.statistics` says which budget is in force
and where it came from.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ._budget import Adaptive, BudgetSource, read_limits
from ._concurrency import ConcurrencyController, LimitSource
from ._exceptions import RequestTooLargeError
from ._fair import FairQueue, current_share
from ._hedge import HedgeStatistics

__all__ = ["GovernorStatistics", "Permit", "RateGovernor", "governor_for"]


class GovernorStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one governor (shared by every client of one base URL, key and model).

    ``rpm``/``tpm`` are the budgets in force (None: none), and ``rpm_source``/``tpm_source``
    where each came from: "configured", "learned from headers", "adaptive (429s)" or
    "none".
    """

    rpm: float | None
    tpm: float | None
    rpm_source: BudgetSource
    tpm_source: BudgetSource
    budget_source: BudgetSource  # the request budget's source, else the token budget's
    max_concurrency: int
    in_flight: int  # admitted attempts not yet settled
    waiting: int  # callers queued for admission
    tokens_reserved: int  # reservations of the attempts in flight
    requests_sent: int  # attempts admitted since the governor was created
    rate_limited: int  # 429s reported back to the governor
    retries: int  # retries reported back (429s included)
    refused: int  # requests refused as larger than the whole token budget
    pauses: int  # shared pauses started after a 429
    queued_s: float  # total time callers spent waiting for admission
    paused_for_s: float  # time left in the current shared pause (0 if none)
    tenants: int = 0  # tenants with a caller queued (see ``_fair.py``)
    # The in-flight limit (``_concurrency.py``): now, its start, lowest and highest so far,
    # what set it last, and (seconds since the governor began, limit) at its changes.
    in_flight_limit: int = 0
    in_flight_start: int = 0
    in_flight_min: int = 0
    in_flight_max: int = 0
    in_flight_source: LimitSource = "start"
    in_flight_history: tuple[tuple[float, int], ...] = ()
    latency_s: float | None = None  # mean reply latency of the last round measured
    hedging: HedgeStatistics | None = None  # the client's hedged calls (None: hedging off)


class _Bucket:
    """A continuously refilling budget; ``stamp`` may lie in the future during a pause."""

    __slots__ = ("capacity", "level", "rate", "stamp")

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate  # units per second
        self.capacity = capacity
        self.level = capacity
        self.stamp = now

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def wait(self, need: float, now: float) -> float:
        """Seconds from ``now`` until the level reaches ``need`` (0 if it has)."""
        if self.level >= need:
            return max(0.0, self.stamp - now)
        return max(0.0, self.stamp - now) + (need - self.level) / self.rate


class _Waiter:
    __slots__ = ("enqueued", "future", "tokens")

    def __init__(self, tokens: int, future: asyncio.Future[float], now: float) -> None:
        self.tokens = tokens
        self.future = future
        self.enqueued = now


def _left(waiter: _Waiter) -> bool:
    return waiter.future.done()  # cancelled while waiting


class Permit:
    """An admitted attempt: holds one concurrency slot, one request and a token reservation.

    Settle it exactly once with :meth:`RateGovernor.release`. ``epoch`` counts the 429
    episodes before its admission: a 429 or a success of a permit admitted since the last
    episode is news, one of an older permit is not.
    """

    __slots__ = ("_released", "admitted", "epoch", "queued_s", "tokens")

    def __init__(self, tokens: int, queued_s: float, epoch: int = 0, admitted: float = 0.0) -> None:
        self.tokens = tokens
        self.queued_s = queued_s
        self.epoch = epoch
        self.admitted = admitted  # the governor's clock at admission
        self._released = False


class RateGovernor:
    """Admission control for one (base URL, key, model); see the module docstring.

    Between tenants (the :class:`~llm_client._fair.Share` in force where ``acquire`` is
    called), admission is start-time fair queueing by weight, each request charged the
    seconds of budget it uses (``_cost``); within one tenant, callers are admitted
    strictly in order of their sequence number (taken at the first attempt, so a retry
    keeps its place ahead of callers that came after it). With one tenant (no share
    anywhere) that is plain FIFO. Use :func:`governor_for` to get the one shared
    governor of a model within a loop.
    """

    BURST = 2.0

    def __init__(
        self,
        *,
        rpm: float | None = None,
        tpm: float | None = None,
        max_concurrency: int = 1024,
        margin: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._margin = margin
        self._rpm = rpm
        self._tpm = tpm
        self._rpm_source: BudgetSource = "configured" if rpm else "none"
        self._tpm_source: BudgetSource = "configured" if tpm else "none"
        # AIMD only while no request budget is configured or learned from headers.
        self._adaptive: Adaptive | None = None if rpm else Adaptive()
        self._epoch = 0
        self._tokens_admitted = 0
        self._max_concurrency = max_concurrency
        now = clock()
        self._limit = ConcurrencyController(max_concurrency, now)
        self._tokens_per_request: float | None = None  # mean used, for rate x latency
        self._requests = _Bucket(self._rate(rpm), self.BURST, now) if rpm else None
        self._tokens = _Bucket(self._rate(tpm), 0.0, now) if tpm else None
        self._queue: FairQueue[_Waiter] = FairQueue(_left)
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._paused_until = -1.0
        self._in_flight = 0
        self._waiting = 0
        self._tokens_reserved = 0
        self._requests_sent = 0
        self._rate_limited = 0
        self._retries = 0
        self._refused = 0
        self._pauses = 0
        self._queued_s = 0.0

    def _rate(self, per_minute: float | None) -> float:
        assert per_minute is not None
        return per_minute * (1.0 - self._margin) / 60.0

    # -- configuration -------------------------------------------------------------------

    @property
    def rpm(self) -> float | None:
        return self._rpm

    @property
    def tpm(self) -> float | None:
        return self._tpm

    @property
    def in_flight_limit(self) -> int:
        """Attempts admitted at once now (``_concurrency.py``), at most ``max_concurrency``."""
        return self._limit.value

    def tighten(
        self, *, rpm: float | None, tpm: float | None, max_concurrency: int, margin: float
    ) -> None:
        """Adopt the stricter of the current and the given limits.

        Two clients of one model that disagree about its limits share one budget; the
        stricter setting is the one that keeps both within the provider's limit.
        """
        now = self._clock()
        self._margin = max(self._margin, margin)
        if rpm is not None and (self._rpm_source != "configured" or rpm < (self._rpm or rpm)):
            self._rpm = rpm
            self._rpm_source = "configured"
            self._adaptive = None
        if self._rpm is not None:
            if self._requests is None:
                self._requests = _Bucket(0.0, self.BURST, now)
            self._requests.refill(now)
            self._requests.rate = self._rate(self._rpm)
        if tpm is not None and (self._tpm_source != "configured" or tpm < (self._tpm or tpm)):
            self._tpm = tpm
            self._tpm_source = "configured"
        if self._tpm is not None:
            if self._tokens is None:
                self._tokens = _Bucket(0.0, 0.0, now)
            self._tokens.refill(now)
            self._tokens.rate = self._rate(self._tpm)
        self._max_concurrency = min(self._max_concurrency, max_concurrency)
        self._limit.set_cap(self._max_concurrency, now)
        self._sync_rate(now)
        self._dispatch()

    # -- admission -----------------------------------------------------------------------

    def next_seq(self) -> int:
        """A place in line; pass it to every :meth:`acquire` of one call."""
        return next(self._seq)

    async def acquire(self, tokens: int, *, seq: int | None = None) -> Permit:
        """Wait for a concurrency slot, a request and ``tokens``, in FIFO order."""
        if self._tpm is not None and tokens > self._tpm:
            self._refused += 1
            raise RequestTooLargeError(
                f"the request needs about {tokens} tokens (prompt estimate plus max_tokens) "
                f"but the whole budget is {self._tpm:g} tokens per minute; shorten the "
                "prompt, lower max_tokens or raise tpm"
            )
        now = self._clock()
        share = current_share()
        if not self._waiting and self._in_flight < self._limit.value and self._admits(now):
            # Nobody queued and the budgets allow it: admit at once, without a future.
            self._queue.charge(share, self._cost(tokens))
            self._admit(tokens, now)
            return Permit(tokens, 0.0, self._epoch, now)
        loop = asyncio.get_running_loop()
        waiter = _Waiter(tokens, loop.create_future(), now)
        self._queue.push(share, waiter, next(self._seq) if seq is None else seq)
        self._waiting += 1
        self._dispatch()
        try:
            admitted_at = await waiter.future
        except asyncio.CancelledError:
            fut = waiter.future
            if fut.done() and not fut.cancelled():
                # Admitted in the same tick as the cancellation: hand the slot back.
                self.release(Permit(tokens, 0.0, self._epoch), None)
            else:
                fut.cancel()
                self._waiting -= 1
                self._dispatch()
            raise
        queued = max(0.0, admitted_at - waiter.enqueued)
        self._queued_s += queued
        return Permit(tokens, queued, self._epoch, admitted_at)

    def try_acquire(self, tokens: int) -> Permit | None:
        """A permit now, or None: only when nobody is queued, a slot is free and the
        budgets allow one more request. For a hedged call's second copy, which never
        waits and never goes ahead of a caller in line (``_hedge.py``)."""
        now = self._clock()
        if (
            (self._tpm is not None and tokens > self._tpm)
            or self._waiting
            or self._in_flight >= self._limit.value
            or not self._admits(now)
        ):
            return None
        self._queue.charge(current_share(), self._cost(tokens))
        self._admit(tokens, now)
        return Permit(tokens, 0.0, self._epoch, now)

    def release(self, permit: Permit, used_tokens: int | None) -> None:
        """Settle an attempt: free its slot; refund or correct its token reservation.

        ``used_tokens`` is what the server's ``usage`` reported, or None when nothing came
        back (the reservation is refunded in full).
        """
        if permit._released:
            return
        permit._released = True
        self._in_flight -= 1
        self._tokens_reserved -= permit.tokens
        now = self._clock()
        if used_tokens is not None:
            # A reply: its latency is what the in-flight limit is measured by.
            self._limit.finished(max(0.0, now - permit.admitted), now)
            mean = self._tokens_per_request
            self._tokens_per_request = (
                float(used_tokens) if mean is None else mean + 0.1 * (used_tokens - mean)
            )
        bucket = self._tokens
        if bucket is not None:
            bucket.refill(now)
            correction = permit.tokens if used_tokens is None else permit.tokens - used_tokens
            bucket.level = min(bucket.capacity, bucket.level + correction)
        adaptive = self._adaptive
        if (
            adaptive is not None
            and adaptive.in_episode
            and used_tokens is not None
            and permit.epoch == self._epoch
        ):
            adaptive.recovered(now)
            self._apply_adaptive()
        self._sync_rate(now)
        self._dispatch()

    # -- learning the budget ---------------------------------------------------------------

    def observe(self, headers: Mapping[str, str]) -> None:
        """Read a reply's rate-limit headers; pace to the limits they state unless a
        limit was configured (see ``_budget.py``)."""
        if self._rpm_source == "configured" and self._tpm_source == "configured":
            return
        hints = read_limits(headers)
        if hints is None:
            return
        now = self._clock()
        learned = False
        if hints.rpm is not None and self._rpm_source != "configured" and hints.rpm != self._rpm:
            self._learn_requests(hints.rpm, hints.remaining_requests, now)
            learned = True
        if hints.tpm is not None and self._tpm_source != "configured" and hints.tpm != self._tpm:
            self._learn_tokens(hints.tpm, hints.remaining_tokens, now)
            learned = True
        if learned:
            self._sync_rate(now)
            self._dispatch()

    @property
    def adapting(self) -> bool:
        """Whether bare 429s drive the request rate (no rpm configured or learned)."""
        return self._adaptive is not None

    def _learn_requests(self, rpm: float, remaining: float | None, now: float) -> None:
        first = self._rpm_source != "learned from headers"
        self._rpm = rpm
        self._rpm_source = "learned from headers"
        self._adaptive = None
        bucket = self._requests
        if bucket is None:
            bucket = self._requests = _Bucket(self._rate(rpm), self.BURST, now)
        bucket.refill(now)
        bucket.rate = self._rate(rpm)
        if first and remaining is not None:
            # What went out before anyone knew the limit is in the provider's window
            # already: pay it back before pacing (never more than this governor sent).
            used = min(max(0.0, rpm - remaining), float(self._requests_sent))
            bucket.level = min(bucket.level, self.BURST - used)

    def _learn_tokens(self, tpm: float, remaining: float | None, now: float) -> None:
        first = self._tpm_source != "learned from headers"
        self._tpm = tpm
        self._tpm_source = "learned from headers"
        bucket = self._tokens
        if bucket is None:
            bucket = self._tokens = _Bucket(self._rate(tpm), 0.0, now)
        bucket.refill(now)
        bucket.rate = self._rate(tpm)
        if first and remaining is not None:
            used = min(max(0.0, tpm - remaining), float(self._tokens_admitted))
            bucket.level = min(bucket.level, -used)

    def _apply_adaptive(self) -> None:
        """Put the AIMD rate in force as the request budget."""
        adaptive = self._adaptive
        if adaptive is None or adaptive.rate is None:
            return
        now = self._clock()
        bucket = self._requests
        if bucket is None:
            bucket = self._requests = _Bucket(adaptive.rate, self.BURST, now)
        bucket.refill(now)
        bucket.rate = adaptive.rate
        self._rpm = adaptive.rate * 60.0
        self._rpm_source = "adaptive (429s)"

    def note_rate_limited(
        self,
        wait_s: float,
        *,
        hinted: bool = True,
        epoch: int | None = None,
        admitted: float | None = None,
    ) -> None:
        """A 429 came back: everyone waiting on this governor pauses for ``wait_s``.

        The request budget is clamped to one request and both budgets stop refilling
        until the pause ends, so the callers resume one at a time at the configured pace
        rather than together (which is how a retry storm starts).

        ``admitted`` is the refused attempt's :attr:`Permit.admitted` (None: now), for the
        in-flight limit. ``epoch`` is the refused attempt's :attr:`Permit.epoch`: a 429
        to a request sent before the last episode began is part of that episode, not news.
        A bare 429 (``hinted`` False: no retry-after, no rate-limit header) with no budget
        configured or learned drives the AIMD rate down and sets the pause (``_budget.py``).
        """
        self._rate_limited += 1
        now = self._clock()
        self._limit.refused(now if admitted is None else admitted, now)
        news = epoch is None or epoch >= self._epoch
        if news:
            self._epoch += 1
        adaptive = self._adaptive
        if adaptive is not None and not hinted:
            if not news:
                self._dispatch()
                return  # the pause of its episode stands
            wait_s = max(wait_s, adaptive.refused(now))
            self._apply_adaptive()
        until = now + max(0.0, wait_s)
        if until > self._paused_until:
            if self._paused_until < now:
                self._pauses += 1
            self._paused_until = until
            for bucket, clamp in ((self._requests, 1.0), (self._tokens, 0.0)):
                if bucket is not None:
                    bucket.refill(now)
                    bucket.level = min(bucket.level, clamp)
                    bucket.stamp = max(bucket.stamp, until)
        self._dispatch()

    def note_retry(self) -> None:
        """A retry (after a 429, a 5xx, a timeout, a dropped connection) is about to happen."""
        self._retries += 1

    def _cost(self, tokens: int) -> float:
        """What one request of ``tokens`` costs its tenant: the seconds of the binding
        budget it uses (the larger of its request's and its tokens'), 1 with no budget."""
        cost = 0.0
        requests, budget = self._requests, self._tokens
        if requests is not None and requests.rate > 0:
            cost = 1.0 / requests.rate
        if budget is not None and budget.rate > 0:
            cost = max(cost, tokens / budget.rate)
        return cost if cost > 0 else 1.0

    def _dispatch(self) -> None:
        queue = self._queue
        if not self._waiting:
            return
        now = self._clock()
        requests, tokens = self._requests, self._tokens
        adaptive = self._adaptive
        if adaptive is not None and adaptive.rate is not None and requests is not None:
            # Callers are queued: the rate may grow, unless the cap or a pause holds them.
            hungry = self._in_flight < self._limit.value and now >= self._paused_until
            adaptive.grow(now, hungry=hungry)
            requests.refill(now)
            requests.rate = adaptive.rate
        limit = self._limit
        while (head := queue.peek()) is not None:
            if self._in_flight >= limit.value:
                limit.held()
                return  # release() dispatches again
            wait = self._paused_until - now
            if requests is not None:
                requests.refill(now)
                wait = max(wait, requests.wait(1.0, now))
            if tokens is not None:
                tokens.refill(now)
                wait = max(wait, tokens.wait(0.0, now))
            if wait > 0:
                self._arm(now, wait)
                return
            queue.pop(self._cost(head.tokens))
            self._admit(head.tokens, now)
            self._waiting -= 1
            head.future.set_result(now)

    def _admits(self, now: float) -> bool:
        """Whether one more request may start now (the budgets and the pause; not FIFO)."""
        if self._paused_until > now:
            return False
        requests, tokens = self._requests, self._tokens
        adaptive = self._adaptive
        if adaptive is not None and adaptive.rate is not None:
            adaptive.grow(now, hungry=False)  # nobody queued: the rate is not what binds
        if requests is not None:
            requests.refill(now)
            if requests.wait(1.0, now) > 0:
                return False
        if tokens is not None:
            tokens.refill(now)
            if tokens.wait(0.0, now) > 0:
                return False
        return True

    def _admit(self, tokens: int, now: float) -> None:
        if self._requests is not None:
            self._requests.level -= 1.0
        if self._tokens is not None:
            self._tokens.level -= tokens
        if self._adaptive is not None:
            self._adaptive.admitted(now)
        self._in_flight += 1
        self._limit.admitted(self._in_flight)
        self._tokens_reserved += tokens
        self._tokens_admitted += tokens
        self._requests_sent += 1

    def _sync_rate(self, now: float) -> None:
        """Tell the in-flight limit the request rate the budgets allow (None: none)."""
        rate: float | None = None
        requests, tokens = self._requests, self._tokens
        if requests is not None and requests.rate > 0:
            rate = requests.rate
        if tokens is not None and tokens.rate > 0:
            per = self._tokens_per_request
            if per is not None and per > 0:
                by_tokens = tokens.rate / per
                rate = by_tokens if rate is None else min(rate, by_tokens)
        self._limit.set_rate(rate, now)

    def _arm(self, now: float, wait: float) -> None:
        # Timers fire with the loop's granularity (1 ms under uvloop), possibly a hair
        # early; the floor keeps an early wake-up from re-arming at zero delay in a loop.
        at = now + max(wait, 0.0005)
        if self._timer is not None:
            if self._timer_at <= at + 1e-4:
                return
            self._timer.cancel()
        self._timer_at = at
        self._timer = asyncio.get_running_loop().call_later(at - now, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()

    # -- state ---------------------------------------------------------------------------

    def statistics(self) -> GovernorStatistics:
        now = self._clock()
        limit = self._limit
        adaptive = self._adaptive
        rpm = self._rpm
        if adaptive is not None and adaptive.rate is not None:
            rpm = adaptive.rate * 60.0  # grown since it was put in force
        return GovernorStatistics(
            rpm=rpm,
            tpm=self._tpm,
            rpm_source=self._rpm_source,
            tpm_source=self._tpm_source,
            budget_source=self._rpm_source if self._rpm_source != "none" else self._tpm_source,
            max_concurrency=self._max_concurrency,
            in_flight=self._in_flight,
            waiting=self._waiting,
            tokens_reserved=self._tokens_reserved,
            requests_sent=self._requests_sent,
            rate_limited=self._rate_limited,
            retries=self._retries,
            refused=self._refused,
            pauses=self._pauses,
            queued_s=self._queued_s,
            paused_for_s=max(0.0, self._paused_until - now),
            tenants=self._queue.tenants(),
            in_flight_limit=limit.value,
            in_flight_start=limit.history[0][1],
            in_flight_min=limit.low,
            in_flight_max=limit.high,
            in_flight_source=limit.source,
            in_flight_history=tuple(limit.history),
            latency_s=limit.latency,
        )


# One registry per event loop: asyncio futures and timers belong to one loop, so two loops
# (say, the simulator's thread and the caller's) must not share a governor. Entries die
# with their loop. Nothing here is created bound to a loop at import.
_registry: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, RateGovernor]] = (
    weakref.WeakKeyDictionary()
)
_registry_lock = threading.Lock()


def governor_for(
    *,
    base_url: str,
    api_key: str | None,
    model: str,
    rpm: float | None,
    tpm: float | None,
    max_concurrency: int,
    margin: float,
) -> RateGovernor:
    """The governor of (base URL, key, model) in the running loop, created on first use.

    The key enters the registry only as a SHA-256 digest, so the registry holds no secret.
    """
    loop = asyncio.get_running_loop()
    digest = hashlib.sha256(api_key.encode()).hexdigest() if api_key else ""
    key = (base_url.rstrip("/"), digest, model)
    with _registry_lock:
        governors = _registry.setdefault(loop, {})
        governor = governors.get(key)
        if governor is None:
            governor = governors[key] = RateGovernor(
                rpm=rpm, tpm=tpm, max_concurrency=max_concurrency, margin=margin
            )
            return governor
    governor.tighten(rpm=rpm, tpm=tpm, max_concurrency=max_concurrency, margin=margin)
    return governor
