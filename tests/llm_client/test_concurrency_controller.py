"""The in-flight limit: AIMD on latency and 429s, Little's law when a rate is known, caps."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Callable

from llm_client import ModelClient, RateGovernor, Simulator, SimulatorConfig
from llm_client._concurrency import START, ConcurrencyController

from .conftest import config, judge

Latency = Callable[[int], float | None]  # in flight at admission -> latency (None: a 429)


def flat(seconds: float) -> Latency:
    return lambda n: seconds


def slows_past(capacity: int, seconds: float) -> Latency:
    """A server sharing itself between the requests past ``capacity``."""
    return lambda n: seconds * max(1.0, n / capacity)


def refuses_past(capacity: int, seconds: float) -> Latency:
    return lambda n: None if n > capacity else seconds


def drive(
    controller: ConcurrencyController, server: Latency, seconds: float, *, dt: float = 0.005
) -> list[tuple[float, int]]:
    """A closed loop on a fake clock: callers always want more than the limit; each step
    replies to what is due, then admits up to the limit. The limit at each step."""
    due: list[tuple[float, float, bool]] = []  # (reply at, admitted at, refused)
    seen: list[tuple[float, int]] = []
    for step in range(int(seconds / dt)):
        now = step * dt
        while due and due[0][0] <= now:
            _, admitted, refused = heapq.heappop(due)
            if refused:
                controller.refused(admitted, now)
            else:
                controller.finished(now - admitted, now)
        while len(due) < controller.value:
            latency = server(len(due) + 1)
            heapq.heappush(due, (now + (latency or 0.001), now, latency is None))
            controller.admitted(len(due))
        controller.held()
        seen.append((now, controller.value))
    return seen


def late(seen: list[tuple[float, int]], after: float) -> list[int]:
    return sorted(v for t, v in seen if t >= after)


class TestWithoutARate:
    def test_grows_past_the_old_fixed_64_while_latency_is_flat(self) -> None:
        """Flat latency and callers waiting: the limit grows from 64 to the cap."""
        controller = ConcurrencyController(cap=1024, now=0.0)
        assert controller.value == START == 64
        seen = drive(controller, flat(0.3), 20.0)
        assert max(v for _, v in seen) == 1024
        assert all(v <= 1024 for _, v in seen)
        assert controller.source == "adaptive (latency)"
        assert controller.history[0] == (0.0, 64) and controller.history[-1][1] == 1024

    def test_settles_at_or_below_a_server_that_slows_down(self) -> None:
        """Past the server's capacity latency rises: the limit backs off to what the server
        serves at its unloaded latency, and stays around it, at or below it."""
        controller = ConcurrencyController(cap=1024, now=0.0)
        seen = drive(controller, slows_past(96, 0.3), 40.0)
        settled = late(seen, 20.0)
        assert settled[len(settled) // 2] <= 96  # the median
        assert settled[-1] <= 96 * ConcurrencyController.TOLERANCE * 1.1
        assert settled[0] >= 96 * ConcurrencyController.DRAIN * 0.9  # not collapsed
        assert controller.high > 96  # it did probe past the capacity

    def test_backs_off_on_429s(self) -> None:
        """A server that refuses past 200 in flight: the limit is cut when 429s come, and
        settles near the capacity rather than at the cap."""
        controller = ConcurrencyController(cap=1024, now=0.0)
        seen = drive(controller, refuses_past(200, 0.3), 30.0)
        assert controller.high < 1024
        assert late(seen, 15.0)[-1] <= 200 / ConcurrencyController.BETA
        history = controller.history
        cuts = [b for a, b in itertools.pairwise(history) if b[1] < a[1]]
        assert cuts, history

    def test_latency_alone_never_goes_below_the_start(self) -> None:
        """A server that slows past 32 in flight: the limit probes once past 64, sees the
        latency rise and comes back to 64, not lower (a client's latency carries its own
        loop's noise; 64 is what every run had before)."""
        controller = ConcurrencyController(cap=1024, now=0.0)
        seen = drive(controller, slows_past(32, 0.3), 20.0)
        assert min(v for _, v in seen) == 64
        assert late(seen, 10.0)[0] == 64

    def test_429s_do_not_go_below_the_start(self) -> None:
        """A server refusing past 30 in flight: the limit backs off from its probe past
        64 back to 64, not lower (the governor's shared pause paces what is below)."""
        controller = ConcurrencyController(cap=1024, now=0.0)
        seen = drive(controller, refuses_past(30, 0.3), 20.0)
        assert controller.low == 64 and late(seen, 10.0)[-1] == 64

    def test_a_few_429s_are_not_congestion(self) -> None:
        """One 429 in a hundred (a provider hiccup, an injected fault) does not stop growth."""
        controller = ConcurrencyController(cap=512, now=0.0)
        count = 0

        def hiccups(n: int) -> float | None:
            nonlocal count
            count += 1
            return None if count % 100 == 0 else 0.2

        drive(controller, hiccups, 15.0)
        assert controller.value == 512

    def test_does_not_grow_when_nobody_waits(self) -> None:
        """Replies with flat latency but no demand past the limit: no growth (an idle
        limit must not inflate)."""
        controller = ConcurrencyController(cap=1024, now=0.0)
        now = 0.0
        for _ in range(2000):
            now += 0.01
            controller.admitted(10)
            controller.finished(0.3, now)
        assert controller.value == 64


class TestWithARate:
    def test_follows_rate_times_latency(self) -> None:
        """A known rate: the limit is rate x latency with headroom (Little's law), whatever
        AIMD would do, and moves when the latency does."""
        controller = ConcurrencyController(cap=1024, now=0.0)
        controller.set_rate(50.0, 0.0)
        assert controller.value == 64  # no latency measured yet
        for i in range(200):
            controller.finished(2.0, 2.0 + i * 0.02)
        expected: float = math.ceil(50 * 2.0 * ConcurrencyController.HEADROOM + 2)
        assert controller.value == expected
        assert controller.source == "rate x latency"
        for i in range(400):
            controller.finished(1.5, 6.0 + i * 0.02)
        # Within the 3% the limit does not move for (latency jitter).
        expected = 50 * 1.5 * ConcurrencyController.HEADROOM + 2
        assert abs(controller.value - expected) <= 0.03 * expected + 1
        for i in range(400):
            controller.finished(0.05, 20.0 + i * 0.02)
        assert controller.value == START  # never below where it started

    def test_governor_with_a_configured_rpm(self) -> None:
        """rpm configured: the governor's in-flight limit follows rpm/60 x latency."""

        async def main() -> None:
            clock = FakeClock()
            governor = RateGovernor(rpm=3000, clock=clock)
            await settle(governor, clock, latency=2.0, calls=40)
            stats = governor.statistics()
            assert stats.in_flight_limit == math.ceil(50 * 2.0 * 1.25 + 2)
            assert stats.in_flight_source == "rate x latency"
            assert stats.in_flight_start == 64 and stats.in_flight_max == stats.in_flight_limit
            assert stats.latency_s is not None and abs(stats.latency_s - 2.0) < 1e-6

        asyncio.run(main())

    def test_governor_with_a_rate_learned_from_headers(self) -> None:
        """No rpm configured, the replies' x-ratelimit-* headers state 3,000 RPM: the
        in-flight limit follows it, past 64."""

        async def main() -> None:
            clock = FakeClock()
            governor = RateGovernor(clock=clock)
            governor.observe(
                {"x-ratelimit-limit-requests": "3000", "x-ratelimit-remaining-requests": "3000"}
            )
            await settle(governor, clock, latency=2.0, calls=40)
            stats = governor.statistics()
            assert stats.rpm_source == "learned from headers"
            assert stats.in_flight_limit == math.ceil(50 * 2.0 * 1.25 + 2) > 64

        asyncio.run(main())


class TestCaps:
    def test_never_past_max_concurrency(self) -> None:
        """max_concurrency caps the limit, whatever the rate needs, and the governor
        admits no more than that many at once."""

        async def main() -> None:
            clock = FakeClock()
            governor = RateGovernor(rpm=600_000, max_concurrency=80, clock=clock)
            await settle(governor, clock, latency=2.0, calls=40)
            assert governor.statistics().in_flight_limit == 80
            permits = []
            for _ in range(80):
                clock.now += 1.0  # the request budget refills: only the limit holds
                permits.append(await governor.acquire(1))
            clock.now += 1.0
            waiter = asyncio.ensure_future(governor.acquire(1))
            await asyncio.sleep(0)
            assert not waiter.done() and governor.statistics().in_flight == 80
            governor.release(permits.pop(), 1)
            await waiter
            governor.release(waiter.result(), 1)
            for permit in permits:
                governor.release(permit, 1)

        asyncio.run(main())

    def test_a_small_cap_is_the_start(self) -> None:
        """A cap below 64 is where the limit starts and the most it reaches."""
        controller = ConcurrencyController(cap=8, now=0.0)
        assert controller.value == 8
        drive(controller, flat(0.1), 5.0)
        assert controller.value == 8 and controller.high == 8

    def test_tighten_lowers_the_cap(self) -> None:
        """A second client of the model with a smaller max_concurrency caps the limit."""

        async def main() -> None:
            governor = RateGovernor()
            governor.tighten(rpm=None, tpm=None, max_concurrency=16, margin=0.0)
            assert governor.in_flight_limit == 16

        asyncio.run(main())


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def settle(governor: RateGovernor, clock: FakeClock, *, latency: float, calls: int) -> None:
    """``calls`` attempts, one at a time, each replying after ``latency`` fake seconds."""
    for _ in range(calls):
        permit = await governor.acquire(10)
        clock.now += latency
        governor.release(permit, 10)


class TestOverRealHTTP:
    async def test_header_declared_limit_lifts_in_flight_above_64(self) -> None:
        """Against the simulator over HTTP, stating 12,000 RPM in its headers, at 500 ms:
        the client, told no limit, keeps more than 64 requests in flight (the server sees
        them) and its statistics say why."""
        cfg = SimulatorConfig(rpm=12_000, latency_ms=500)
        async with Simulator(cfg) as sim, ModelClient(config(sim)) as client:
            await asyncio.gather(*(client.complete(judge(str(i), str(i))) for i in range(500)))
            stats = client.statistics()
            peak = sim.statistics().peak_in_flight
        assert stats.rpm_source == "learned from headers"
        assert stats.in_flight_source == "rate x latency"
        assert stats.in_flight_max > 64 and stats.in_flight_limit > 64
        assert peak > 64
        assert stats.rate_limited == 0
