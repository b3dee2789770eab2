"""ModelClient against the simulator over real HTTP, and with a mock transport."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from llm_client import (
    ClientClosedError,
    Completion,
    HTTPRequest,
    HTTPResponse,
    LLMError,
    MockTransport,
    ModelClient,
    ModelConfig,
    ModelSettings,
    Simulator,
)
from llm_client._wire import estimate_tokens
from tests._helpers import until

from .conftest import config, judge, user


class TestComplete:
    async def test_reply_usage_and_cost(self, make_sim: Any) -> None:
        """A reply carries the simulator's text, its usage, and the cost at gpt-4o-mini's
        genai-prices price (cached and reasoning tokens counted)."""
        settings = {"gpt-4o-mini": ModelSettings(reasoning_tokens=7)}
        async with (
            make_sim(models=settings) as sim,
            ModelClient(config(sim, "gpt-4o-mini")) as client,
        ):
            first = await client.complete(judge("4", "4"))
            second = await client.complete(judge("4", "5"))
        assert first.text.startswith("PASS. ") and second.text.startswith("FAIL. ")
        assert first.input_tokens == estimate_tokens(judge("4", "4"))
        assert first.reasoning_tokens == 7
        assert first.output_tokens == (len(first.text) + 3) // 4 + 7
        assert first.cached_tokens == 0
        system = judge("4", "5")[0]["content"]
        assert second.cached_tokens == 4 + (len(system) + 3) // 4
        from genai_prices import Usage, calc_price

        expected = calc_price(
            Usage(
                input_tokens=second.input_tokens,
                cache_read_tokens=second.cached_tokens,
                output_tokens=second.output_tokens,
            ),
            "gpt-4o-mini",
            provider_id="openai",
        ).total_price
        assert second.cost_usd == pytest.approx(float(expected), rel=1e-9)
        assert second.cost_usd is not None and second.cost_usd > 0
        assert first.retries == 0 and first.rate_limited == 0
        assert isinstance(first, Completion)

    async def test_unknown_price_leaves_cost_unmeasured(self, sim: Simulator) -> None:
        """A model with no known price gets cost_usd None and a note naming the way out."""
        async with ModelClient(config(sim, "judge-unpriced-xyz")) as client:
            reply = await client.complete(user("hello"))
        assert reply.cost_usd is None
        assert reply.cost_note is not None
        assert "judge-unpriced-xyz" in reply.cost_note and "price_input" in reply.cost_note

    async def test_price_overrides(self, sim: Simulator) -> None:
        """Overrides in USD per million tokens price any model, cached input apart."""
        cfg = config(sim, "local-judge", price_input=2.0, price_output=8.0, price_cached_input=1.0)
        messages = [{"role": "system", "content": "s" * 400}, *user("hi")]
        async with ModelClient(cfg) as client:
            await client.complete(messages)
            reply = await client.complete(messages)
        assert reply.cached_tokens > 0
        fresh = reply.input_tokens - reply.cached_tokens
        expected = (fresh * 2.0 + reply.cached_tokens * 1.0 + reply.output_tokens * 8.0) / 1e6
        assert reply.cost_usd == pytest.approx(expected)
        assert reply.cost_note is None

    async def test_options_reach_the_server(self, sim: Simulator) -> None:
        """max_tokens cuts the reply (finish reason "length"); config defaults apply."""
        async with ModelClient(config(sim, max_tokens=2)) as client:
            reply = await client.complete(user("a long question " * 10))
            longer = await client.complete(user("a long question " * 10), max_tokens=50)
        assert reply.finish_reason == "length" and len(reply.text) == 8
        assert longer.finish_reason == "stop" and len(longer.text) > 8

    async def test_unknown_option_is_a_type_error(self, sim: Simulator) -> None:
        """An option the request does not know is refused before anything is sent."""
        async with ModelClient(config(sim)) as client:
            with pytest.raises(TypeError, match="'temprature'"):
                await client.complete(user("x"), temprature=0.5)
            with pytest.raises(TypeError, match="messages"):
                await client.complete([])
        assert sim.statistics().requests == 0

    async def test_timings(self, make_sim: Any) -> None:
        """latency_ms covers the server's latency; queued_ms the wait for a busy slot
        (tolerance: 20 ms below the 60 ms simulated latency)."""
        async with (
            make_sim(latency_ms=60) as sim,
            ModelClient(config(sim, max_concurrency=1)) as client,
        ):
            a, b = await asyncio.gather(client.complete(user("a")), client.complete(user("b")))
        assert a.latency_ms >= 40 and b.latency_ms >= 40
        assert max(a.queued_ms, b.queued_ms) >= 40


class TestLifetime:
    async def test_reopen_after_close_is_refused(self, sim: Simulator) -> None:
        """A closed client refuses calls and refuses to reopen."""
        client = ModelClient(config(sim))
        with pytest.raises(ClientClosedError, match="async with"):
            await client.complete(user("x"))
        async with client:
            await client.complete(user("x"))
        with pytest.raises(ClientClosedError, match="closed"):
            await client.complete(user("x"))
        with pytest.raises(ClientClosedError, match="cannot be reopened"):
            async with client:
                pass

    async def test_statistics_is_a_frozen_snapshot(self, sim: Simulator) -> None:
        """statistics() returns a frozen struct counting requests sent."""
        async with ModelClient(config(sim)) as client:
            await client.complete(user("x"))
            stats = client.statistics()
        assert stats.requests_sent == 1 and stats.in_flight == 0 and stats.waiting == 0
        with pytest.raises(AttributeError):
            stats.in_flight = 3  # type: ignore[misc]

    async def test_cancellation_mid_request_releases_reservation_and_connection(
        self, sim: Simulator
    ) -> None:
        """Cancelling a call in flight frees its slot, its token reservation and its pooled
        connection: with one connection allowed, the next call still goes through."""
        cfg = config(sim, max_concurrency=1, tpm=1_000_000, timeout=30)
        async with ModelClient(cfg) as client:
            task = asyncio.create_task(
                client.complete(user("slow"), extra_body={"sim_latency_ms": 20_000})
            )
            await until(lambda: sim.statistics().in_flight >= 1)
            assert client.statistics().tokens_reserved > 0
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            stats = client.statistics()
            assert (stats.in_flight, stats.tokens_reserved, stats.waiting) == (0, 0, 0)
            reply = await asyncio.wait_for(client.complete(user("next")), 5)
        assert reply.text == "Echo: next"

    async def test_key_never_in_errors(
        self, make_sim: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A provider that echoes a wrong key back yields an LLMError without the key."""
        secret = "sk-proj-THISISASECRETKEY0123456789abcdef"
        monkeypatch.setenv("SKYNET_SIM_KEY", secret)
        async with make_sim(api_key="the-right-key") as sim:
            cfg = config(sim, api_key_env="SKYNET_SIM_KEY")
            async with ModelClient(cfg) as client:
                with pytest.raises(LLMError) as info:
                    await client.complete(user("x"))
        err = info.value
        assert err.status == 401 and err.code == "invalid_api_key"
        assert "Incorrect API key" in str(err)
        for text in (str(err), repr(err), err.message, repr(err.args)):
            assert secret not in text and secret[8:24] not in text
        assert err.__cause__ is None
        assert sim.statistics().requests == 1  # 401 is not retried


