"""The rate governor: budgets, FIFO, shared pause, refusal, sharing, cancellation."""

from __future__ import annotations

import asyncio
import bisect
import itertools
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from llm_client import (
    HTTPRequest,
    HTTPResponse,
    HTTPTransport,
    MockTransport,
    ModelClient,
    ModelConfig,
    RateGovernor,
    RequestTooLargeError,
    Simulator,
)
from llm_client._governor import _Bucket, governor_for
from llm_client._wire import estimate_tokens
from tests._helpers import VirtualTimeLoop, until

from .conftest import config, user


def _peak(times: list[float], window: float) -> int:
    times = sorted(times)
    return max(
        (bisect.bisect_right(times, t + window - 1e-9, lo=i) - i for i, t in enumerate(times)),
        default=0,
    )


def _peak_weighted(events: list[tuple[float, int]], window: float) -> int:
    events = sorted(events)
    best = 0
    for i, (start, _) in enumerate(events):
        total = sum(w for t, w in events[i:] if t < start + window - 1e-9)
        best = max(best, total)
    return best


def _ok(tokens_in: int, tokens_out: int = 2) -> HTTPResponse:
    body = {
        "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out},
    }
    return HTTPResponse(200, {}, msgspec.json.encode(body))


class TestBucket:
    def test_refills_continuously_up_to_capacity(self) -> None:
        """A bucket gains rate * elapsed and never more than its capacity."""
        bucket = _Bucket(rate=10.0, capacity=2.0, now=0.0)
        bucket.level = -1.0
        bucket.refill(0.15)
        assert bucket.level == pytest.approx(0.5)
        bucket.refill(10.0)
        assert bucket.level == 2.0

    def test_wait_until_level(self) -> None:
        """wait() is the time for the level to reach what is needed, 0 if it has."""
        bucket = _Bucket(rate=4.0, capacity=0.0, now=0.0)
        bucket.level = -2.0
        assert bucket.wait(0.0, 0.0) == pytest.approx(0.5)
        bucket.level = 0.0
        assert bucket.wait(0.0, 0.0) == 0.0

    def test_paused_bucket_does_not_refill(self) -> None:
        """A stamp in the future (a pause) delays both refill and admission."""
        bucket = _Bucket(rate=10.0, capacity=2.0, now=0.0)
        bucket.level = 0.0
        bucket.stamp = 1.0
        bucket.refill(0.5)
        assert bucket.level == 0.0
        assert bucket.wait(1.0, 0.5) == pytest.approx(0.6)


