"""How many requests to keep in flight: Little's law when a rate is known, AIMD when not.

A fixed number in flight is either too few (a slow model at a generous limit: 64 in
flight at 2 s reach 1,920 of 3,000 RPM) or too many (a server that queues past its
capacity answers everyone later). :class:`ConcurrencyController` sets the governor's
in-flight limit from what it measures, between a floor of one and ``cap`` (the config's
``max_concurrency``, 1,024 by default), starting from :data:`START`:

* **A rate is known** (configured, learned from headers, or the AIMD rate of bare 429s,
  see ``_budget.py``): keep in flight what that rate needs at the measured latency,
  ``rate * latency * HEADROOM + SLACK`` (Little's law, with headroom for jitter). More
  would only queue in the governor; fewer would leave the budget unused.
* Nothing takes the limit below its start (:data:`START`, or the cap when lower): a
  latency measured by the client includes its own loop's delays, which at tens of
  milliseconds are noise as large as a server's queueing; injected or random 429s come
  at any level; and 64 in flight is what every run had before the limit moved. Below
  it, the governor's budgets and its shared pause on 429 pace the calls, as before.
* **No rate is known**: additive increase, multiplicative decrease on the server's own
  signals. Latency is measured in *rounds*: a round counts only the replies to requests
  sent since it began, and lasts two latencies (so what it sees is the limit in force,
  not the one before, its slowest replies included): while a
  round's mean latency stays within ``TOLERANCE`` of the lowest of recent rounds and the
  limit was reached (callers wanted more), the limit grows, by half per round until the
  first sign of congestion (slow start), then by ``STEP`` of itself. A round whose latency
  rose is a server queueing: the limit drops to what the server delivers at its unloaded
  latency (replies per second times the lowest latency: the in-flight level it really
  serves), times ``DRAIN``. A round with more than ``MAX_429_SHARE`` 429s does not grow,
  one with more than ``CUT_429_SHARE`` cuts the limit by ``BETA`` (a few 429s are faults,
  not congestion: bare ones teach the governor a rate, and then the rate rules).
  inspect_ai's adaptive controller stops at 100; this one stops at ``cap``.

Times are the governor's clock, in seconds.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

__all__ = ["START", "ConcurrencyController", "LimitSource"]

#: The limit before anything is measured: the old fixed default.
START = 64

#: What set the in-flight limit last, as the statistics report it.
LimitSource = Literal["start", "rate x latency", "adaptive (latency)", "adaptive (429s)"]


class ConcurrencyController:
    """The in-flight limit of one governor (see the module docstring)."""

    HEADROOM = 1.25
    SLACK = 2.0
    TOLERANCE = 1.15  # a round this much slower than the base is queueing at the server
    SLOW_START = 1.5
    STEP = 0.03
    DRAIN = 0.8
    BETA = 0.7
    MAX_429_SHARE = 0.02  # more 429s than this in a round: no growth
    CUT_429_SHARE = 0.1  # more than this: a cut (fewer are faults, not congestion)
    MIN_ROUND = 8
    ROUND_TRIPS = 2.0  # a round lasts this many latencies: the slowest replies are in
    SMOOTHING = 0.05  # of the latency average, per reply
    BASE_ROUNDS = 30  # the base latency is the lowest of this many recent rounds
    HISTORY = 32

    def __init__(self, cap: int, now: float) -> None:
        self.cap = max(1, cap)
        self.floor = min(START, self.cap)
        self._limit = float(self.floor)
        self.value = int(self._limit)
        self.source: LimitSource = "start"
        self.rate: float | None = None  # requests per second the budgets allow, if known
        self.latency: float | None = None  # a moving average of reply latencies
        self._bases: deque[float] = deque(maxlen=self.BASE_ROUNDS)
        self._growing = True
        self._started = now
        self.low = self.high = self.value
        self.history: list[tuple[float, int]] = [(0.0, self.value)]
        self._round_start = now
        self._ok = 0
        self._latency_sum = 0.0
        self._delivered = 0  # every reply of the round, whenever its request was sent
        self._refused = 0
        self._saturated = False

    # -- what the governor tells it -------------------------------------------------------

    def set_cap(self, cap: int, now: float) -> None:
        self.cap = max(1, cap)
        self.floor = min(START, self.cap)
        self._set(min(self._limit, float(self.cap)), self.source, now)

    def set_rate(self, rate: float | None, now: float) -> None:
        """The request rate the budgets allow now (None: no budget in force)."""
        if rate == self.rate:
            return
        self.rate = rate
        if rate is not None and self.latency is not None:
            self._follow_rate(now)

    def admitted(self, in_flight: int) -> None:
        """An attempt was admitted; ``in_flight`` counts it."""
        if in_flight >= self.value:
            self._saturated = True  # callers wanted at least the whole limit

    def held(self) -> None:
        """A caller waits because the limit is reached."""
        self._saturated = True

    def finished(self, latency: float, now: float) -> None:
        """An attempt got a reply after ``latency`` seconds."""
        average = self.latency
        self.latency = (
            latency if average is None else average + self.SMOOTHING * (latency - average)
        )
        if self.rate is not None:
            self._follow_rate(now)
        self._delivered += 1
        if now - latency < self._round_start:
            return  # sent before the round began: it says nothing of the limit in force
        self._ok += 1
        self._latency_sum += latency
        self._maybe_end_round(now)

    def refused(self, admitted: float, now: float) -> None:
        """An attempt admitted at ``admitted`` got a 429."""
        if admitted < self._round_start:
            return
        self._refused += 1
        self._maybe_end_round(now)

    # -- rounds ---------------------------------------------------------------------------

    def _maybe_end_round(self, now: float) -> None:
        duration = now - self._round_start
        if self._ok + self._refused < self.MIN_ROUND or duration < self.ROUND_TRIPS * (
            self.latency or 0.0
        ):
            return
        ok, refused, saturated = self._ok, self._refused, self._saturated
        delivered = self._delivered
        mean = self._latency_sum / ok if ok else None
        self._round_start = now
        self._ok = self._refused = self._delivered = 0
        self._latency_sum = 0.0
        self._saturated = False
        if mean is not None:
            self._bases.append(mean)
        if self.rate is not None:
            return  # the rate rules (``_follow_rate``)
        if refused > max(1, self.CUT_429_SHARE * (ok + refused)):
            self._growing = False
            self._set(max(float(self.floor), self._limit * self.BETA), "adaptive (429s)", now)
            return
        if refused > max(1, self.MAX_429_SHARE * (ok + refused)):
            saturated = False  # no growth while the server refuses
        if mean is None:
            return
        base = min(self._bases)
        if mean > base * self.TOLERANCE:
            # Queueing: what the server delivers, at the latency it has when it does not
            # queue, is the in-flight level it really serves.
            self._growing = False
            served = delivered / max(duration, 1e-6) * base
            drained = max(float(self.floor), min(self._limit, served) * self.DRAIN)
            self._set(drained, "adaptive (latency)", now)
        elif saturated:
            grown = (
                self._limit * self.SLOW_START
                if self._growing
                else self._limit + max(1.0, self.STEP * self._limit)
            )
            self._set(grown, "adaptive (latency)", now)

    def _follow_rate(self, now: float) -> None:
        assert self.rate is not None and self.latency is not None
        needed = max(float(self.floor), self.rate * self.latency * self.HEADROOM + self.SLACK)
        near = abs(needed - self._limit) < 0.03 * self._limit
        if self.source == "rate x latency" and near and needed > self.floor:
            return  # within the latency's own jitter: not worth a change
        self._set(needed, "rate x latency", now)

    def _set(self, limit: float, source: LimitSource, now: float) -> None:
        self._limit = min(float(self.cap), max(1.0, limit))
        value = max(1, min(self.cap, math.ceil(self._limit - 1e-9)))
        self.source = source
        if value == self.value:
            return
        self.value = value
        self.low = min(self.low, value)
        self.high = max(self.high, value)
        history = self.history
        history.append((round(now - self._started, 3), value))
        if len(history) > self.HISTORY:
            # Keep the first, the last and every other one between: a short history of a
            # long run, thinned evenly.
            del history[1:-1:2]
