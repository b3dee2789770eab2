"""The gateway: which client serves a routed call, pacing, --simulator, failures, keys,
cancellation (real openai package, real HTTP to the simulator)."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest

from evaluator import Evaluator, Models
from llm_client import ModelConfig, ModelSettings, Simulator, SimulatorConfig
from llm_client._governor import governor_for
from tests._helpers import until, write

from .conftest import ACCEPT, examples

ONE_CALL = """
import openai

def run(artifact, input):
    client = openai.OpenAI(
        base_url=artifact["url"], api_key=artifact.get("key", "sk-one-call-key"), max_retries=0
    )
    return client.chat.completions.create(
        model=artifact.get("model", "gpt-4o-mini"),
        messages=[{"role": "user", "content": input["q"]}],
    ).choices[0].message.content
"""

SECRET = "sk-proj-ROUTEDSECRETKEY0123456789abcdefXYZ"


class TestWhichClient:
    @pytest.mark.slow
    async def test_configured_model_paces_sdk_calls(self, tmp_path: Path) -> None:
        """An SDK call to the configured program model (same name, same base URL) goes
        through that model's governor: never over its rpm in any window (~2 s)."""
        program = write(tmp_path, "program.py", ONE_CALL)
        metric = write(tmp_path, "metric.py", ACCEPT)
        async with Simulator(SimulatorConfig()) as sim:
            model = ModelConfig(
                model="gpt-4o-mini",
                base_url=sim.base_url,
                api_key_env=None,
                rpm=1200,
                rate_margin=0.0,
            )
            async with Evaluator(
                metric,
                program,
                execution="inline",
                program_execution="thread",
                workers=16,
                models=Models(program=model),
                timeout=60,
            ) as ev:
                results = await ev.evaluate_many({"url": sim.base_url}, examples(50))
                budgets = ev.statistics().model_budgets
        assert all(r.ok for r in results)
        for window in (0.25, 0.5, 1.0):
            assert sim.peak_requests(window) <= 1200 * window / 60 + 2 + 1, window
        assert [(b.model, b.roles, b.rpm, b.source) for b in budgets] == [
            ("gpt-4o-mini", ("program",), 1200, "configured")
        ]

    async def test_one_client_per_model_and_key(self, tmp_path: Path) -> None:
        """Models nobody configured get a client each, keyed by base URL, key and model;
        the budgets say so (none configured, none learned yet)."""
        program = write(tmp_path, "program.py", ONE_CALL)
        metric = write(tmp_path, "metric.py", ACCEPT)
        async with (
            Simulator(SimulatorConfig()) as sim,
            Evaluator(
                metric, program, execution="inline", program_execution="thread", timeout=60
            ) as ev,
        ):
            for model, key in (("m-a", "sk-a"), ("m-b", "sk-a"), ("m-a", "sk-b"), ("m-a", "sk-a")):
                artifact = {"url": sim.base_url, "model": model, "key": key}
                (result,) = await ev.evaluate_many(artifact, examples(1))
                assert result.ok, result
            budgets = ev.statistics().model_budgets
        assert sorted(b.model for b in budgets) == ["m-a", "m-a", "m-b"]
        assert {(b.roles, b.rpm, b.source) for b in budgets} == {(("sdk",), None, "none")}


class TestSimulatorServesSDKCalls:
    async def test_any_base_url_is_served_by_the_simulator(self, tmp_path: Path) -> None:
        """With sdk_base_url (--simulator), an SDK pointed at api.openai.com is served by
        the simulator: the request's model becomes the stage's simulated model, and no
        connection leaves the machine (the test guard refuses any)."""
        program = write(tmp_path, "program.py", ONE_CALL)
        metric = write(tmp_path, "metric.py", ACCEPT)
        settings = {"sim-model": ModelSettings()}
        async with Simulator(SimulatorConfig(models=settings)) as sim:
            model = ModelConfig(
                model="sim-model",
                base_url=sim.base_url,
                api_key_env=None,
                price_input=1.0,
                price_output=1.0,
            )
            models = Models(program=model, sdk_base_url=sim.base_url)
            async with Evaluator(
                metric,
                program,
                execution="inline",
                program_execution="thread",
                models=models,
                timeout=60,
            ) as ev:
                artifact = {"url": "https://api.openai.com/v1", "key": SECRET}
                results = await ev.evaluate_many(artifact, examples(3))
        assert [r.output for r in results] == [f"Echo: question {i}" for i in range(3)]
        assert sim.statistics().served == 3
        assert all(r.observation.cost_usd and r.observation.cost_usd > 0 for r in results)