class TestRateGovernor:
    @pytest.mark.slow
    async def test_request_rate_never_exceeded_in_any_window(self, make_sim: Any) -> None:
        """In every window W, at most rpm*W/60 + 2 requests leave the client (its own
        clock, at the transport), and the server sees the same within its arrival jitter
        (its thread, starved on a loaded machine, reads a few requests at once); ~2.5 s."""
        rpm = 3000.0  # 50 a second
        sent: list[float] = []

        class Recording(HTTPTransport):
            async def send(self, request: HTTPRequest, *, timeout: float) -> HTTPResponse:
                sent.append(time.monotonic())
                return await super().send(request, timeout=timeout)

        async with make_sim(latency_ms=2) as sim:
            cfg = config(sim, rpm=rpm, rate_margin=0.0)
            async with ModelClient(cfg, transport=Recording()) as client:
                await asyncio.gather(*(client.complete(user(f"q{i}")) for i in range(120)))
        jitter_s = 0.1
        for window in (0.1, 0.25, 0.5, 1.0, 2.0):
            assert _peak_weighted([(t, 1) for t in sent], window) <= rpm * window / 60 + 2, window
            assert sim.peak_requests(window) <= rpm * (window + jitter_s) / 60 + 2, window
        # and the budget is used: 120 requests at 50/s with a burst of 2 take ~2.36 s
        span = sent[-1] - sent[0]
        assert (120 - 2) / 50 * 0.97 <= span <= (120 - 2) / 50 * 1.3

    @pytest.mark.slow
    async def test_token_rate_never_exceeded_in_any_window(self) -> None:
        """In every window W, reserved tokens stay within tpm*W/60 plus one reservation
        (clock read by the transport; ~2 s)."""
        seen: list[tuple[float, int]] = []

        def handler(request: HTTPRequest) -> HTTPResponse:
            body = msgspec.json.decode(request.body)
            tokens = estimate_tokens(body["messages"])
            seen.append((time.monotonic(), tokens + body["max_tokens"]))
            return _ok(tokens)

        tpm = 120_000.0  # 2,000 tokens a second
        cfg = ModelConfig(model="m", api_key_env=None, tpm=tpm, rate_margin=0.0)
        async with ModelClient(cfg, transport=MockTransport(handler)) as client:
            sizes = [40, 400, 120, 800, 40, 300] * 2
            await asyncio.gather(
                *(client.complete(user("x" * (4 * n)), max_tokens=10) for n in sizes)
            )
        biggest = max(w for _, w in seen)
        for window in (0.25, 0.5, 1.0, 2.0):
            assert _peak_weighted(seen, window) <= tpm * window / 60 + biggest, window
        # and the budget is used: settled at the usage reported (max_tokens 10, used 2),
        # every admission but the last waits for the tokens of those before it
        used = [w - 8 for _, w in seen]
        span = seen[-1][0] - seen[0][0]
        assert span >= (sum(used) - used[-1]) / 2000 * 0.95
        assert span <= (sum(used) - used[-1]) / 2000 * 1.3

    async def test_fifo_and_large_requests_are_not_overtaken(self) -> None:
        """Callers are sent in arrival order; a large reservation waiting on the token budget
        is not overtaken by small ones that came after it (~0.5 s)."""
        order: list[str] = []

        def handler(request: HTTPRequest) -> HTTPResponse:
            body = msgspec.json.decode(request.body)
            order.append(body["messages"][0]["content"][:3])
            return _ok(estimate_tokens(body["messages"]), 1)

        cfg = ModelConfig(model="m", api_key_env=None, tpm=600_000, rate_margin=0.0)
        sizes = [2000, 10, 3000, 10, 10, 1500, 10]  # 10,000 tokens a second
        async with ModelClient(cfg, transport=MockTransport(handler)) as client:
            tasks = []
            for i, size in enumerate(sizes):
                text = f"c{i}:" + "x" * (4 * size)
                tasks.append(asyncio.create_task(client.complete(user(text), max_tokens=1)))
                stats = client.statistics
                await until(lambda: stats().requests_sent + stats().waiting >= i + 1)  # noqa: B023
            await asyncio.gather(*tasks)
        assert order == [f"c{i}:" for i in range(len(sizes))]

    async def test_shared_pause_on_429(self) -> None:
        """After a 429 with retry-after-ms, no caller of the governor is sent before the
        pause ends (tolerance 15 ms for timer granularity)."""
        sent: list[tuple[float, str]] = []
        first = asyncio.Event()
        pause_s = 0.3

        async def handler(request: HTTPRequest) -> HTTPResponse:
            text = msgspec.json.decode(request.body)["messages"][0]["content"]
            sent.append((time.monotonic(), text))
            if text == "a" and not first.is_set():
                first.set()
                return HTTPResponse(
                    429,
                    {"retry-after-ms": str(int(pause_s * 1000))},
                    b'{"error": {"message": "slow down", "code": "rate_limit_exceeded"}}',
                )
            return _ok(3)

        cfg = ModelConfig(model="m", api_key_env=None, max_concurrency=1)
        async with ModelClient(cfg, transport=MockTransport(handler)) as client:
            results = await asyncio.gather(*(client.complete(user(t)) for t in "abcd"))
            stats = client.statistics()
        t429 = sent[0][0]
        assert sent[0][1] == "a"
        assert all(t >= t429 + pause_s - 0.015 for t, _ in sent[1:])
        # the caller that met the 429 keeps its place: it goes first after the pause
        assert sent[1][1] == "a"
        assert results[0].rate_limited == 1 and results[0].retries == 1
        assert results[0].queued_ms >= (pause_s - 0.015) * 1000
        assert stats.rate_limited == 1 and stats.pauses == 1 and stats.retries == 1

    async def test_request_larger_than_budget_is_refused_at_once(self) -> None:
        """A reservation above the whole TPM budget raises RequestTooLargeError, sends nothing."""
        transport = MockTransport(lambda request: _ok(1))
        cfg = ModelConfig(model="m", api_key_env=None, tpm=1000)
        async with ModelClient(cfg, transport=transport) as client:
            with pytest.raises(RequestTooLargeError, match="1000 tokens per minute"):
                await client.complete(user("x" * 8000))
            assert client.statistics().refused == 1
        assert transport.requests == []

    async def test_one_governor_per_url_key_model(self, sim: Simulator) -> None:
        """Clients of one (URL, key, model) share a governor; another model gets its own,
        and the stricter limits win."""
        a = config(sim, "m1", rpm=600)
        b = config(sim, "m1", rpm=300, max_concurrency=8)
        c = config(sim, "m2", rpm=600)
        async with ModelClient(a) as ca, ModelClient(b) as cb, ModelClient(c) as cc:
            await ca.complete(user("hi"))
            assert cb.statistics().requests_sent == 1
            assert cb.statistics().rpm == 300 and ca.statistics().max_concurrency == 8
            assert cc.statistics().requests_sent == 0

    async def test_registry_is_per_loop(self) -> None:
        """A governor made in one loop is not handed to another loop."""
        kwargs: dict[str, Any] = {
            "base_url": "http://127.0.0.1:1/v1",
            "api_key": "k",
            "model": "m",
            "rpm": None,
            "tpm": None,
            "max_concurrency": 4,
            "margin": 0.0,
        }
        here = governor_for(**kwargs)
        assert governor_for(**kwargs) is here

        async def other() -> RateGovernor:
            return governor_for(**kwargs)

        there = await asyncio.to_thread(asyncio.run, other())
        assert there is not here

    async def test_cancelled_waiter_leaves_the_line(self) -> None:
        """A caller cancelled while queued is dropped and the next one is admitted."""
        governor = RateGovernor(max_concurrency=1)
        held = await governor.acquire(1)
        second = asyncio.create_task(governor.acquire(1))
        third = asyncio.create_task(governor.acquire(1))
        await until(lambda: governor.statistics().waiting >= 2)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        assert governor.statistics().waiting == 1
        governor.release(held, None)
        permit = await third
        stats = governor.statistics()
        assert (stats.in_flight, stats.waiting, stats.requests_sent) == (1, 0, 2)
        governor.release(permit, 1)
        assert governor.statistics().in_flight == 0

    async def test_settlement_refunds_unused_tokens(self) -> None:
        """A reservation is corrected to the reported usage, or refunded when none came."""
        clock = [0.0]
        governor = RateGovernor(tpm=600.0, clock=lambda: clock[0])  # 10 tokens a second
        permit = await governor.acquire(100)
        assert governor.statistics().tokens_reserved == 100
        governor.release(permit, 30)  # used 30: 70 come back
        assert governor._tokens is not None
        assert governor._tokens.level == pytest.approx(-30.0)
        clock[0] = 3.0  # 30 tokens refilled: level back to 0
        permit = await governor.acquire(50)
        governor.release(permit, None)
        assert governor._tokens.level == pytest.approx(0.0)
        assert governor.statistics().tokens_reserved == 0


