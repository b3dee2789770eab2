"""Fair shares: the share in force, the fair queue's order, the governor's fair admission."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from llm_client import RateGovernor, Share, current_share, sharing
from llm_client._fair import FairQueue, validate_weight
from tests._helpers import until


class _Item:
    def __init__(self, name: str) -> None:
        self.name = name
        self.dead = False


def _queue() -> FairQueue[_Item]:
    return FairQueue(lambda item: item.dead)


def _drain(queue: FairQueue[_Item], cost: float = 1.0) -> list[str]:
    order = []
    while queue.peek() is not None:
        order.append(queue.pop(cost).name)
    return order


class TestShare:
    def test_weight_must_be_a_positive_finite_number(self) -> None:
        """A weight that is not a positive finite number is refused with its name and value."""
        for bad in (0, -1.0, float("nan"), float("inf"), True, "2"):
            with pytest.raises(ValueError, match="`weight` must be a positive"):
                Share("a", bad)  # type: ignore[arg-type]
        assert validate_weight(3) == 3.0

    def test_tenant_must_be_hashable(self) -> None:
        """An unhashable tenant is refused, saying what a tenant may be."""
        with pytest.raises(ValueError, match="`tenant` must be hashable"):
            Share(["a"])  # type: ignore[arg-type]  # the wrong type is the test

    async def test_sharing_sets_the_share_for_the_block_and_its_tasks(self) -> None:
        """Inside ``sharing`` the share is in force, also in tasks started there; after
        the block, the previous one is back."""
        share = Share("a", 2.0)
        assert current_share() is None
        with sharing(share):
            assert current_share() is share
            assert await asyncio.create_task(_read_share()) is share
        assert current_share() is None


async def _read_share() -> Share | None:
    return current_share()


class TestFairQueue:
    def test_one_tenant_is_fifo_by_seq(self) -> None:
        """Alone, a tenant's items come out in seq order (a retry with an old seq first)."""
        queue = _queue()
        for seq, name in ((2, "b"), (3, "c"), (1, "a")):
            queue.push(None, _Item(name), seq)
        assert _drain(queue) == ["a", "b", "c"]

    def test_equal_weights_alternate(self) -> None:
        """Two backlogged tenants of equal weight are served in turn, whoever came first."""
        queue = _queue()
        a, b = Share("a"), Share("b")
        for i in range(4):
            queue.push(a, _Item(f"a{i}"), i)
        for i in range(4):
            queue.push(b, _Item(f"b{i}"), 10 + i)
        assert _drain(queue) == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3"]

    def test_weights_set_the_shares(self) -> None:
        """A tenant of weight 3 gets three items for every one of a tenant of weight 1."""
        queue = _queue()
        a, b = Share("a", 3.0), Share("b", 1.0)
        for i in range(30):
            queue.push(a, _Item("a"), i)
            queue.push(b, _Item("b"), 100 + i)
        first = _drain(queue)[:20]
        assert Counter(first) == {"a": 15, "b": 5}

    def test_costs_are_charged(self) -> None:
        """A tenant whose items cost four times as much is served a quarter as often."""
        queue = _queue()
        big, small = Share("big"), Share("small")
        for i in range(20):
            queue.push(big, _Item("big"), i)
            queue.push(small, _Item("small"), 100 + i)
        order: list[str] = []
        while (item := queue.peek()) is not None and len(order) < 20:
            order.append(queue.pop(4.0 if item.name == "big" else 1.0).name)
        assert Counter(order) == {"small": 16, "big": 4}

    def test_an_idle_tenant_earns_no_credit(self) -> None:
        """A tenant that was idle while another was served ten requests alone gets no
        credit for its idle time: it goes first once (its start is the virtual time
        now), then they alternate, rather than it taking ten in a row."""
        queue = _queue()
        a, b = Share("a"), Share("b")
        for _ in range(10):
            queue.charge(a, 1.0)  # ten requests on the fast path, nobody waiting
        for i in range(4):
            queue.push(a, _Item("a"), i)
            queue.push(b, _Item("b"), 10 + i)
        assert _drain(queue) == ["b", "a", "b", "a", "b", "a", "b", "a"]

    def test_idle_tenants_are_forgotten(self) -> None:
        """Ten thousand tenants served one request each, one after another, leave a
        bounded number of entries behind, not one per tenant."""
        queue = _queue()
        for i in range(10_000):
            queue.charge(Share(("caller", i)), 1.0)
            if i % 3 == 0:
                queue.push(Share(("caller", i)), _Item("x"), i)
                assert queue.pop(1.0).name == "x"
        assert len(queue._flows) <= 2 * FairQueue.PRUNE_AT

    def test_dead_items_are_skipped(self) -> None:
        """Items that left the line (cancelled) are never served, nor block others."""
        queue = _queue()
        items = [_Item(n) for n in ("a0", "a1", "b0")]
        queue.push(Share("a"), items[0], 0)
        queue.push(Share("a"), items[1], 1)
        queue.push(Share("b"), items[2], 2)
        items[0].dead = items[1].dead = True
        assert _drain(queue) == ["b0"]
        assert queue.peek() is None
        assert queue.tenants() == 0


