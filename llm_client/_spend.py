"""Spending limits that are never overrun: dollars, calls and seconds, reserved up front.

A :class:`Spend` is a ledger with limits (``usd``, ``calls``, ``seconds``; None: no limit)
and, optionally, a parent (an Evaluator's lifetime ledger under one call's own). The
model client finds the ledger of a call on the :class:`~llm_client._fair.Share` in force
where it was made (``Share.spend``), so ``skynet.llm`` calls and the user's routed SDK
calls, in any executor, reserve in the one event loop of the engine.

Every HTTP attempt (a retry is one more) reserves its worst case before it is sent, on
its ledger and each parent: one call, and ``worst_usd`` = the prompt's upper bound plus
the request's output cap at the model's price. The prompt's bound is the request body's
length in **bytes**: a byte-level BPE token covers at least one byte, and the JSON body
holds every byte of the prompt plus its framing, so no tokenizer is needed and the bound
holds for any text. The output cap is the request's ``max_tokens`` (or
``max_completion_tokens``/``max_output_tokens``); a request with none is given
``max_tokens`` = :attr:`Spend.max_tokens` (default :data:`DEFAULT_MAX_TOKENS`) under a
dollar limit, so its worst case is a real ceiling.

An attempt that fits is admitted (checked and recorded in one step, with no await
between: nothing else runs in the loop meanwhile, and a lock guards calls from other
threads). One that does not fit *now* but would once the attempts in flight settle
waits for them; one that cannot fit whatever they settle to, and every one after it,
is refused with :class:`BudgetExhaustedError`. When an attempt ends its reservation is
replaced by its real cost: what the reply's usage says at the model's price, 0 for an
error reply (not billed), and the reservation itself when the cost is unknown (no reply
or no usage: the provider may have billed it). So ``spent_usd`` is at most ``usd``
whatever the concurrency.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable

from ._exceptions import BudgetExhaustedError

__all__ = ["DEFAULT_MAX_TOKENS", "BudgetExhaustedError", "Reservation", "Spend", "spent_words"]

#: The output cap a request without one is sent with under a dollar limit.
DEFAULT_MAX_TOKENS = 4096


class Reservation:
    """One admitted attempt's hold on its ledgers (settle it exactly once)."""

    __slots__ = ("ledgers", "settled", "usd")

    def __init__(self, ledgers: tuple[Spend, ...], usd: float) -> None:
        self.ledgers = ledgers
        self.usd = usd
        self.settled = False

    def settle(self, cost_usd: float | None, *, sent: bool = True) -> None:
        """The attempt ended: ``cost_usd`` is what it really cost (None: unknown, the
        reservation is kept as spent); ``sent=False``: it never left, nothing is spent."""
        if self.settled:
            return
        self.settled = True
        for ledger in self.ledgers:
            ledger._settle(self.usd, cost_usd, sent)


