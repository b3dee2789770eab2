"""The simulator's rpm/tpm window: the 429s and headers a client sees, and the window itself."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from llm_client._simulator._limits import RateLimits, reset_text

from ..conftest import user
from .conftest import post


class TestLimits:
    async def test_rpm_window_enforced_with_headers(self, make_sim: Any) -> None:
        """Past rpm*W/60 requests in a window the server answers 429 with retry-after,
        retry-after-ms and x-ratelimit-* headers, and counts what it accepted."""
        async with make_sim(rpm=600, window_s=1.0) as sim, aiohttp.ClientSession() as session:
            body = {"model": "m", "messages": user("x")}
            results = await asyncio.gather(*(post(session, sim, body) for _ in range(14)))
        statuses = [status for status, _, _ in results]
        assert statuses.count(200) == 10 and statuses.count(429) == 4
        _, headers, payload = next(r for r in results if r[0] == 429)
        assert payload["error"]["code"] == "rate_limit_exceeded"
        assert int(headers["retry-after"]) >= 1
        assert 0 < int(headers["retry-after-ms"]) <= 1000
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert headers["x-ratelimit-limit-requests"] == "600"  # per minute, as OpenAI says
        stats = sim.statistics()
        assert stats.rate_limited == 4 and stats.served == 10 and stats.requests == 14
        assert sim.peak_requests(1.0) == 14
        assert sim.peak_requests(1.0, accepted_only=True) == 10

    async def test_tpm_window_enforced(self, make_sim: Any) -> None:
        """Past tpm*W/60 tokens in a window the server answers 429 (tokens)."""
        async with make_sim(tpm=6000, window_s=1.0) as sim, aiohttp.ClientSession() as session:
            body = {"model": "m", "messages": user("y" * 120)}  # 37 + 32 tokens
            results = [await post(session, sim, body) for _ in range(3)]
        assert [r[0] for r in results] == [200, 429, 429]
        assert "tokens per window" in results[1][2]["error"]["message"]


class TestRateLimits:
    def test_requests_admitted_up_to_the_window_then_refused_until_the_oldest_leaves(
        self,
    ) -> None:
        """With rpm 600 over 1 s, ten requests pass; the eleventh is told to wait until the
        first leaves the window, and passes then."""
        limits = RateLimits(rpm=600, tpm=None, window_s=1.0)
        assert all(limits.admit(10.0 + i / 100, 1) is None for i in range(10))
        refusal = limits.admit(10.5, 1)
        assert refusal is not None and refusal.wait == pytest.approx(0.5)
        assert "RPM): Limit 10, Used 10" in refusal.message
        assert limits.admit(11.0, 1) is None

    def test_refused_requests_do_not_count(self) -> None:
        """A refused request leaves the window as it was."""
        limits = RateLimits(rpm=60, tpm=None, window_s=1.0)  # one request per window
        assert limits.admit(0.0, 1) is None
        assert all(limits.admit(0.1 * i, 1) is not None for i in range(1, 10))
        assert limits.admit(1.0, 1) is None

    def test_tokens_over_the_window_and_over_the_whole_budget(self) -> None:
        """Tokens past tpm*W/60 wait for the window; a request larger than the whole
        budget is refused with no wait, since none would help."""
        limits = RateLimits(rpm=None, tpm=6000, window_s=1.0)  # 100 tokens per window
        assert limits.admit(0.0, 60) is None
        later = limits.admit(0.2, 60)
        assert later is not None and later.wait == pytest.approx(0.8)
        assert "TPM): Limit 100, Used 60, Requested 60" in later.message
        never = limits.admit(0.2, 101)
        assert never is not None and never.wait is None
        assert never.message == "Request too large: Limit 100, Requested 101."

    def test_headers_report_the_window(self) -> None:
        """The x-ratelimit-* lines give the limit per minute, what remains of the window and
        when one more fits."""
        limits = RateLimits(rpm=600, tpm=6000, window_s=1.0)
        limits.admit(0.0, 40)
        lines = dict(line.split(": ", 1) for line in limits.headers(0.25).split("\r\n") if line)
        assert lines == {
            "x-ratelimit-limit-requests": "600",
            "x-ratelimit-remaining-requests": "9",
            "x-ratelimit-reset-requests": "1ms",
            "x-ratelimit-limit-tokens": "6000",
            "x-ratelimit-remaining-tokens": "60",
            "x-ratelimit-reset-tokens": "750ms",
        }

    def test_no_limits_admit_everything(self) -> None:
        """Without rpm or tpm every request passes and no header is sent."""
        limits = RateLimits(rpm=None, tpm=None, window_s=1.0)
        assert all(limits.admit(0.0, 10**9) is None for _ in range(1000))
        assert not limits.enabled and limits.headers(0.0) == ""

    @pytest.mark.parametrize(
        ("seconds", "text"), [(0.0001, "1ms"), (0.25, "250ms"), (1.5, "1.5s"), (360, "6m0s")]
    )
    def test_reset_text(self, seconds: float, text: str) -> None:
        """Durations are written the way OpenAI writes x-ratelimit-reset-*."""
        assert reset_text(seconds) == text
