"""Each stage runs as many calls at once as its executor says: a model-bound stage its
model budget (counted at the simulator), a process stage its real workers; and the
report says which executor each stage used and why."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from evaluator import Evaluator, Example, Models, ReportBuilder, check_contract
from evaluator._call._loader import load_metric
from evaluator._pipeline import choose_execution
from evaluator._pipeline._evaluator import DEFAULT_MODEL_BUDGET
from llm_client import ModelConfig, Simulator, SimulatorConfig
from tests._helpers import write

ROOT = Path(__file__).resolve().parents[3]
JUDGE = ROOT / "examples" / "metrics" / "judge.py"
EXACT = (Path(__file__).resolve().parents[1] / "sources" / "exact.py").read_text()

SDK_METRIC = """
def score(input, output, expected=None):
    import openai  # the SDK's client would call the model here
    return 1.0, {"feedback": "ok"}
"""

SKYNET_PROGRAM = """
from skynet import llm

def run(artifact, input):
    return llm(artifact, input=input["question"])
"""


def judged(n: int, offset: int = 0) -> list[Example]:
    return [
        Example(
            id=i,
            input={"question": f"What is {i} + {i}?"},
            expected={"answer": str(2 * i)},
            output=str(2 * i),
        )
        for i in range(offset, offset + n)
    ]


def judge_model(sim: Simulator, **settings: Any) -> ModelConfig:
    return ModelConfig(model="judge-1", base_url=sim.base_url, api_key_env=None, **settings)


def our_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("skynet-") and t.is_alive()]


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    async with Simulator(SimulatorConfig(latency_ms=300)) as simulator:
        yield simulator


class TestChoice:
    def test_model_bound_sync_functions_get_threads_by_their_model_budget(
        self, tmp_path: Path
    ) -> None:
        """A sync function that calls a model runs in threads: as many as its stage
        model's max_concurrency, or the default budget when the stage has no model (an
        SDK with its own base URL); the reason names what it calls."""
        judge = load_metric(JUDGE)
        sdk = load_metric(write(tmp_path, "sdk.py", SDK_METRIC))
        model = ModelConfig(model="m", base_url="http://127.0.0.1:9/v1", max_concurrency=12)
        with_model = choose_execution(judge, None, option="execution", model=model)
        assert (with_model.kind, with_model.model_budget) == ("thread", 12)
        assert with_model.reason == "calls skynet.llm (model-bound)"
        without = choose_execution(sdk, None, option="execution")
        assert (without.kind, without.model_budget) == ("thread", DEFAULT_MODEL_BUDGET)
        assert without.reason == "calls openai (model-bound)" and DEFAULT_MODEL_BUDGET == 64

    def test_cpu_bound_and_async_functions(self, tmp_path: Path) -> None:
        """A plain sync function gets processes, no model budget; async def gets async."""
        plain = choose_execution(load_metric(write(tmp_path, "p.py", EXACT)), None, option="x")
        assert (plain.kind, plain.source, plain.model_budget) == ("process", "automatic", None)
        assert plain.reason == "plain sync function (calls no model)"
        source = "async def score(i, o, e=None):\n    return 1.0, {'feedback': ''}\n"
        hurried = choose_execution(load_metric(write(tmp_path, "a.py", source)), None, option="x")
        assert (hurried.kind, hurried.reason) == ("async", "async def")

    def test_option_and_execution_override_and_say_so(self, tmp_path: Path) -> None:
        """The option wins over the file's EXECUTION, which wins over the automatic
        choice; each says it chose, and a model-bound function keeps its budget."""
        fn = load_metric(write(tmp_path, "metric.py", 'EXECUTION = "process"\n' + EXACT))
        from_file = choose_execution(fn, None, option="execution")
        assert (from_file.kind, from_file.source) == ("process", "EXECUTION")
        assert from_file.reason == "EXECUTION in metric.py"
        from_option = choose_execution(fn, "inline", option="execution")
        assert (from_option.kind, from_option.source, from_option.option) == (
            "inline",
            "option",
            "execution",
        )
        forced = choose_execution(load_metric(JUDGE), "thread", option="execution")
        assert forced.model_budget == DEFAULT_MODEL_BUDGET


class TestExecutorSizes:
    @pytest.mark.parametrize(
        ("options", "parallelism"),
        [
            ({}, 12),
            ({"workers": 5}, 5),
            ({"concurrency": 7}, 7),
            ({"workers": 9, "concurrency": 3}, 3),
        ],
    )
    async def test_thread_stage_size(
        self, sim: Simulator, options: dict[str, Any], parallelism: int
    ) -> None:
        """The judge's threads: its model budget; `workers` overrides it; `concurrency`
        caps either (no more calls are ever in flight). The report says it."""
        models = Models(metric=judge_model(sim, max_concurrency=12))
        async with Evaluator(JUDGE, models=models, **options) as ev:
            report = await ev.evaluate(None, judged(4))
        (stage,) = report.executors
        assert (stage.stage, stage.kind, stage.parallelism) == ("score", "thread", parallelism)
        assert stage.describe() == f"thread x{parallelism}: calls skynet.llm (model-bound)"
        (budget,) = report.model_budgets
        assert (budget.model, budget.roles, budget.max_concurrency) == ("judge-1", ("judge",), 12)
        assert (budget.rpm, budget.tpm, budget.source) == (None, None, "none")

    async def test_configured_limits_are_the_budget_in_force(
        self, sim: Simulator, tmp_path: Path
    ) -> None:
        """rpm/tpm given to the model show in the report's budget as configured; one
        model serving both stages is one budget with both roles."""
        model = judge_model(sim, rpm=6000, tpm=2_000_000)
        program = write(tmp_path, "program.py", SKYNET_PROGRAM)
        async with Evaluator(JUDGE, program, models=Models(metric=model, program=model)) as ev:
            budgets = ev.statistics().model_budgets
        (budget,) = budgets
        assert budget.roles == ("program", "judge")
        assert (budget.rpm, budget.tpm, budget.source) == (6000, 2_000_000, "configured")
        assert budget.describe() == "64 in flight (cap 1024), 6000 rpm, 2e+06 tpm (configured)"

    @pytest.mark.process
    @pytest.mark.parametrize("workers", [3, None])
    async def test_process_stage_parallelism_is_its_real_worker_count(
        self, tmp_path: Path, workers: int | None
    ) -> None:
        """A process stage's parallelism is the number of worker processes it really
        runs: `workers`, else os.cpu_count(); the flow keeps twice that many in flight."""
        async with Evaluator(write(tmp_path, "m.py", EXACT), workers=workers) as ev:
            await ev.evaluate_many(None, judged(2 * (os.cpu_count() or 1) + 6))
            stats = ev.statistics()
            flow = ev._flow
            assert flow.slots() == stats.metric.parallelism
            assert flow.limit(1) == 2 * stats.metric.parallelism
        expected = workers if workers is not None else os.cpu_count()
        assert stats.metric.parallelism == stats.metric.workers_alive == expected
        (stage,) = stats.executors
        assert stage.describe() == f"process x{expected}: plain sync function (calls no model)"


@pytest.mark.slow
class TestModelBoundInFlight:
    async def test_judge_keeps_its_model_budget_in_flight_after_the_contract_check(
        self, sim: Simulator
    ) -> None:
        """As `skynet-eval run` does it (the contract check on 3 examples, then a stream
        of the rest), the judge keeps >= 60 calls in flight at the server (it allows
        any number); before, the check's 3 threads were all the run ever got."""
        first = judged(3)
        async with Evaluator(JUDGE, models=Models(metric=judge_model(sim))) as ev:
            report = await check_contract(ev.metric, first, evaluator=ev, timeout=ev.timeout)
            assert report.ok
            builder = ReportBuilder()
            async with ev.stream(None, judged(300, offset=3)) as stream:
                async for batch in stream.batches():
                    builder.add_many(batch)
        assert builder.build().ok == 300
        assert sim.statistics().peak_in_flight >= 60

    async def test_concurrency_caps_the_calls_in_flight(self, sim: Simulator) -> None:
        """`concurrency` caps the whole run: never more calls in flight at the server."""
        async with Evaluator(JUDGE, models=Models(metric=judge_model(sim)), concurrency=10) as ev:
            results = await ev.evaluate_many(None, judged(60))
        assert all(r.ok for r in results)
        assert sim.statistics().peak_in_flight == 10

    async def test_both_model_bound_stages_full_at_once(self, tmp_path: Path) -> None:
        """A model-bound program and a judge metric with a model each: the in-flight
        bound covers both stages' parallelism, so both keep their budget busy at once."""
        program = write(tmp_path, "program.py", SKYNET_PROGRAM)
        async with Simulator(SimulatorConfig(latency_ms=300)) as sim:
            models = Models(
                program=ModelConfig(
                    model="p-1", base_url=sim.base_url, api_key_env=None, max_concurrency=8
                ),
                metric=judge_model(sim, max_concurrency=8),
            )
            async with Evaluator(JUDGE, program, models=models) as ev:
                assert ev._flow.limit(1) == 2 * (8 + 8)
                results = await ev.evaluate_many("Answer.", judged(96))
            assert all(r.ok for r in results)
            assert sim.statistics().peak_in_flight == 16

    async def test_cancel_with_64_threads_in_flight_leaves_no_thread_behind(self) -> None:
        """Cancelling a run while 64 judge calls wait on a slow model stops those calls:
        the threads are free at once, the Evaluator closes without waiting for the model
        or abandoning a thread, the governor holds no call, and no thread of ours is
        left. Tolerance: closed within 5 s; the model would take 30 s, the timeout 60 s."""
        async with Simulator(SimulatorConfig(latency_ms=30_000)) as sim:
            started = time.perf_counter()
            async with Evaluator(JUDGE, models=Models(metric=judge_model(sim))) as ev:
                task = asyncio.create_task(ev.evaluate_many(None, judged(200)))
                # Poll: the calls start in worker threads, which offer nothing to await.
                while sim.statistics().in_flight < 64:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
                assert ev.statistics().metric.busy == 64
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert ev.statistics().in_flight == 0
                router = ev._flow.router
                assert router is not None and router._judge is not None
            assert time.perf_counter() - started < 5
            assert router._judge.statistics().in_flight == 0
            assert ev.statistics().abandoned_threads == 0
        for thread in our_threads():
            thread.join(5)
        assert our_threads() == []


class TestInFlightFollowsTheModel:
    async def test_a_judge_stage_goes_past_64_when_the_headers_allow_it(self) -> None:
        """A server stating 12,000 RPM in its headers, at 500 ms: the judge stage keeps
        more than 64 calls in flight (counted at the server), not capped by the pipeline;
        its executor and the report's budget say how far the limit moved, and why."""
        async with Simulator(SimulatorConfig(latency_ms=500, rpm=12_000)) as sim:
            async with Evaluator(JUDGE, models=Models(metric=judge_model(sim))) as ev:
                results = await ev.evaluate_many(None, judged(400))
                stats = ev.statistics()
            peak = sim.statistics().peak_in_flight
        assert all(r.error is None for r in results), [r.error for r in results][:3]
        assert peak > 64
        (budget,) = stats.model_budgets
        assert budget.source == "learned from headers"
        assert budget.in_flight_source == "rate x latency"
        assert budget.in_flight_max is not None and budget.in_flight_start == 64
        assert budget.in_flight_max > 64
        assert budget.in_flight_limit is not None
        (stage,) = stats.executors
        assert stage.parallelism == max(64, budget.in_flight_limit)
        assert budget.describe().startswith(f"64 → {budget.in_flight_limit} in flight")