def _limit(value: float | int | None, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` must be a number or None, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"`{name}` must be a finite number >= 0, got {value!r}")
    return float(value)


class Spend:
    """A spending ledger with limits (see the module docstring)."""

    def __init__(
        self,
        *,
        usd: float | None = None,
        calls: int | None = None,
        seconds: float | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        parent: Spend | None = None,
        name: str = "budget",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.usd = _limit(usd, "usd")
        self.calls = None if calls is None else int(_limit(calls, "calls") or 0)
        self.seconds = _limit(seconds, "seconds")
        self.max_tokens = max_tokens
        self.parent = parent
        self.name = name
        self._clock = clock
        self.started = clock()
        self.spent_usd = 0.0
        self.reserved_usd = 0.0
        self.calls_made = 0
        self.calls_reserved = 0
        self.unmeasured_calls = 0  # attempts charged at their reservation (cost unknown)
        self.refused = 0
        #: Why the ledger is exhausted (None: it is not); sticky once set.
        self.exhausted: str | None = None
        self._lock = threading.Lock()
        self._waiters: list[asyncio.Future[None]] = []

    # -- what the callers ask -------------------------------------------------------------

    @property
    def ledgers(self) -> tuple[Spend, ...]:
        chain: list[Spend] = []
        ledger: Spend | None = self
        while ledger is not None:
            chain.append(ledger)
            ledger = ledger.parent
        return tuple(chain)

    @property
    def limits_usd(self) -> bool:
        return any(ledger.usd is not None for ledger in self.ledgers)

    def elapsed(self) -> float:
        return self._clock() - self.started

    def stop_reason(self) -> str | None:
        """Why no new work may start under this ledger (its own or a parent's), or None."""
        for ledger in self.ledgers:
            ledger._check_time()
            if ledger.exhausted is not None:
                return ledger.exhausted
        return None

    def describe(self) -> str:
        """The limits and what was spent against them, in words for a message."""
        return spent_words(
            self.usd, self.spent_usd, self.calls, self.calls_made, self.seconds, self.elapsed()
        )

    # -- admission ------------------------------------------------------------------------

    async def reserve(self, worst_usd: float, model: str) -> Reservation:
        """Admit one attempt of ``model`` whose worst case is ``worst_usd``, waiting for
        attempts in flight to settle when that could make it fit; raise
        :class:`BudgetExhaustedError` when it cannot fit."""
        chain = self.ledgers
        while True:
            with self._lock:
                verdict = self._fits(chain, worst_usd)
                if verdict == "yes":
                    for ledger in chain:
                        ledger.reserved_usd += worst_usd
                        ledger.calls_reserved += 1
                    return Reservation(chain, worst_usd)
                if verdict != "wait":
                    for ledger in chain:
                        ledger.refused += 1
                    raise BudgetExhaustedError(
                        f"model {model!r}: call not sent, {verdict}", model=model
                    )
                future = asyncio.get_running_loop().create_future()
                for ledger in chain:
                    ledger._waiters.append(future)
            await future

    def try_reserve(self, worst_usd: float) -> Reservation | None:
        """Admit one attempt now, or None: it does not fit what is left beside the
        attempts in flight. Never waits, and never marks the ledger exhausted or counts a
        refusal: for a hedged call's second copy (``_hedge.py``), which is optional (the
        first copy is in flight) and must not stop the calls of other examples."""
        chain = self.ledgers
        with self._lock:
            for ledger in chain:
                ledger._check_time()
                if ledger.exhausted is not None:
                    return None
                if (
                    ledger.calls is not None
                    and ledger.calls_made + ledger.calls_reserved >= ledger.calls
                ):
                    return None
                if (
                    ledger.usd is not None
                    and ledger.spent_usd + ledger.reserved_usd + worst_usd > ledger.usd
                ):
                    return None
            for ledger in chain:
                ledger.reserved_usd += worst_usd
                ledger.calls_reserved += 1
            return Reservation(chain, worst_usd)

    def _fits(self, chain: tuple[Spend, ...], worst: float) -> str:
        """ "yes", "wait", or why it can never fit (the ledger is then exhausted)."""
        wait = False
        for ledger in chain:
            ledger._check_time()
            if ledger.exhausted is not None:
                return ledger.exhausted
            if (
                ledger.calls is not None
                and ledger.calls_made + ledger.calls_reserved >= ledger.calls
            ):
                if ledger.calls_made >= ledger.calls:
                    ledger._exhaust(f"the {ledger.name}'s {ledger.calls} calls are spent")
                    return cast_str(ledger.exhausted)
                wait = True
            if (
                ledger.usd is not None
                and ledger.spent_usd + ledger.reserved_usd + worst > ledger.usd
            ):
                if ledger.spent_usd + worst > ledger.usd:
                    ledger._exhaust(
                        f"a model call's worst case (${worst:.6f}: its request's bytes and "
                        "output cap, max_tokens, at the model's price) does not fit what is "
                        f"left of the {ledger.name}"
                    )
                    return cast_str(ledger.exhausted)
                wait = True
        return "wait" if wait else "yes"

    def _check_time(self) -> None:
        if self.exhausted is None and self.seconds is not None and self.elapsed() >= self.seconds:
            self._exhaust(f"the {self.name}'s {self.seconds:g} s are over")

    def _exhaust(self, why: str) -> None:
        self.exhausted = f"{why} ({self.describe()})"
        self._wake()

    def _settle(self, reserved: float, cost: float | None, sent: bool) -> None:
        with self._lock:
            self.reserved_usd -= reserved
            self.calls_reserved -= 1
            if sent:
                self.calls_made += 1
                if cost is None:
                    self.unmeasured_calls += 1
                    cost = reserved
                self.spent_usd += cost
            self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.get_loop().call_soon_threadsafe(_release, future)


def spent_words(
    usd: float | None,
    spent_usd: float,
    calls: int | None,
    calls_made: int,
    seconds: float | None,
    elapsed_s: float,
) -> str:
    """``$0.009 of $0.01, 120 of 500 calls``: each limit against what was spent on it
    (the one wording, for a refusal's message and the report's row)."""
    parts = [f"${spent_usd:.6f}" + ("" if usd is None else f" of ${usd:g}")]
    parts.append(f"{calls_made:,}" + ("" if calls is None else f" of {calls:,}") + " calls")
    if seconds is not None:
        parts.append(f"{min(elapsed_s, seconds):.1f} of {seconds:g} s")
    return ", ".join(parts)


def _release(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def cast_str(value: str | None) -> str:
    assert value is not None
    return value
