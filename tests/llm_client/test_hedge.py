"""Hedged calls (``llm_client/_hedge.py``): the latency quantile, the race, its metering.

The race runs against the simulator on 127.0.0.1: a request's scripted latency
(``sim_latency_ms``) applies to both copies, so a scripted slow call makes a hedge that
cannot win; the simulator's seeded tail (``tail_share``) slows copies one by one, so a
hedge can overtake a slow first copy.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from llm_client import (
    Completion,
    ModelClient,
    ModelConfig,
    ModelConfigError,
    Share,
    Simulator,
    Spend,
)
from llm_client._fair import sharing
from llm_client._hedge import CANCELLED_NOTE, Hedge, LatencyTracker
from tests._helpers import until

from .conftest import config, user

PRICES: dict[str, Any] = {"price_input": 1.0, "price_output": 2.0}


async def _warm(client: ModelClient, n: int = 20, latency_ms: float = 20.0) -> None:
    """``n`` calls of a set latency: the ring holds enough samples to hedge from."""
    for i in range(n):
        await client.complete(user(f"warm {i}"), extra_body={"sim_latency_ms": latency_ms})


def _others() -> set[asyncio.Task[Any]]:
    """Tasks left in the loop but this test's and the simulator's own (its listening
    socket accepts a hedge's new connection in a task of asyncio's)."""
    current = asyncio.current_task()
    return {
        t
        for t in asyncio.all_tasks()
        if t is not current
        and not t.done()
        and "_accept_connection" not in t.get_coro().__qualname__  # type: ignore[union-attr]
    }


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TestLatencyTracker:
    def test_no_quantile_until_enough_samples(self) -> None:
        """The quantile is None until ``min_samples`` calls have finished."""
        clock = FakeClock()
        tracker = LatencyTracker(0.95, window=50, min_samples=3, clock=clock)
        for seconds in (0.1, 0.2):
            started = tracker.started()
            clock.now += seconds
            tracker.finished(started)
        assert tracker.threshold() is None
        started = tracker.started()
        clock.now += 0.3
        tracker.finished(started)
        assert tracker.threshold() == pytest.approx(0.3)

    def test_nearest_rank_quantile(self) -> None:
        """p95 of 1..100 ms, timed by the fake clock, is 95 ms (nearest rank)."""
        clock = FakeClock()
        tracker = LatencyTracker(0.95, window=100, min_samples=20, clock=clock)
        for ms in range(100, 0, -1):
            started = tracker.started()
            clock.now += ms / 1000
            tracker.finished(started)
        assert tracker.threshold() == pytest.approx(0.095)

    def test_ring_forgets_old_latencies(self) -> None:
        """Only the last ``window`` latencies count: a slow past is forgotten."""
        tracker = LatencyTracker(0.5, window=10, min_samples=5)
        for _ in range(10):
            tracker.record(5.0)
        for _ in range(10):
            tracker.record(0.01)
        assert len(tracker) == 10
        assert tracker.threshold() == pytest.approx(0.01)


class TestHedgeConfig:
    def test_off_by_default(self) -> None:
        """A ModelConfig hedges nothing unless asked."""
        assert ModelConfig(model="m").hedge is None

    def test_number_is_the_quantile(self) -> None:
        """``hedge=0.95`` is ``Hedge(quantile=0.95)`` with the default cap and samples."""
        assert ModelConfig(model="m", hedge=0.95).hedge == Hedge(quantile=0.95)

    @pytest.mark.parametrize("bad", [1.0, 0.2, True, "p95"], ids=["one", "low", "bool", "str"])
    def test_bad_hedge_is_a_clear_error(self, bad: object) -> None:
        """A quantile out of range, or not a number, names `hedge` and an example."""
        with pytest.raises(ModelConfigError, match="`hedge`"):
            ModelConfig(model="m", hedge=bad)  # type: ignore[arg-type]

    def test_bad_cap(self) -> None:
        """``max_extra`` must be a share in (0, 1]."""
        with pytest.raises(ModelConfigError, match="max_extra"):
            Hedge(max_extra=0)


class TestHedgedCalls:
    async def test_off_by_default_sends_one_copy(self, make_sim: Any) -> None:
        """Without ``hedge``, a slow call after many fast ones is sent once."""
        async with make_sim() as sim, ModelClient(config(sim)) as client:
            await _warm(client, 25)
            await client.complete(user("slow"), extra_body={"sim_latency_ms": 300})
            assert sim.statistics().requests == 26
            assert client.statistics().hedging is None

    async def test_hedge_only_past_the_quantile(self, make_sim: Any) -> None:
        """No hedge before the samples are in, none for a call faster than the quantile,
        one for a call slower than it; the server sees exactly those copies."""
        async with make_sim() as sim:
            cfg = config(sim, hedge=Hedge(quantile=0.9, max_extra=1.0), **PRICES)
            async with ModelClient(cfg) as client:
                await client.complete(user("early"), extra_body={"sim_latency_ms": 400})
                assert sim.statistics().requests == 1  # too few samples: no hedge
                await _warm(client, 19, latency_ms=50)  # 20 samples, none hedgeable yet
                stats = client.statistics().hedging
                assert stats is not None and stats.threshold_s is not None
                assert stats.hedges_sent == 0 and sim.statistics().requests == 20
                fast = await client.complete(user("fast"), extra_body={"sim_latency_ms": 1})
                assert fast.hedges == 0
                assert sim.statistics().requests == 21
                slow = await client.complete(user("slow"), extra_body={"sim_latency_ms": 600})
                assert slow.hedges == 1 and not slow.hedge_won  # both copies were slow
                assert sim.statistics().requests == 23
                stats = client.statistics().hedging
                assert stats is not None and stats.hedges_sent == 1 and stats.calls == 22

    async def test_cancelled_loser_makes_the_cost_unmeasured(self, make_sim: Any) -> None:
        """A loser cancelled in flight may be billed: the call's cost is unmeasured with
        the reason, and so is the extra spend; never $0."""
        async with make_sim() as sim:
            cfg = config(sim, hedge=Hedge(quantile=0.9, max_extra=1.0), **PRICES)
            async with ModelClient(cfg) as client:
                # Warm at 80 ms: the hedge leaves 80 ms after the first copy, so the two
                # replies (both scripted slow) cannot come in one tick.
                await _warm(client, latency_ms=80)
                slow = await client.complete(user("slow"), extra_body={"sim_latency_ms": 400})
                assert slow.hedges == 1
                assert slow.cost_usd is None and slow.cost_note == CANCELLED_NOTE
                stats = client.statistics().hedging
                assert stats is not None
                assert stats.extra_cost_usd is None
                assert stats.extra_cost_note is not None and "1 copies" in stats.extra_cost_note
                assert "extra spend unmeasured" in stats.describe()
                assert client.statistics().in_flight == 0
                assert _others() == set()

    @pytest.mark.slow  # a heavy-tailed latency, waited out on the real clock
    async def test_first_answer_wins_against_the_tail(self, make_sim: Any) -> None:
        """With a seeded tail, hedges overtake slow first copies: the hedge's answer is
        returned before the slow copy's, the slow copy is cancelled, nothing is left."""
        async with make_sim(latency_ms=20, tail_share=0.25, tail_factor=25, seed=3) as sim:
            cfg = config(sim, hedge=Hedge(quantile=0.7, max_extra=1.0), **PRICES)
            async with ModelClient(cfg) as client:
                replies: list[Completion] = []
                for i in range(60):
                    replies.append(await client.complete(user(f"q{i}")))
                won = [r for r in replies if r.hedge_won]
                assert won, "no hedge won against a 25x tail"
                # A slow copy takes 500 ms: the winners answered well before it could.
                assert all(r.latency_ms < 400 for r in won)
                stats = client.statistics()
                assert stats.hedging is not None
                assert stats.hedging.hedges_won == len(won)
                assert stats.hedging.hedges_sent == sum(r.hedges for r in replies)
                # A hedge cancelled before its bytes left reaches no server, yet counts.
                assert 60 + len(won) <= sim.statistics().requests <= 60 + stats.hedging.hedges_sent
                assert stats.in_flight == 0
                assert _others() == set()

    async def test_both_copies_metered_when_both_replied(self, make_sim: Any) -> None:
        """A loser that replied before the cancel is metered: its tokens add to the call's
        and its cost to the extra spend (measured)."""
        from llm_client._hedge import Hedger, Raced

        hedger = Hedger(Hedge())
        one = Completion(text="a", model="m", input_tokens=10, output_tokens=2, cost_usd=0.5)
        two = Completion(text="b", model="m", input_tokens=10, output_tokens=3, cost_usd=0.25)
        outcome: Raced[Completion] = Raced(None)
        outcome.hedged, outcome.won = True, True
        merged = hedger.settle(two, one, outcome)
        assert merged.text == "b" and merged.hedges == 1 and merged.hedge_won
        assert (merged.input_tokens, merged.output_tokens) == (20, 5)
        assert merged.cost_usd == pytest.approx(0.75)
        assert hedger.statistics().extra_cost_usd == pytest.approx(0.5)

    async def test_cancelling_the_call_cancels_both_copies(self, make_sim: Any) -> None:
        """The caller cancelled while both copies are in flight: both are cancelled,
        their permits settled, no task left."""
        async with make_sim() as sim:
            cfg = config(sim, hedge=Hedge(quantile=0.9, max_extra=1.0))
            async with ModelClient(cfg) as client:
                await _warm(client)
                call = asyncio.create_task(
                    client.complete(user("stuck"), extra_body={"sim_latency_ms": 60_000})
                )

                def sent() -> bool:
                    h = client.statistics().hedging
                    return h is not None and h.hedges_sent == 1

                await until(sent, "the hedge was sent")
                assert client.statistics().in_flight == 2
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                assert client.statistics().in_flight == 0
                assert _others() == set()
                await until(lambda: sim.statistics().in_flight == 0, "the server saw both go")

    async def test_no_hedge_without_a_free_slot(self, make_sim: Any) -> None:
        """``max_concurrency=1`` leaves no room: the hedge is refused, never queued."""
        async with make_sim() as sim:
            cfg = config(sim, max_concurrency=1, hedge=Hedge(quantile=0.9, max_extra=1.0))
            async with ModelClient(cfg) as client:
                await _warm(client)
                await client.complete(user("slow"), extra_body={"sim_latency_ms": 300})
                stats = client.statistics().hedging
                assert stats is not None and stats.hedges_sent == 0 and stats.refused == 1
                assert sim.statistics().requests == 21

    async def test_no_hedge_past_the_rate_budget(self, make_sim: Any) -> None:
        """An rpm the calls already use up leaves no room: no hedge is sent, and the
        server's own limit at that rpm never refuses a request."""
        async with make_sim(rpm=660) as sim:
            cfg = config(sim, rpm=600, hedge=Hedge(quantile=0.9, max_extra=1.0))
            async with ModelClient(cfg) as client:
                await _warm(client, latency_ms=5)
                await client.complete(user("slow"), extra_body={"sim_latency_ms": 500})
                stats = client.statistics().hedging
                assert stats is not None and stats.hedges_sent == 0 and stats.refused == 1
                assert sim.statistics().requests == 21
                assert sim.statistics().rate_limited == 0

    async def test_max_extra_caps_the_copies(self, make_sim: Any) -> None:
        """``max_extra`` bounds the extra copies as a share of the calls made."""
        async with make_sim() as sim:
            cfg = config(sim, hedge=Hedge(quantile=0.5, max_extra=0.1, min_samples=5))
            async with ModelClient(cfg) as client:
                await _warm(client, 5)
                for i in range(15):
                    await client.complete(user(f"s{i}"), extra_body={"sim_latency_ms": 60})
                stats = client.statistics().hedging
                assert stats is not None
                assert stats.hedges_sent <= 0.1 * stats.calls
                assert stats.capped >= 1