class TestMockTransport:
    async def test_no_sockets_needed(self) -> None:
        """A MockTransport sees the JSON body and the bearer header; nothing is opened."""
        seen: list[HTTPRequest] = []

        def handler(request: HTTPRequest) -> HTTPResponse:
            seen.append(request)
            body = {"choices": [{"message": {"content": "hi"}}], "model": "m-2024"}
            return HTTPResponse(200, {}, msgspec.json.encode(body))

        transport = MockTransport(handler)
        cfg = ModelConfig(model="m", base_url="https://example.invalid/v1", api_key_env=None)
        async with ModelClient(cfg, transport=transport) as client:
            reply = await client.complete(user("q"), temperature=0.0, seed=3)
        assert transport.closed
        body = msgspec.json.decode(seen[0].body)
        assert body == {"model": "m", "messages": user("q"), "temperature": 0.0, "seed": 3}
        assert seen[0].url == "https://example.invalid/v1/chat/completions"
        assert "Authorization" not in seen[0].headers
        assert reply.text == "hi" and reply.model == "m-2024"
        assert reply.cost_usd is None and reply.cost_note is not None
        assert "usage" in reply.cost_note

    async def test_config_defaults_are_sent_and_a_calls_own_option_wins(self) -> None:
        """A config's max_tokens, temperature and reasoning_effort go with every call; an
        option given to the call replaces the config's value for that call only."""
        bodies: list[dict[str, Any]] = []

        def handler(request: HTTPRequest) -> HTTPResponse:
            bodies.append(msgspec.json.decode(request.body))
            body = {"choices": [{"message": {"content": "hi"}}], "model": "m"}
            return HTTPResponse(200, {}, msgspec.json.encode(body))

        cfg = ModelConfig(
            model="m",
            base_url="https://example.invalid/v1",
            api_key_env=None,
            max_tokens=32,
            temperature=0.5,
            reasoning_effort="low",
        )
        async with ModelClient(cfg, transport=MockTransport(handler)) as client:
            await client.complete(user("q"))
            await client.complete(user("q"), reasoning_effort="high", seed=1)
        plain, with_options = bodies
        assert plain["reasoning_effort"] == "low"
        assert (plain["max_tokens"], plain["temperature"]) == (32, 0.5)
        assert with_options["reasoning_effort"] == "high" and with_options["seed"] == 1
        assert (with_options["max_tokens"], with_options["temperature"]) == (32, 0.5)
