"""Where a rate budget comes from when nobody configured one.

A run at full concurrency meets the provider's limit head-on, and most users never say
what their limit is. Two sources remain, and the governor uses them in this order:

1. **The provider's rate-limit headers** (:func:`read_limits`). OpenAI and compatible
   servers send ``x-ratelimit-limit-requests``/``-tokens`` (per minute) and
   ``x-ratelimit-remaining-*`` on every reply; Anthropic sends
   ``anthropic-ratelimit-requests-limit``/``-tokens-limit`` and ``-remaining``. The
   governor paces to the limit they state, with its margin; what ``remaining`` says was
   already used when the limit is first learned is paid back before pacing starts, so the
   burst sent before the first reply does not overfill the provider's window.
2. **429s with no hint at all** (:class:`Adaptive`): additive increase, multiplicative
   decrease, as TCP does. The first bare 429 after a run of accepted requests starts an
   *episode*: the request rate drops to ``BETA`` times the rate measured over the last few
   seconds, and every caller pauses; while the episode lasts, each probe that is refused
   doubles the pause (from ``PAUSE_BASE`` up to ``PAUSE_CAP``), so a server whose window is
   full costs a handful of 429s rather than a storm. The first accepted request admitted
   after the episode began ends it: the rate is then at most the goodput of the last minute
   (requests accepted, over the time from the first of them to now), which is what a
   windowed limit let through; from there the rate grows by ``GROWTH`` of itself each
   second, but only while callers are waiting on it, so an idle budget does not inflate.

A configured ``rpm``/``tpm`` always wins over both, dimension by dimension. A 429 that
carries a hint (``retry-after``, ``x-ratelimit-*``) is handled by the governor's shared
pause alone: the server said when to come back, and a random 429 (a provider hiccup, an
injected fault) must not ratchet the rate down.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Literal, NamedTuple

__all__ = ["Adaptive", "BudgetSource", "LimitHints", "read_limits"]

#: Where the budget in force came from, as :meth:`RateGovernor.statistics` reports it.
BudgetSource = Literal["configured", "learned from headers", "adaptive (429s)", "none"]

_OPENAI = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
)
_ANTHROPIC = (
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-tokens-remaining",
)


class LimitHints(NamedTuple):
    """What one reply's headers say: limits per minute, and what remains of them."""

    rpm: float | None
    tpm: float | None
    remaining_requests: float | None
    remaining_tokens: float | None


def _number(headers: Mapping[str, str], name: str) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def read_limits(headers: Mapping[str, str]) -> LimitHints | None:
    """The rate limits stated by a reply's headers, or None when it states none.

    Header names are looked up in lower case (both transports give case-insensitive or
    lower-case mappings). A limit of 0 is not a limit anyone can pace to: ignored.
    """
    for names in (_OPENAI, _ANTHROPIC):
        rpm = _number(headers, names[0])
        tpm = _number(headers, names[1])
        if rpm or tpm:
            return LimitHints(
                rpm or None,
                tpm or None,
                _number(headers, names[2]),
                _number(headers, names[3]),
            )
    return None


class Adaptive:
    """The request rate learned from bare 429s (see the module docstring).

    Times are the governor's clock in seconds; rates are requests per second. The
    governor tells it of every admission (:meth:`admitted`), of each 429 episode's
    refusals (:meth:`refused`), of the first success after one (:meth:`recovered`) and of
    the passing time while callers wait (:meth:`grow`); it reads :attr:`rate`.
    """

    BETA = 0.7  # the cut on a new episode, as TCP CUBIC's
    GROWTH = 0.1  # per second, of the rate set at the last recovery
    PAUSE_GROWTH = 1.5  # each refused probe of one episode waits this much longer
    PAUSE_BASE = 0.25
    PAUSE_CAP = 10.0
    MIN_RATE = 1.0 / 60.0  # one request a minute: the rate never reaches zero
    MEASURE_S = 5.0  # the recent rate a cut starts from
    GOODPUT_S = 60.0  # the span goodput is measured over (the usual limit's window)

    def __init__(self) -> None:
        self.rate: float | None = None
        self.in_episode = False
        self._refusals = 0  # refused probes in the current episode
        self._admissions: deque[float] = deque()
        self._episode_start = 0.0
        self._last_refusal = 0.0
        self._alpha = 0.0
        self._grown_at = 0.0

    def admitted(self, now: float) -> None:
        admissions = self._admissions
        admissions.append(now)
        edge = now - self.GOODPUT_S
        while admissions[0] < edge:
            admissions.popleft()

    def _recent_rate(self, now: float) -> float | None:
        admissions = self._admissions
        if not admissions:
            return None
        edge = now - self.MEASURE_S
        count = 0
        for stamp in reversed(admissions):
            if stamp <= edge:
                break
            count += 1
        span = min(self.MEASURE_S, now - admissions[0])
        return count / span if span > 1e-3 and count else None

    def refused(self, now: float) -> float:
        """A bare 429 to a request admitted since the last one: the pause to take."""
        if not self.in_episode:
            self.in_episode = True
            self._episode_start = now
            self._refusals = 0
            # The rate in force is what was sent (it grows only while callers wait on
            # it); before there is one, what was sent lately is measured.
            base = self.rate if self.rate is not None else self._recent_rate(now)
            if base is not None:
                self.rate = max(self.MIN_RATE, self.BETA * base)
        self._refusals += 1
        self._last_refusal = now
        return min(self.PAUSE_CAP, self.PAUSE_BASE * self.PAUSE_GROWTH ** (self._refusals - 1))

    def recovered(self, now: float) -> None:
        """A request admitted after the episode's last refusal was accepted."""
        if not self.in_episode:
            return
        self.in_episode = False
        admissions = self._admissions
        # What the server let through before it refused, over the time until it took
        # requests again (between the last refused probe and this accepted one: the
        # middle), which for a windowed limit is the window's allowance over its length.
        edge = self._episode_start - self.GOODPUT_S
        before = [stamp for stamp in admissions if edge <= stamp <= self._episode_start]
        if before and self.rate is not None:
            reopened = (max(self._last_refusal, self._episode_start) + now) / 2.0
            goodput = len(before) / max(reopened - before[0], 1e-3)
            self.rate = max(self.MIN_RATE, min(self.rate, goodput))
        if self.rate is not None:
            self._alpha = self.GROWTH * self.rate
        self._grown_at = now

    def grow(self, now: float, *, hungry: bool) -> None:
        """Additive increase: while callers wait on the rate and no episode is on."""
        if self.rate is None or self.in_episode:
            self._grown_at = now
            return
        if hungry and now > self._grown_at:
            self.rate += self._alpha * (now - self._grown_at)
        self._grown_at = now