class TestGovernorFairness:
    async def test_tenants_are_admitted_by_weight(self) -> None:
        """Queued on one governor, a tenant of weight 2 is admitted twice for every
        admission of a tenant of weight 1 that queued at the same time, and one tenant's
        early arrival does not put all of it first."""
        governor = RateGovernor(max_concurrency=1)
        held = await governor.acquire(1)
        order: list[Any] = []
        permits: asyncio.Queue[Any] = asyncio.Queue()

        async def one(share: Share) -> None:
            with sharing(share):
                permit = await governor.acquire(1)
            order.append(share.tenant)
            await permits.put(permit)

        heavy, light = Share("heavy", 2.0), Share("light", 1.0)
        tasks = [asyncio.create_task(one(heavy)) for _ in range(12)]
        await until(lambda: governor.statistics().waiting >= 12)
        tasks += [asyncio.create_task(one(light)) for _ in range(12)]
        await until(lambda: governor.statistics().waiting >= 24)
        assert governor.statistics().tenants == 2
        governor.release(held, None)
        for _ in range(18):
            governor.release(await permits.get(), None)
        first = Counter(order[:18])
        assert first == {"heavy": 12, "light": 6}
        for _ in range(6):
            governor.release(await permits.get(), None)
        await asyncio.gather(*tasks)
        stats = governor.statistics()
        assert (stats.in_flight, stats.waiting, stats.tenants) == (0, 0, 0)

    async def test_cancelled_tenant_leaves_no_trace(self) -> None:
        """Cancelling every queued caller of one tenant hands nothing to it and leaves the
        other tenant's callers admitted in their order, with no slot or wait left over."""
        governor = RateGovernor(max_concurrency=1)
        held = await governor.acquire(1)
        order: list[str] = []

        async def one(share: Share, name: str) -> None:
            with sharing(share):
                permit = await governor.acquire(1)
            order.append(name)
            governor.release(permit, 1)

        gone = [asyncio.create_task(one(Share("gone"), f"g{i}")) for i in range(5)]
        kept = [asyncio.create_task(one(Share("kept"), f"k{i}")) for i in range(5)]
        await until(lambda: governor.statistics().waiting >= 10)
        for task in gone:
            task.cancel()
        await asyncio.gather(*gone, return_exceptions=True)
        assert governor.statistics().waiting == 5
        governor.release(held, None)
        await asyncio.gather(*kept)
        assert order == [f"k{i}" for i in range(5)]
        stats = governor.statistics()
        assert (stats.in_flight, stats.waiting, stats.requests_sent) == (0, 0, 6)

    def test_a_request_costs_the_seconds_of_its_binding_budget(self) -> None:
        """A request is charged the larger of its request's and its tokens' seconds of
        budget, and 1 when no budget is set, so long prompts pay for their tokens."""
        governor = RateGovernor(rpm=600, tpm=60_000)
        assert governor._cost(10) == pytest.approx(0.1)  # one request: 0.1 s of 10/s
        assert governor._cost(1000) == pytest.approx(1.0)  # 1000 tokens: 1 s of 1000/s
        assert RateGovernor()._cost(1000) == 1.0
