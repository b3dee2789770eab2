"""Spending budgets that are never overrun: dollars, calls and seconds, over real HTTP to
the simulator on 127.0.0.1 (``llm_client/_spend.py``, the flow's ``budget_exhausted``)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator import Budget, ConfigError, Evaluator, Models, Result
from llm_client import BudgetExhaustedError, ModelConfig, Simulator, SimulatorConfig, Spend
from tests._helpers import PROCESS, write

#: USD per million tokens: a judge call costs about $0.00006, its worst case $0.0007.
PRICE_IN, PRICE_OUT = 3.0, 3.0

JUDGE = """
from skynet import allm

async def score(input, output, expected=None):
    text = await allm("Judge this answer.", input=str(output), max_tokens=50)
    return 1.0, {"feedback": text}
"""

SYNC_JUDGE = """
from skynet import llm

def score(input, output, expected=None):
    return 1.0, {"feedback": llm("Judge this answer.", input=str(output), max_tokens=50)}
"""

#: Catches the refusal and returns a score: the example is budget_exhausted all the same.
SWALLOWS = """
from skynet import allm

async def score(input, output, expected=None):
    try:
        text = await allm("Judge this answer.", input=str(output), max_tokens=50)
    except Exception as exc:
        return 1.0, {"feedback": "swallowed " + type(exc).__name__}
    return 1.0, {"feedback": text}
"""

#: A program calling the model through the user's own openai SDK (routed to the engine).
SDK_PROGRAM = """
import openai

def run(artifact, input):
    client = openai.OpenAI(base_url=artifact, api_key="sk-program-key-0123456789", max_retries=0)
    return client.chat.completions.create(
        model="sim-sdk", messages=[{"role": "user", "content": str(input)}], max_tokens=40
    ).choices[0].message.content
"""

ACCEPT = """
def score(input, output, expected=None):
    return 1.0, {"feedback": "ok"}
