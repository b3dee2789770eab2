"""The model router: skynet.llm to the stage's model over real HTTP, metered per example."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from evaluator._models import Meter, ModelRouter, Models
from llm_client import LLMError, ModelConfig, Simulator, SimulatorConfig, TokenUsage


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimulatorConfig()) as simulator:
        yield simulator


def _config(sim: Simulator, model: str, *, priced: bool = True) -> ModelConfig:
    prices: dict[str, Any] = {"price_input": 1.0, "price_output": 2.0} if priced else {}
    return ModelConfig(model=model, base_url=sim.base_url, api_key_env=None, **prices)


class TestModels:
    def test_judge_is_the_metric_model_else_the_reflection_model(self) -> None:
        """A metric's llm() goes to the metric model, or to the reflection model without one."""
        metric, reflection = ModelConfig(model="m"), ModelConfig(model="r")
        assert Models(metric=metric, reflection=reflection).judge is metric
        assert Models(reflection=reflection).judge is reflection
        assert Models().judge is None


class TestModelRouter:
    async def test_routes_by_stage_and_meters_by_token(self, sim: Simulator) -> None:
        """A run call goes to the program model and a score call to the judge; each
        reply's usage lands in the meter of the token that made it, and in the totals."""
        models = Models(program=_config(sim, "sim-program"), metric=_config(sim, "sim-judge"))
        async with ModelRouter(models) as router:
            assert router.has_program_model and router.has_judge_model
            await router.handler(1, "run", "Answer.", "question one", {})
            await router.handler(1, "run", "Answer.", "question one, again", {})
            await router.handler(2, "score", "Judge.", None, {})
            stats = router.statistics()
            program, judge = router.program_meters[1], router.judge_meters[2]
        assert (program.calls, judge.calls) == (2, 1)
        assert program.tokens.input_tokens > judge.tokens.input_tokens > 0
        assert 2 not in router.program_meters and 1 not in router.judge_meters
        assert (stats.program_calls, stats.judge_calls, stats.failed_calls) == (2, 1, 0)
        assert stats.program_cost_usd is not None and stats.program_cost_usd > 0

    async def test_one_client_per_distinct_configuration(self, sim: Simulator) -> None:
        """The same configuration for program and judge shares one client (one budget)."""
        same = _config(sim, "sim-shared")
        async with ModelRouter(Models(program=same, metric=same)) as router:
            assert router._program is router._judge
        async with ModelRouter(Models(program=same, metric=_config(sim, "other"))) as router:
            assert router._program is not router._judge

    async def test_unpriced_model_leaves_cost_unmeasured_with_a_note(self, sim: Simulator) -> None:
        """A model without a known price makes the meter's cost None, with the reason."""
        models = Models(metric=_config(sim, "sim-unpriced", priced=False))
        async with ModelRouter(models) as router:
            await router.handler(7, "score", "Judge.", "x", {})
            usage = router.judge_meters[7].usage()
        assert usage.cost_usd is None and usage.llm_calls == 1
        assert any(note.startswith("cost not measured") for note in usage.notes)

    async def test_no_model_for_the_stage_names_the_option(self, sim: Simulator) -> None:
        """A call from a stage without a model fails at once, saying which option to set."""
        async with ModelRouter(Models(metric=_config(sim, "sim-judge"))) as router:
            assert not router.has_program_model
            with pytest.raises(RuntimeError, match="--model"):
                await router.handler(1, "run", "Answer.", None, {})
        async with ModelRouter(Models()) as router:
            with pytest.raises(RuntimeError, match="--metric-model or --reflection-model"):
                await router.handler(1, "score", "Judge.", None, {})

    async def test_a_failed_call_is_counted_and_raised(self) -> None:
        """A call given up raises its LLMError and counts as failed, with its 429s, in the
        example's meter and the totals; no cost is added."""
        async with Simulator(SimulatorConfig(insufficient_quota_rate=1.0)) as sim:
            router = ModelRouter(Models(metric=_config(sim, "sim-judge")))
            async with router:
                with pytest.raises(LLMError) as info:
                    await router.handler(3, "score", "Judge.", "x", {})
                stats = router.statistics()
                meter = router.judge_meters[3]
        assert info.value.status == 429
        assert stats.failed_calls == 1 and stats.judge_calls == 0
        assert meter.calls == 0 and meter.cost_usd == 0.0
        assert meter.rate_limited == stats.rate_limited == info.value.rate_limited

    async def test_no_model_opens_no_client(self) -> None:
        """A router without models opens nothing and reports zeros."""
        async with ModelRouter(None) as router:
            assert router.statistics().program_calls == 0
            assert router._program is None and router._judge is None


class TestMeter:
    def test_observation_and_usage_carry_the_sums(self) -> None:
        """A meter's observation (program) and usage (judge) carry what it summed."""
        meter = Meter()
        meter.tokens = TokenUsage(input_tokens=10, output_tokens=5)
        meter.calls, meter.queued_ms = 2, 3.0
        obs = meter.observation(12.5)
        assert (obs.duration_ms, obs.input_tokens, obs.llm_calls, obs.queued_ms) == (
            12.5,
            10,
            2,
            3.0,
        )
        assert obs.own_ms == 9.5
        usage = meter.usage()
        assert (usage.llm_calls, usage.output_tokens, usage.cost_usd) == (2, 5, 0.0)

    def test_merge_sums_every_figure_and_keeps_unmeasured_cost(self) -> None:
        """Merging adds every count; one unmeasured cost makes the total unmeasured (never
        a partial sum), and a note repeated by two meters is kept once."""
        total, priced, unpriced = Meter(), Meter(), Meter()
        priced.tokens = TokenUsage(input_tokens=7, cached_tokens=2)
        priced.calls, priced.cost_usd = 1, 0.5
        unpriced.tokens = TokenUsage(output_tokens=4, reasoning_tokens=3)
        unpriced.calls = 2
        unpriced.retries, unpriced.rate_limited, unpriced.queued_ms = 1, 1, 2.5
        for meter in (priced, unpriced):
            meter.notes.append("cost not measured: routed SDK")
        unpriced.unmeasured("no price")
        total.merge(priced)
        assert total.cost_usd == 0.5
        total.merge(unpriced)
        usage = total.usage()
        assert (usage.llm_calls, usage.input_tokens, usage.output_tokens) == (3, 7, 4)
        assert (usage.cached_tokens, usage.reasoning_tokens, usage.queued_ms) == (2, 3, 2.5)
        assert (usage.retries, usage.rate_limited, usage.cost_usd) == (1, 1, None)
        assert usage.notes == ("cost not measured: routed SDK", "cost not measured: no price")
