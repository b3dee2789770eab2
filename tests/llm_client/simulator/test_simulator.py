"""The Simulator: its routes, the stages of a chat request, lifetimes and statistics."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import aiohttp
import pytest

from llm_client import ModelClient, ModelSettings, Simulator, SimulatorConfig

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
