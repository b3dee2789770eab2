"""Injected faults: drawn from the seed at their rates, and what each one sends."""

from __future__ import annotations

import json
import random
from typing import Any

import aiohttp
import pytest

from llm_client import SimulatorConfig
from llm_client._simulator._faults import FaultDraw

from ..conftest import user
from .conftest import chat_request, post_status, raw, read_reply


class TestFaultDraw:
    def test_one_draw_per_request_replayed_by_the_seed(self) -> None:
        """The same seed gives the same faults at about their rates, and every request
        takes exactly one draw whatever the rates (none included), so that the jitter drawn
        from the same generator is replayed too."""
        config = SimulatorConfig(error_503_rate=0.3, drop_rate=0.1)
        a = FaultDraw(config, random.Random(5))
        b = FaultDraw(config, random.Random(5))
        faults = [a.draw() for _ in range(500)]
        assert faults == [b.draw() for _ in range(500)]
        assert 100 <= faults.count("error_503") <= 200 and 20 <= faults.count("drop") <= 80
        rng, reference = random.Random(5), random.Random(5)
        quiet = FaultDraw(SimulatorConfig(), rng)
        assert [quiet.draw() for _ in range(500)] == [None] * 500
        for _ in range(500):
            reference.random()
        assert rng.random() == reference.random()

    async def test_faults_at_seeded_rates(self, make_sim: Any) -> None:
        """Injected faults occur at about their rates, the same ones for the same seed."""
        counts = []
        for _ in range(2):
            async with (
                make_sim(error_500_rate=0.2, malformed_rate=0.1, seed=11) as sim,
                aiohttp.ClientSession() as session,
            ):
                body = {"model": "m", "messages": user("x")}
                statuses = [(await post_status(session, sim, body)) for _ in range(200)]
            counts.append(sim.statistics().faults)
            assert statuses.count(500) == counts[-1]["error_500"]
        assert counts[0] == counts[1]
        assert 20 <= counts[0]["error_500"] <= 60 and 5 <= counts[0]["malformed"] <= 35


class TestFaultReplies:
    @pytest.mark.parametrize(
        ("kind", "status", "code"),
        [
            ("insufficient_quota", 429, "insufficient_quota"),
            ("error_500", 500, None),
            ("error_503", 503, None),
            ("rate_limit", 429, "rate_limit_exceeded"),
        ],
    )
    async def test_error_faults(
        self, make_sim: Any, kind: str, status: int, code: str | None
    ) -> None:
        """Each error fault answers with its status and OpenAI-style error code; the
        injected 429 says when to come back."""
        async with make_sim(**{f"{kind}_rate": 1.0}) as sim:
            reader, writer = await raw(sim, chat_request("x"))
            try:
                got, headers, body = await read_reply(reader)
            finally:
                writer.close()
            assert sim.statistics().faults[kind] == 1 and sim.statistics().served == 0
        assert got == status and json.loads(body)["error"]["code"] == code
        if kind == "rate_limit":
            assert headers["retry-after-ms"] == "100"

    async def test_malformed_body(self, make_sim: Any) -> None:
        """A malformed fault answers 200 with a body cut in the middle of a string."""
        async with make_sim(malformed_rate=1.0) as sim:
            reader, writer = await raw(sim, chat_request("x"))
            try:
                got, _, body = await read_reply(reader)
            finally:
                writer.close()
        assert got == 200
        with pytest.raises(json.JSONDecodeError):
            json.loads(body)