class TestFailures:
    @pytest.mark.process
    async def test_a_401_is_the_programs_error_without_the_key(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A provider that refuses the SDK's key (and echoes it): the example's error is
        the SDK's own AuthenticationError, and no result, error or log line holds the key."""
        caplog.set_level(logging.DEBUG)
        program = write(tmp_path, "program.py", ONE_CALL)
        metric = write(tmp_path, "metric.py", ACCEPT)
        async with (
            Simulator(SimulatorConfig(api_key="sk-the-right-one")) as sim,
            Evaluator(
                metric, program, execution="inline", program_execution="process", timeout=60
            ) as ev,
        ):
            results = await ev.evaluate_many({"url": sim.base_url, "key": SECRET}, examples(2))
        assert [r.error.kind if r.error else None for r in results] == ["program_error"] * 2
        assert results[0].error is not None and "AuthenticationError" in results[0].error.message
        text = repr(results) + "\n".join(r.getMessage() for r in caplog.records)
        assert SECRET not in text and SECRET[8:28] not in text

    async def test_retries_and_429s_reach_the_observation(self, tmp_path: Path) -> None:
        """429s and 503s the engine retried for an SDK call are counted in the example's
        observation, and the call succeeds."""
        program = write(tmp_path, "program.py", ONE_CALL)
        metric = write(tmp_path, "metric.py", ACCEPT)
        config = SimulatorConfig(rate_limit_rate=0.3, error_503_rate=0.2, seed=11)
        async with (
            Simulator(config) as sim,
            Evaluator(
                metric, program, execution="inline", program_execution="thread", timeout=60
            ) as ev,
        ):
            results = await ev.evaluate_many({"url": sim.base_url}, examples(12))
        seen = sim.statistics()
        assert all(r.ok for r in results)
        assert sum(r.observation.retries for r in results) == seen.requests - seen.served > 0
        assert sum(r.observation.rate_limited for r in results) == seen.faults["rate_limit"]


class TestCancellation:
    async def test_cancelled_mid_call_releases_everything(self, tmp_path: Path) -> None:
        """A run cancelled while its SDK calls wait on a slow model: the governor holds no
        reservation afterwards and no thread of the run is left."""
        program = write(tmp_path, "program.py", ONE_CALL)
        metric = write(tmp_path, "metric.py", ACCEPT)
        async with Simulator(SimulatorConfig(latency_ms=30_000)) as sim:
            ev = Evaluator(
                metric,
                program,
                execution="inline",
                program_execution="thread",
                workers=4,
                timeout=60,
            )
            async with ev:
                task = asyncio.create_task(ev.evaluate_many({"url": sim.base_url}, examples(4)))
                await until(lambda: sim.statistics().in_flight == 4)
                running = [
                    t for t in threading.enumerate() if t.name.startswith("skynet-thread-run")
                ]
                assert len(running) == 4  # each blocked in its SDK call
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            governor = governor_for(
                base_url=sim.base_url,
                api_key="sk-one-call-key",
                model="gpt-4o-mini",
                rpm=None,
                tpm=None,
                max_concurrency=64,
                margin=0.02,
            )
            stats = governor.statistics()
            assert stats.requests_sent == 4
            assert (stats.in_flight, stats.tokens_reserved, stats.waiting) == (0, 0, 0)
        left = [t for t in threading.enumerate() if t.name.startswith("skynet-thread-run")]
        assert left == []