def _on_a_fake_clock(
    make: Callable[[Callable[[], float]], RateGovernor], sizes: list[int]
) -> tuple[RateGovernor, list[tuple[float, int]]]:
    """Callers of ``sizes`` tokens, in that order, through the governor ``make(clock)``
    builds, on a loop whose clock jumps to its next timer (no real waiting): when each
    was admitted, and its size (each settles at once, using what it reserved)."""

    async def run() -> tuple[RateGovernor, list[tuple[float, int]]]:
        loop = asyncio.get_running_loop()
        governor = make(loop.time)
        admitted: list[tuple[float, int]] = []

        async def one(tokens: int) -> None:
            permit = await governor.acquire(tokens)
            admitted.append((loop.time(), tokens))
            governor.release(permit, tokens)

        await asyncio.gather(*(one(n) for n in sizes))
        return governor, admitted

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(run())


def _paused(clock: Callable[[], float], pause_s: float) -> RateGovernor:
    """A governor of 600 RPM (10 a second) whose first request met a 429 at ``clock()``
    with a pause of ``pause_s``."""
    governor = RateGovernor(rpm=600.0, clock=clock)
    governor.note_rate_limited(pause_s)
    return governor


class TestOnAFakeClock:
    """The governor's pacing on the loop's fake clock (``clock=loop.time``): exact, and in
    no real time. The HTTP tests above check the same bounds at a real server."""

    def test_request_rate_never_exceeded_in_any_window(self) -> None:
        """120 callers at 3000 RPM: at most the burst of 2 plus rpm*W/60 in any window W,
        and the budget used (the last admitted (120 - 2) / 50 s after the first)."""
        rpm = 3000.0
        _, admitted = _on_a_fake_clock(lambda clock: RateGovernor(rpm=rpm, clock=clock), [1] * 120)
        times = [t for t, _ in admitted]
        for window in (0.1, 0.25, 0.5, 1.0, 2.0):
            assert _peak(times, window) <= rpm * window / 60 + 2, window
        assert times[-1] - times[0] == pytest.approx((120 - 2) / 50, rel=0.01)

    def test_token_rate_never_exceeded_in_any_window(self) -> None:
        """Reservations of mixed sizes at 120,000 TPM: within tpm*W/60 plus the largest
        one in any window, admitted in arrival order, and the budget used."""
        tpm = 120_000.0  # 2,000 tokens a second
        sizes = [50, 410, 130, 810, 50, 310] * 2
        _, seen = _on_a_fake_clock(lambda clock: RateGovernor(tpm=tpm, clock=clock), sizes)
        assert [n for _, n in seen] == sizes
        for window in (0.25, 0.5, 1.0, 2.0):
            assert _peak_weighted(seen, window) <= tpm * window / 60 + max(sizes), window
        span = seen[-1][0] - seen[0][0]
        assert span == pytest.approx((sum(sizes) - sizes[-1]) / 2000, rel=0.01)

    def test_a_429_pauses_every_caller(self) -> None:
        """After a 429 with a 30 s pause (at time 0), no caller is admitted before the
        pause ends; the queued callers then go one at a time at the configured pace."""
        governor, admitted = _on_a_fake_clock(lambda clock: _paused(clock, 30.0), [1] * 4)
        times = [t for t, _ in admitted]
        assert min(times) >= 30.0 and governor.statistics().pauses == 1
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(gap == pytest.approx(0.1, abs=1e-3) for gap in gaps), gaps