"""


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimulatorConfig(latency_ms=5, jitter_ms=5)) as simulator:
        yield simulator


def _judge(sim: Simulator, *, priced: bool = True, **kw: object) -> Models:
    prices = {"price_input": PRICE_IN, "price_output": PRICE_OUT} if priced else {}
    config = ModelConfig(model="sim-judge", base_url=sim.base_url, api_key_env=None, **prices, **kw)  # type: ignore[arg-type]
    return Models(metric=config)


def _rows(n: int) -> list[dict[str, object]]:
    return [{"id": i, "input": {}, "output": f"answer {i}", "expected": None} for i in range(n)]


def _billed(sim: Simulator) -> float:
    """What the simulator served, at the model's price: the independent side of the
    books (the engine's ledger could agree with itself and still be wrong)."""
    stats = sim.statistics()
    return (stats.prompt_tokens * PRICE_IN + stats.completion_tokens * PRICE_OUT) / 1e6


def _kinds(results: list[Result]) -> dict[str | None, int]:
    counts: dict[str | None, int] = {}
    for r in results:
        kind = None if r.error is None else r.error.kind
        counts[kind] = counts.get(kind, 0) + 1
    return counts


class TestDollars:
    @pytest.mark.parametrize("usd", [0.003, 0.01])
    async def test_a_dollar_budget_running_out_mid_run_is_never_overrun(
        self, tmp_path: Path, sim: Simulator, usd: float
    ) -> None:
        """64 calls in flight and a dollar budget that runs out mid-run: what the server
        billed is at most the budget, every example has exactly one result, the ones
        not evaluated are budget_exhausted with the budget and the spend in their words."""
        metric = write(tmp_path, "judge.py", JUDGE)
        n = 400
        async with Evaluator(metric, models=_judge(sim), concurrency=64) as ev:
            results = await ev.evaluate_many(None, _rows(n), budget=Budget(usd=usd))
        kinds = _kinds(results)
        assert [r.example_id for r in results] == list(range(n))
        assert set(kinds) == {None, "budget_exhausted"}, kinds
        assert kinds[None] > 0 and kinds["budget_exhausted"] > 0
        assert _billed(sim) <= usd
        spent = sum(r.judge.cost_usd or 0.0 for r in results)
        assert spent <= usd
        assert sim.statistics().peak_in_flight > 1  # the calls were concurrent
        exhausted = next(r for r in results if r.error is not None)
        assert f"of ${usd:g}" in exhausted.feedback and "budget ran out" in exhausted.feedback

    @settings(max_examples=8, deadline=None)
    @given(usd=st.floats(0.0, 0.01), concurrency=st.integers(1, 64))
    def test_never_overrun_whatever_the_budget_and_concurrency(
        self, tmp_path_factory: pytest.TempPathFactory, usd: float, concurrency: int
    ) -> None:
        """Any dollar budget, any number of examples in flight: the server billed at most
        the budget, and every example has exactly one result."""
        metric = write(tmp_path_factory.mktemp("m"), "judge.py", JUDGE)

        async def main() -> tuple[list[Result], float]:
            async with Simulator(SimulatorConfig(latency_ms=2, jitter_ms=5)) as sim:
                models = _judge(sim)
                async with Evaluator(metric, models=models, concurrency=concurrency) as ev:
                    results = await ev.evaluate_many(None, _rows(150), budget=Budget(usd=usd))
                return results, _billed(sim)

        results, billed = asyncio.run(main())
        assert billed <= usd
        assert [r.example_id for r in results] == list(range(150))
        assert set(_kinds(results)) <= {None, "budget_exhausted"}

    async def test_the_report_shows_spent_against_the_budget(
        self, tmp_path: Path, sim: Simulator
    ) -> None:
        """``evaluate`` reports the call's budget, what was spent, and why it ran out."""
        metric = write(tmp_path, "judge.py", JUDGE)
        async with Evaluator(metric, models=_judge(sim), concurrency=16) as ev:
            report = await ev.evaluate(None, _rows(200), budget=Budget(usd=0.002))
        assert report.budget is not None and report.budget.usd == 0.002
        assert 0 < report.budget.spent_usd <= 0.002
        assert report.budget.exhausted is not None and report.budget.refused > 0
        assert report.errors.get("budget_exhausted", 0) > 0
        assert report.n == 200
        assert report.judge_cost_usd is not None
        assert report.judge_cost_usd == pytest.approx(report.budget.spent_usd)

    async def test_an_unpriced_model_with_a_dollar_budget_is_a_clear_error(
        self, tmp_path: Path, sim: Simulator
    ) -> None:
        """No price, no worst case: refused before anything runs, naming the model and
        how to price it, on the Evaluator and on a call."""
        metric = write(tmp_path, "judge.py", JUDGE)
        with pytest.raises(ConfigError, match=r"'sim-judge'.*price_input/price_output"):
            async with Evaluator(metric, models=_judge(sim, priced=False), budget=Budget(usd=1)):
                pass
        async with Evaluator(metric, models=_judge(sim, priced=False)) as ev:
            with pytest.raises(ConfigError, match="--price-input"):
                await ev.evaluate_many(None, _rows(3), budget=Budget(usd=1))
            # A calls budget needs no price.
            results = await ev.evaluate_many(None, _rows(3), budget=Budget(calls=10))
        assert all(r.ok for r in results)
        assert sim.statistics().requests == 3

    async def test_a_refused_call_swallowed_by_user_code_still_marks_its_example(
        self, tmp_path: Path, sim: Simulator
    ) -> None:
        """A metric that catches the refusal cannot turn its example into a success."""
        metric = write(tmp_path, "judge.py", SWALLOWS)
        async with Evaluator(metric, models=_judge(sim), concurrency=8) as ev:
            results = await ev.evaluate_many(None, _rows(100), budget=Budget(usd=0.001))
        kinds = _kinds(results)
        assert kinds.get("budget_exhausted", 0) > 0
        assert not any(r.ok and "swallowed" in r.feedback for r in results)
        assert _billed(sim) <= 0.001


class TestCallsAndSeconds:
    async def test_a_calls_budget_sends_exactly_that_many(
        self, tmp_path: Path, sim: Simulator
    ) -> None:
        """Budget(calls=10) over 50 examples: 10 calls reach the server, 10 examples are
        scored, the other 40 are budget_exhausted."""
        metric = write(tmp_path, "judge.py", JUDGE)
        async with Evaluator(metric, models=_judge(sim), concurrency=32) as ev:
            results = await ev.evaluate_many(None, _rows(50), budget=Budget(calls=10))
        assert sim.statistics().requests == 10
        assert _kinds(results) == {None: 10, "budget_exhausted": 40}

    async def test_retries_count_against_the_calls_budget(self, tmp_path: Path) -> None:
        """Every attempt is a call: with a server that always fails, a budget of 3 calls
        lets 3 attempts out and no more, however many retries the model allows."""
        metric = write(tmp_path, "judge.py", JUDGE)
        async with Simulator(SimulatorConfig(error_500_rate=1.0)) as sim:
            models = _judge(sim, max_retries=8)
            async with Evaluator(metric, models=models) as ev:
                results = await ev.evaluate_many(None, _rows(2), budget=Budget(calls=3))
            assert sim.statistics().requests == 3
        assert _kinds(results) == {"budget_exhausted": 2}

    async def test_a_seconds_budget_starts_nothing_once_over(
        self, tmp_path: Path, sim: Simulator
    ) -> None:
        """A budget of 0 s starts no example and sends nothing; each example still gets
        its one result, which says the time is over."""
        metric = write(tmp_path, "judge.py", JUDGE)
        async with Evaluator(metric, models=_judge(sim)) as ev:
            results = await ev.evaluate_many(None, _rows(20), budget=Budget(seconds=0))
        assert _kinds(results) == {"budget_exhausted": 20}
        assert "0 s are over" in results[0].feedback
        assert sim.statistics().requests == 0

    async def test_a_seconds_budget_ending_mid_run(self, tmp_path: Path) -> None:
        """Calls of 200 ms, two at a time, and a 0.5 s budget over 40 examples: the run
        stops well short of them all, every example has one result."""
        metric = write(tmp_path, "judge.py", JUDGE)
        async with Simulator(SimulatorConfig(latency_ms=200)) as sim:
            async with Evaluator(metric, models=_judge(sim), concurrency=2) as ev:
                results = await ev.evaluate_many(None, _rows(40), budget=Budget(seconds=0.5))
            assert sim.statistics().requests < 40
        assert len(results) == 40
        assert _kinds(results).get("budget_exhausted", 0) > 0


class TestScopes:
    async def test_a_per_call_budget_holds_for_that_call_only(
        self, tmp_path: Path, sim: Simulator
    ) -> None:
        """A budget on ``evaluate_many`` limits that call; the next call has none."""
        metric = write(tmp_path, "judge.py", JUDGE)
        async with Evaluator(metric, models=_judge(sim)) as ev:
            first = await ev.evaluate_many(None, _rows(10), budget=Budget(calls=4))
            second = await ev.evaluate_many(None, _rows(10))
        assert _kinds(first) == {None: 4, "budget_exhausted": 6}
        assert _kinds(second) == {None: 10}

    async def test_a_per_call_budget_on_stream(self, tmp_path: Path, sim: Simulator) -> None:
        """``stream`` takes a budget too: every example comes out once, the rest exhausted."""
        metric = write(tmp_path, "judge.py", JUDGE)
        async with Evaluator(metric, models=_judge(sim)) as ev:
            results = [r async for r in ev.stream(None, _rows(12), budget=Budget(calls=5))]
        assert sorted(r.example_id for r in results) == list(range(12))
        assert _kinds(results) == {None: 5, "budget_exhausted": 7}

    async def test_the_evaluators_budget_holds_for_its_whole_life(
        self, tmp_path: Path, sim: Simulator
    ) -> None:
        """Budget on the Evaluator: spread over every call it serves, concurrent ones
        included, and a call's own budget sits inside it."""
        metric = write(tmp_path, "judge.py", JUDGE)
        async with Evaluator(metric, models=_judge(sim), budget=Budget(calls=12)) as ev:
            a, b = await asyncio.gather(
                ev.evaluate_many(None, _rows(10)), ev.evaluate_many(None, _rows(10))
            )
            c = await ev.evaluate_many(None, _rows(5), budget=Budget(calls=100))
            assert ev.spend is not None and ev.spend.calls_made == 12
        assert _kinds(a).get(None, 0) + _kinds(b).get(None, 0) == 12
        assert _kinds(c) == {"budget_exhausted": 5}
        assert sim.statistics().requests == 12

    async def test_cached_results_cost_nothing(self, tmp_path: Path, sim: Simulator) -> None:
        """A second run from the cache under a budget of no calls at all: every example
        is served from the cache, nothing is sent, nothing is exhausted."""
        metric = write(tmp_path, "judge.py", JUDGE)
        cache = tmp_path / "cache"
        async with Evaluator(metric, models=_judge(sim), cache=cache) as ev:
            assert all(r.ok for r in await ev.evaluate_many(None, _rows(10)))
        sent = sim.statistics().requests
        budget = Budget(calls=0, usd=0.0)
        async with Evaluator(metric, models=_judge(sim), cache=cache, budget=budget) as ev:
            results = await ev.evaluate_many(None, [*_rows(10), *_rows(12)[10:]])
        assert sim.statistics().requests == sent
        assert [r.cached for r in results[:10]] == [True] * 10
        assert _kinds(results) == {None: 10, "budget_exhausted": 2}


class TestThroughTheEngine:
    @pytest.mark.parametrize("execution", ["thread", PROCESS])
    async def test_a_sync_metric_reserves_in_the_engine(
        self, tmp_path: Path, sim: Simulator, execution: str
    ) -> None:
        """``skynet.llm`` from worker threads, or relayed from worker processes, goes
        through the engine's client: the budget holds for it as for async calls."""
        metric = write(tmp_path, "judge.py", SYNC_JUDGE)
        async with Evaluator(
            metric, models=_judge(sim), execution=execution, workers=4, concurrency=32
        ) as ev:
            results = await ev.evaluate_many(None, _rows(200), budget=Budget(usd=0.002))
        assert len(results) == 200 and set(_kinds(results)) == {None, "budget_exhausted"}
        assert _billed(sim) <= 0.002

    async def test_a_routed_sdk_call_reserves_from_its_body(
        self, tmp_path: Path, sim: Simulator
    ) -> None:
        """A program's own openai client is routed to the engine's client, whose
        reservation reads the forwarded body's size and max_tokens."""
        program = write(tmp_path, "program.py", SDK_PROGRAM)
        metric = write(tmp_path, "accept.py", ACCEPT)
        sdk = ModelConfig(
            model="sim-sdk",
            base_url=sim.base_url,
            api_key_env=None,
            price_input=PRICE_IN,
            price_output=PRICE_OUT,
        )
        async with Evaluator(
            metric,
            program,
            models=Models(program=sdk),
            program_execution="thread",
            workers=8,
            concurrency=16,
        ) as ev:
            rows = [{"id": i, "input": {"q": i}, "expected": None} for i in range(120)]
            results = await ev.evaluate_many(sim.base_url, rows, budget=Budget(usd=0.001))
        kinds = _kinds(results)
        assert len(results) == 120 and kinds.get(None, 0) > 0, kinds
        assert kinds.get("budget_exhausted", 0) > 0, kinds
        assert _billed(sim) <= 0.001


class TestLedger:
    def test_a_budget_refuses_bad_limits_by_name(self) -> None:
        with pytest.raises(ConfigError, match="usd"):
            Budget(usd=-1)
        with pytest.raises(ConfigError, match="calls"):
            Budget(calls=1.5)  # type: ignore[arg-type]

    @settings(max_examples=40, deadline=None)
    @given(
        usd=st.floats(0.0, 1.0),
        tasks=st.integers(1, 80),
        seed=st.integers(0, 2**16),
    )
    def test_spent_never_passes_the_limit_whatever_the_concurrency(
        self, usd: float, tasks: int, seed: int
    ) -> None:
        """Many tasks reserving worst cases and settling at most that, in any order:
        what is spent never passes the limit, and a refusal is final."""
        rng = random.Random(seed)

        async def main() -> Spend:
            spend = Spend(usd=usd)

            async def one() -> None:
                for _ in range(5):
                    worst = rng.uniform(0.0, 0.1)
                    try:
                        held = await spend.reserve(worst, "m")
                    except BudgetExhaustedError:
                        return
                    await asyncio.sleep(0)
                    held.settle(rng.uniform(0.0, worst) if rng.random() < 0.9 else None)
                    assert spend.spent_usd <= usd + 1e-12

            await asyncio.gather(*(one() for _ in range(tasks)))
            return spend

        spend = asyncio.run(main())
        assert spend.spent_usd <= usd + 1e-12
        assert spend.reserved_usd == pytest.approx(0.0, abs=1e-12)
