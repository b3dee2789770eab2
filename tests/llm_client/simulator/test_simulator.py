"""The Simulator: its routes, the stages of a chat request, lifetimes and statistics."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from typing import Any

import aiohttp
import pytest

from llm_client import ModelClient, ModelConfigError, ModelSettings, Simulator, SimulatorConfig

from ..conftest import config, judge, user
from .conftest import chat_request, post, raw, read_reply


class TestRoutes:
    async def test_models_and_unknown_model(self, make_sim: Any) -> None:
        """GET /v1/models lists the served models; another model name gets 404."""
        async with (
            make_sim(models={"a": ModelSettings(), "b": ModelSettings()}) as sim,
            aiohttp.ClientSession() as session,
        ):
            async with session.get(sim.base_url + "/models") as resp:
                listed = [m["id"] for m in (await resp.json())["data"]]
            status, _, payload = await post(session, sim, {"model": "c", "messages": user("x")})
        assert listed == ["a", "b"]
        assert status == 404 and payload["error"]["code"] == "model_not_found"

    async def test_bad_body_is_400(self, sim: Simulator) -> None:
        """A body that is not a chat request gets 400 and counts as a client error."""
        async with aiohttp.ClientSession() as session:
            status, _, _ = await post(session, sim, {"nope": 1})
        assert status == 400 and sim.statistics().client_errors == 1


class TestLifetime:
    def test_running_in_thread(self) -> None:
        """The sync form serves from a background thread until the block ends."""
        with Simulator(SimulatorConfig()).running_in_thread() as sim:
            request = urllib.request.Request(
                sim.base_url + "/chat/completions",
                data=json.dumps({"model": "m", "messages": user("hey")}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as resp:
                payload = json.loads(resp.read())
            with urllib.request.urlopen(
                sim.base_url.removesuffix("/v1") + "/sim/statistics?window=1", timeout=10
            ) as resp:
                stats = json.loads(resp.read())
        assert payload["choices"][0]["message"]["content"] == "Echo: hey"
        assert stats["served"] == 1 and stats["peak_requests"] == 1
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(sim.base_url + "/models", timeout=2)

    async def test_runs_once(self, sim: Simulator) -> None:
        """A simulator that ran cannot be started again."""
        with pytest.raises(RuntimeError, match="runs once"):
            async with sim:
                pass


class TestChat:
    async def test_per_model_latency_and_noise(self, make_sim: Any) -> None:
        """Two served models answer with their own latency and their own noise
        (tolerance: the 80 ms model must take at least 60 ms)."""
        models = {
            "fast": ModelSettings(latency_ms=0),
            "slow": ModelSettings(latency_ms=80, noise=1.0),
        }
        async with (
            make_sim(models=models) as sim,
            ModelClient(config(sim, "fast")) as fast,
            ModelClient(config(sim, "slow")) as slow,
        ):
            a = await fast.complete(judge("x", "x"))
            b = await slow.complete(judge("x", "x"))
        assert a.text.startswith("PASS") and b.text.startswith("FAIL")
        assert b.latency_ms >= 60 > a.latency_ms

    async def test_api_key_required(self, make_sim: Any) -> None:
        """With api_key set, a request without the right Bearer token gets 401 and
        one with it gets 200."""
        async with make_sim(api_key="sk-right") as sim:
            reader, writer = await raw(sim, chat_request("x"))
            try:
                bad, _, _ = await read_reply(reader)
                writer.write(chat_request("x", extra=b"Authorization: Bearer sk-right\r\n"))
                good, _, _ = await read_reply(reader)
            finally:
                writer.close()
        assert (bad, good) == (401, 200)


class TestSDKShapes:
    """The shapes the official openai client asks for, read back by that client."""

    async def test_streamed_chat_with_usage(self, sim: Simulator) -> None:
        """A streamed chat completion reaches the openai client whole, with the usage
        chunk it asked for, and counts as served and streamed."""
        import openai

        async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="sk-test") as client:
            stream = await client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "stream these words to me please"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            text, usage = "", None
            async for chunk in stream:
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                usage = chunk.usage or usage
        stats = sim.statistics()
        assert text == "Echo: stream these words to me please"
        assert usage is not None and usage.prompt_tokens == stats.prompt_tokens
        assert usage.completion_tokens == stats.completion_tokens
        assert (stats.served, stats.streamed) == (1, 1)

    async def test_responses_api_plain_and_streamed(self, sim: Simulator) -> None:
        """POST /v1/responses answers a Responses object and, streamed, events ending in
        response.completed; the openai client reads text and usage from both."""
        import openai

        async with openai.AsyncOpenAI(base_url=sim.base_url, api_key="sk-test") as client:
            plain = await client.responses.create(model="m", input="hi", instructions="brief")
            stream = await client.responses.create(
                model="m",
                input=[{"role": "user", "content": [{"type": "input_text", "text": "yo"}]}],
                stream=True,
            )
            completed = [e async for e in stream if e.type == "response.completed"]
        assert plain.output_text == "Echo: hi"
        assert plain.usage is not None and plain.usage.input_tokens == 4 + 2 + 4 + 1 + 3
        assert len(completed) == 1 and completed[0].response.output_text == "Echo: yo"
        assert completed[0].response.usage is not None
        assert sim.statistics().streamed == 1

    async def test_flip_rate_makes_a_judge_disagree_with_itself_repeatably(
        self, make_sim: Any
    ) -> None:
        """With flip_rate 0.5 the same judge prompt gets both verdicts; a second simulator
        with the same seed, asked in the same order, gives the same sequence."""
        sequences = []
        for _ in range(2):
            async with (
                make_sim(seed=3, models={"j": ModelSettings(flip_rate=0.5)}) as sim,
                ModelClient(config(sim, "j")) as client,
            ):
                sequences.append(
                    [(await client.complete(judge("a", "a"))).text[:4] for _ in range(30)]
                )
        assert sequences[0] == sequences[1]
        assert {"PASS", "FAIL"} == set(sequences[0])


class TestRateLimitHeaders:
    async def test_headers_switched_off_leave_a_bare_429(self, make_sim: Any) -> None:
        """With rate_limit_headers off, replies carry no x-ratelimit-* and a 429 no
        retry-after: the server gives no hint at all."""
        async with (
            make_sim(rpm=60, window_s=1.0, rate_limit_headers=False) as sim,
            aiohttp.ClientSession() as session,
        ):
            body = {"model": "m", "messages": user("x")}
            first = await post(session, sim, body)
            second = await post(session, sim, body)
        assert (first[0], second[0]) == (200, 429)
        for _, headers, _ in (first, second):
            assert not [h for h in headers if h.lower().startswith(("x-ratelimit", "retry-after"))]

    async def test_headers_on_every_reply_while_limited(self, make_sim: Any) -> None:
        """With a limit and the headers on (the default), a 200 carries the per-minute
        limit and what remains of the window."""
        async with make_sim(rpm=120, window_s=1.0) as sim, aiohttp.ClientSession() as session:
            status, headers, _ = await post(session, sim, {"model": "m", "messages": user("x")})
        assert status == 200
        assert headers["x-ratelimit-limit-requests"] == "120"
        assert headers["x-ratelimit-remaining-requests"] == "1"


class TestCapacity:
    async def test_past_capacity_replies_slow_down(self, make_sim: Any) -> None:
        """capacity=1, 200 ms: three requests at once are answered, the later ones after
        two and three times the latency (in flight over capacity; a lower bound only)."""
        async with (
            make_sim(latency_ms=200, capacity=1) as sim,
            aiohttp.ClientSession() as session,
        ):
            body = {"model": "m", "messages": user("x")}

            async def timed() -> tuple[int, float]:
                started = time.perf_counter()
                status, _, _ = await post(session, sim, body)
                return status, time.perf_counter() - started

            replies = await asyncio.gather(*(timed() for _ in range(3)))
        assert [status for status, _ in replies] == [200, 200, 200]
        assert max(elapsed for _, elapsed in replies) >= 0.6 - 0.01
        assert sim.statistics().rate_limited == 0

    async def test_past_capacity_a_429_when_asked(self, make_sim: Any) -> None:
        """over_capacity="429": a request past the capacity is refused at once, with a
        retry-after-ms hint; the one within it is served."""
        async with (
            make_sim(latency_ms=1000, capacity=1, over_capacity="429") as sim,
            aiohttp.ClientSession() as session,
        ):
            body = {"model": "m", "messages": user("x")}
            replies = await asyncio.gather(*(post(session, sim, body) for _ in range(3)))
        statuses = sorted(status for status, _, _ in replies)
        assert statuses == [200, 429, 429]
        refused = [(h, p) for status, h, p in replies if status == 429]
        assert all(h["retry-after-ms"] == "1000" for h, _ in refused)
        assert all(p["error"]["code"] == "server_overloaded" for _, p in refused)
        assert sim.statistics().rate_limited == 2

    @pytest.mark.parametrize(
        ("field", "value", "message"),
        [
            ("capacity", 0, "`capacity` must be a whole number of requests, 1 or more, got 0"),
            ("capacity", 2.5, "`capacity` must be a whole number of requests, 1 or more"),
            ("over_capacity", "drop", "`over_capacity` must be 'slow' or '429', got 'drop'"),
        ],
    )
    def test_bad_capacity_is_refused(self, field: str, value: Any, message: str) -> None:
        """A capacity that is not a positive count, or an unknown over_capacity, is a
        ModelConfigError naming the field."""
        with pytest.raises(ModelConfigError, match=message.replace("(", r"\(")) as caught:
            SimulatorConfig(**{field: value})
        assert caught.value.field == field
