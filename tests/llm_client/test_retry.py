"""Retries: what is retried, how long it waits, what is given up and how."""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from llm_client import (
    HTTPRequest,
    HTTPResponse,
    LLMError,
    MockTransport,
    ModelClient,
    ModelConfig,
    RetryDetails,
    TransportError,
)
from llm_client._retry import backoff, is_retryable_status, parse_duration, server_wait

from .conftest import config, user

OK = HTTPResponse(
    200,
    {},
    msgspec.json.encode(
        {
            "choices": [{"message": {"content": "ok"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    ),
)


def _error(
    status: int, code: str | None = None, headers: dict[str, str] | None = None
) -> HTTPResponse:
    body = {"error": {"message": f"status {status}", "type": "x", "code": code}}
    return HTTPResponse(status, headers or {}, msgspec.json.encode(body))


def _scripted(*steps: HTTPResponse | Exception) -> tuple[MockTransport, list[float]]:
    """A transport answering with ``steps`` in turn (the last one repeats)."""
    times: list[float] = []

    def handler(request: HTTPRequest) -> HTTPResponse:
        step = steps[min(len(times), len(steps) - 1)]
        times.append(time.monotonic())
        if isinstance(step, Exception):
            raise step
        return step

    return MockTransport(handler), times


def _client(transport: MockTransport, **kwargs: Any) -> ModelClient:
    hook: Callable[[RetryDetails], None] | None = kwargs.pop("on_retry", None)
    cfg = ModelConfig(model="m", api_key_env=None, **kwargs)
    return ModelClient(cfg, transport=transport, on_retry=hook, seed=1)


class TestParsing:
    @pytest.mark.parametrize(
        ("text", "seconds"),
        [("1s", 1.0), ("6m0s", 360.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("0.5", 0.5)],
    )
    def test_durations(self, text: str, seconds: float) -> None:
        """x-ratelimit-reset-* values in every form OpenAI writes parse to seconds."""
        assert parse_duration(text) == pytest.approx(seconds)

    @pytest.mark.parametrize("text", ["", "soon", "1x", "-1s", "s"])
    def test_bad_durations(self, text: str) -> None:
        """Unparseable durations give None rather than a guess."""
        assert parse_duration(text) is None

    def test_server_wait_order(self) -> None:
        """retry-after-ms beats retry-after, which beats x-ratelimit-reset-*."""
        assert server_wait({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
        assert server_wait({"retry-after": "2", "x-ratelimit-reset-requests": "9s"}) == 2.0
        assert server_wait({}) is None

    def test_retry_after_http_date(self) -> None:
        """retry-after as an HTTP date is the time until that date."""
        now = 1_700_000_000.0
        date = email.utils.formatdate(now + 30, usegmt=True)
        assert server_wait({"retry-after": date}, now=now) == pytest.approx(30.0)

    def test_reset_header_of_the_exhausted_limit(self) -> None:
        """Of the two reset headers, the one whose remaining is 0 is used."""
        headers = {
            "x-ratelimit-reset-requests": "20ms",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-tokens": "6m0s",
            "x-ratelimit-remaining-tokens": "5000",
        }
        assert server_wait(headers) == pytest.approx(0.02)

    def test_status_classes(self) -> None:
        """408, 409, 429 and 5xx are retryable; 400/401/403/404/422 are not."""
        assert all(is_retryable_status(s) for s in (408, 409, 429, 500, 502, 503, 599))
        assert not any(is_retryable_status(s) for s in (400, 401, 403, 404, 413, 422))

    def test_backoff_full_jitter(self) -> None:
        """Backoff draws uniformly below base * 2**(attempt-1), capped."""
        rng = random.Random(0)
        draws = [backoff(3, rng, base=0.5, cap=20) for _ in range(500)]
        assert all(0 <= d <= 2.0 for d in draws) and max(draws) > 1.5
        assert all(backoff(30, rng, base=0.5, cap=3) <= 3 for _ in range(50))


class TestRetries:
    async def test_5xx_retried_then_succeeds_with_hook(self) -> None:
        """500 and 503 are retried; the hook and the counts see each retry."""
        transport, times = _scripted(_error(500), _error(503), OK)
        details: list[RetryDetails] = []
        async with _client(transport, on_retry=details.append) as client:
            reply = await client.complete(user("x"))
            stats = client.statistics()
        assert reply.text == "ok" and reply.retries == 2 and len(times) == 3
        assert [d.status for d in details] == [500, 503]
        assert [d.attempt for d in details] == [1, 2]
        assert stats.retries == 2 and stats.requests_sent == 3

    @pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
    async def test_never_retried(self, status: int) -> None:
        """These statuses fail at once with the status and the provider's message."""
        transport, times = _scripted(_error(status), OK)
        async with _client(transport) as client:
            with pytest.raises(LLMError) as info:
                await client.complete(user("x"))
        assert len(times) == 1
        assert info.value.status == status and f"status {status}" in str(info.value)
        assert info.value.attempts == 1

    async def test_insufficient_quota_not_retried(self, make_sim: Any) -> None:
        """A 429 whose code is insufficient_quota fails at once (real HTTP)."""
        async with make_sim(insufficient_quota_rate=1.0) as sim, ModelClient(config(sim)) as client:
            with pytest.raises(LLMError) as info:
                await client.complete(user("x"))
            assert client.statistics().rate_limited == 1
        assert info.value.status == 429 and info.value.code == "insufficient_quota"
        assert sim.statistics().requests == 1

    @pytest.mark.slow
    async def test_retry_after_honoured(self) -> None:
        """A 429 with retry-after: 1 (seconds) delays the next attempt by a second
        (tolerance 20 ms)."""
        transport, times = _scripted(_error(429, "rate_limit_exceeded", {"retry-after": "1"}), OK)
        async with _client(transport) as client:
            reply = await client.complete(user("x"))
        assert times[1] - times[0] >= 1.0 - 0.02
        assert reply.rate_limited == 1 and reply.retries == 1

    async def test_timeout_before_response_is_retried(self) -> None:
        """An attempt that times out before any response is retried."""
        calls = 0

        async def handler(request: HTTPRequest) -> HTTPResponse:
            nonlocal calls
            calls += 1
            if calls == 1:
                await asyncio.Event().wait()  # never answers
            return OK

        async with _client(MockTransport(handler), timeout=0.05) as client:
            reply = await client.complete(user("x"))
        assert calls == 2 and reply.retries == 1

    @pytest.mark.slow
    async def test_slow_server_times_out_then_recovers(self, make_sim: Any) -> None:
        """A reply slower than the timeout is retried over real HTTP (seeded: the first
        request is slow, later ones are not)."""
        async with (
            make_sim(slow_rate=0.5, slow_ms=5_000, seed=3) as sim,
            ModelClient(config(sim, timeout=0.2)) as client,
        ):
            replies = await asyncio.gather(*(client.complete(user(f"{i}")) for i in range(6)))
        assert sum(r.retries for r in replies) == sim.statistics().faults["slow"] > 0

    async def test_malformed_body_retried_once(self) -> None:
        """A malformed success body is retried once, then given up."""
        bad = HTTPResponse(200, {}, b'{"choices": [')
        transport, times = _scripted(bad)
        async with _client(transport) as client:
            with pytest.raises(LLMError, match="malformed"):
                await client.complete(user("x"))
        assert len(times) == 2

    async def test_dropped_connections_retried_until_max(self, make_sim: Any) -> None:
        """Dropped connections are retried up to max_retries, then an LLMError (real HTTP)."""
        async with (
            make_sim(drop_rate=1.0) as sim,
            ModelClient(config(sim, max_retries=2)) as client,
        ):
            with pytest.raises(LLMError, match="gave up after 3 attempts") as info:
                await client.complete(user("x"))
        assert info.value.status is None and info.value.attempts == 3
        assert sim.statistics().requests == 3

    async def test_connect_error_is_retried(self) -> None:
        """A connect error is retried like any transient failure."""
        transport, times = _scripted(
            TransportError("connect", "refused", response_started=False), OK
        )
        async with _client(transport) as client:
            reply = await client.complete(user("x"))
        assert reply.retries == 1 and len(times) == 2

    async def test_deadline_bounds_the_whole_call(self) -> None:
        """A call past its deadline, retries included, fails with an LLMError saying so
        (tolerance: 0.3 s deadline, must end within 1 s)."""
        transport, times = _scripted(_error(503, headers={"retry-after-ms": "100"}))
        started = time.monotonic()
        async with _client(transport, deadline=0.3, max_retries=50) as client:
            with pytest.raises(LLMError, match=r"deadline of 0\.3 s") as info:
                await client.complete(user("x"))
        assert time.monotonic() - started < 1.0
        assert info.value.status == 503 and len(times) >= 2

    async def test_storm_against_simulator(self, make_sim: Any) -> None:
        """Under 20% 503s and 10% drops every call still gets its reply (real HTTP)."""
        async with make_sim(error_503_rate=0.2, drop_rate=0.1, seed=5) as sim:
            cfg = config(sim, max_retries=10)
            async with ModelClient(cfg) as client:
                replies = await asyncio.gather(*(client.complete(user(f"{i}")) for i in range(60)))
                stats = client.statistics()
        assert [r.text for r in replies] == [f"Echo: {i}" for i in range(60)]
        faults = sim.statistics().faults
        assert stats.retries == faults["error_503"] + faults["drop"] > 0