def _limited(limit: int, remaining: int) -> HTTPResponse:
    body = {
        "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    headers = {
        "x-ratelimit-limit-requests": str(limit),
        "x-ratelimit-remaining-requests": str(remaining),
    }
    return HTTPResponse(200, headers, msgspec.json.encode(body))


class TestLearnedBudget:
    @pytest.mark.slow
    async def test_limit_learned_from_headers_and_kept(self, make_sim: Any) -> None:
        """With no rpm configured the governor paces to the limit the simulator's headers
        state: no 429, never more than the window allows, and the budget used (~2.5 s)."""
        async with (
            make_sim(rpm=6000, window_s=1.5) as sim,  # 150 a window
            ModelClient(config(sim, max_concurrency=8)) as client,
        ):
            started = time.perf_counter()
            await asyncio.gather(*(client.complete(user(f"q{i}")) for i in range(250)))
            elapsed = time.perf_counter() - started
            stats = client.statistics()
        assert (stats.rpm, stats.rpm_source) == (6000, "learned from headers")
        assert stats.tpm_source == "none" and stats.rate_limited == 0
        assert sim.statistics().rate_limited == 0
        assert sim.peak_requests(1.5) <= 150
        # paced at 98 a second after the first 8: about 2.5 s, not the 0.3 s of no pacing
        assert elapsed >= (250 - 8) / 100

    async def test_configured_limit_wins_over_headers(self, make_sim: Any) -> None:
        """A configured rpm stays in force whatever the headers say."""
        async with (
            make_sim(rpm=1200, window_s=60.0) as sim,
            ModelClient(config(sim, rpm=300)) as client,
        ):
            await client.complete(user("x"))
            stats = client.statistics()
        assert (stats.rpm, stats.rpm_source) == (300, "configured")

    async def test_anthropic_headers_learned(self) -> None:
        """anthropic-ratelimit-* headers set the request and token budgets."""
        headers = {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-tokens-limit": "40000",
        }
        reply = _ok(3)
        transport = MockTransport(lambda r: HTTPResponse(200, headers, reply.body))
        cfg = ModelConfig(model="m", api_key_env=None)
        async with ModelClient(cfg, transport=transport) as client:
            await client.complete(user("x"))
            stats = client.statistics()
        assert (stats.rpm, stats.rpm_source) == (50, "learned from headers")
        assert (stats.tpm, stats.tpm_source) == (40000, "learned from headers")

    async def test_what_went_out_before_learning_is_paid_back(self) -> None:
        """Five requests sent before the limit was known, which the headers say were used:
        the request budget starts that far in debt (less the burst of two)."""
        arrived = 0
        all_in = asyncio.Event()

        async def handler(request: HTTPRequest) -> HTTPResponse:
            nonlocal arrived
            arrived += 1
            if arrived == 5:
                all_in.set()
            await all_in.wait()  # all five are out before any reply
            return _limited(600, 595)

        transport = MockTransport(handler)
        cfg = ModelConfig(model="m", api_key_env=None, max_concurrency=5, rate_margin=0.0)
        async with ModelClient(cfg, transport=transport) as client:
            await asyncio.gather(*(client.complete(user(f"{i}")) for i in range(5)))
            governor = client._governor
            assert governor is not None and governor._requests is not None
            level = governor._requests.level
        # 2 - 5 at the first reply, refilled at 10 a second for the instants since.
        assert -3.0 <= level < -2.0

    async def test_hinted_429s_do_not_start_aimd(self, make_sim: Any) -> None:
        """Injected 429s that carry retry-after pause the callers but set no adaptive
        rate: the server said when to come back."""
        async with (
            make_sim(rate_limit_rate=0.3, seed=5) as sim,
            ModelClient(config(sim, max_retries=10)) as client,
        ):
            await asyncio.gather(*(client.complete(user(f"q{i}")) for i in range(20)))
            stats = client.statistics()
        assert stats.rate_limited > 0
        assert (stats.rpm, stats.rpm_source) == (None, "none")

    @pytest.mark.slow
    async def test_bare_429s_adapt_and_every_call_ends_well(self, make_sim: Any) -> None:
        """A server enforcing 3000 RPM over 1 s windows with no hints at all: the rate
        adapts, every call gets its reply, and refusals stay a small share (~6 s)."""
        config_ = {"rpm": 3000, "window_s": 1.0, "rate_limit_headers": False, "latency_ms": 20}
        async with (
            make_sim(**config_) as sim,
            ModelClient(config(sim, max_concurrency=16)) as client,
        ):
            replies = await asyncio.gather(*(client.complete(user(f"q{i}")) for i in range(250)))
            stats = client.statistics()
        assert len(replies) == 250
        assert stats.rpm_source == "adaptive (429s)" and stats.rpm is not None
        seen = sim.statistics()
        assert seen.served == 250
        assert seen.rate_limited <= 0.1 * seen.requests, seen