class TestHedgingUnderABudget:
    """A hedge copy reserves its own worst case in the spending ledger before it is sent
    (``Spend.try_reserve``); one that does not fit is refused, never queued."""

    async def test_a_hedge_that_fits_is_sent_and_settled(self, make_sim: Any) -> None:
        """Room in a dollar budget: the hedge is sent, both copies are charged to the
        ledger (spent at most the budget, nothing left reserved), one call each."""
        async with make_sim() as sim:
            cfg = config(sim, hedge=Hedge(quantile=0.9, max_extra=1.0), **PRICES)
            async with ModelClient(cfg) as client:
                await _warm(client)
                spend = Spend(usd=0.05)
                with sharing(Share("t", spend=spend)):
                    slow = await client.complete(
                        user("slow"), max_tokens=1000, extra_body={"sim_latency_ms": 300}
                    )
                assert slow.hedges == 1
                assert spend.calls_made == 2 and spend.calls_reserved == 0
                assert spend.reserved_usd == pytest.approx(0.0, abs=1e-12)
                assert 0 < spend.spent_usd <= 0.05
                assert sim.statistics().requests == 22

    async def test_no_room_in_a_dollar_budget_refuses_the_hedge(self, make_sim: Any) -> None:
        """A worst case of ~$0.002 (1,000 output tokens at $2/M) and a budget of $0.003:
        the first copy fits, the hedge does not: refused by the spending budget, not
        sent, the ledger not exhausted by it, spent at most the budget."""
        async with make_sim() as sim:
            cfg = config(sim, hedge=Hedge(quantile=0.9, max_extra=1.0), **PRICES)
            async with ModelClient(cfg) as client:
                await _warm(client)
                spend = Spend(usd=0.003)
                with sharing(Share("t", spend=spend)):
                    slow = await client.complete(
                        user("slow"), max_tokens=1000, extra_body={"sim_latency_ms": 300}
                    )
                stats = client.statistics().hedging
                assert slow.hedges == 0 and stats is not None
                assert stats.hedges_sent == 0 and stats.refused == stats.refused_budget == 1
                assert "1 refused by the spending budget" in stats.describe()
                assert "rate budget" not in stats.describe()
                assert sim.statistics().requests == 21
                assert spend.calls_made == 1 and spend.exhausted is None and spend.refused == 0
                assert spend.spent_usd <= 0.003

    async def test_no_room_in_a_calls_budget_refuses_the_hedge(self, make_sim: Any) -> None:
        """A calls budget the first copy uses up: the hedge would be one call more."""
        async with make_sim() as sim:
            cfg = config(sim, hedge=Hedge(quantile=0.9, max_extra=1.0))
            async with ModelClient(cfg) as client:
                spend = Spend(calls=21)
                with sharing(Share("t", spend=spend)):
                    await _warm(client)
                    await client.complete(user("slow"), extra_body={"sim_latency_ms": 300})
                stats = client.statistics().hedging
                assert stats is not None and stats.refused_budget == 1
                assert spend.calls_made == 21 == sim.statistics().requests

    async def test_a_cancelled_hedge_keeps_its_worst_case_spent(self, make_sim: Any) -> None:
        """The caller cancelled with both copies in flight: both reservations settle at
        their worst case (the provider may bill them), nothing stays reserved, spent is
        at most the budget."""
        async with make_sim() as sim:
            cfg = config(sim, hedge=Hedge(quantile=0.9, max_extra=1.0), **PRICES)
            async with ModelClient(cfg) as client:
                await _warm(client)
                spend = Spend(usd=0.05)
                with sharing(Share("t", spend=spend)):
                    call = asyncio.create_task(
                        client.complete(
                            user("stuck"), max_tokens=1000, extra_body={"sim_latency_ms": 60_000}
                        )
                    )
                await until(lambda: spend.calls_reserved == 2, "both copies were sent")
                worst = spend.reserved_usd
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
                assert spend.calls_reserved == 0 and spend.unmeasured_calls == 2
                assert spend.spent_usd == pytest.approx(worst) and spend.spent_usd <= 0.05
                assert _others() == set()


def test_simulator_tail_is_seeded() -> None:
    """The same seed slows the same requests; ``tail_share`` is checked."""
    from llm_client import SimulatorConfig

    with pytest.raises(ModelConfigError, match="tail_share"):
        SimulatorConfig(tail_share=1.5)
    with pytest.raises(ModelConfigError, match="tail_factor"):
        SimulatorConfig(tail_factor=0.5)
    one, two = (Simulator(SimulatorConfig(seed=7, tail_share=0.3)) for _ in range(2))
    assert [one._tail_rng.random() for _ in range(20)] == [
        two._tail_rng.random() for _ in range(20)
    ]
