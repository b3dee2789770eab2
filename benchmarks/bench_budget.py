"""Budget benchmark (issue 28): a dollar budget that runs out mid-run is never overrun.

    python benchmarks/bench_budget.py            # 20 runs of 2,000 examples
    python benchmarks/bench_budget.py --smoke    # CI: 3 runs of 1,000

An async judge metric (``skynet.allm`` to the simulator, 5-15 ms a reply, priced at
$0.50 per million tokens in and out) keeps 64 model calls in flight over 2,000 examples,
under ``Budget(usd=0.01)``, which runs out part way (64 worst cases fit in it at once). Each run
checks: what the simulator served, at the model's price (the independent side of the
books), is at most the budget; the engine's own ledger agrees; every example has
exactly one result, scored or ``budget_exhausted``. Goals: spent at most the budget in
20 of 20 runs, every example one result. Also printed: how much of the budget was used
(the reservations are worst cases, so the last calls that would have fitted in reality
may not be sent) and the calls sent.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluator import Budget, Evaluator, Models  # noqa: E402
from llm_client import ModelConfig, Simulator, SimulatorConfig  # noqa: E402

PRICE = 0.5  # USD per million tokens, input and output
BUDGET = 0.01
IN_FLIGHT = 64

JUDGE = """
from skynet import allm

async def score(input, output, expected=None):
    text = await allm("Judge this answer: PASS or FAIL.", input=str(output), max_tokens=50)
    return float(text.startswith("PASS")), {"feedback": text}
"""


async def one_run(metric: Path, n: int, seed: int) -> dict[str, float]:
    config = SimulatorConfig(latency_ms=5, jitter_ms=10, seed=seed)
    async with Simulator(config) as sim:
        model = ModelConfig(
            model="sim-judge",
            base_url=sim.base_url,
            api_key_env=None,
            price_input=PRICE,
            price_output=PRICE,
        )
        rows = [{"id": i, "input": {}, "output": f"answer {seed}-{i}"} for i in range(n)]
        async with Evaluator(metric, models=Models(metric=model), concurrency=IN_FLIGHT) as ev:
            report = await ev.evaluate(None, rows, budget=Budget(usd=BUDGET))
        stats = sim.statistics()
    billed = (stats.prompt_tokens + stats.completion_tokens) * PRICE / 1e6
    assert report.budget is not None
    return {
        "billed": billed,
        "ledger": report.budget.spent_usd,
        "results": report.n,
        "exhausted": report.errors.get("budget_exhausted", 0),
        "other_errors": report.n - report.ok - report.errors.get("budget_exhausted", 0),
        "requests": stats.requests,
        "peak": stats.peak_in_flight,
    }


async def main(runs: int, n: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        metric = Path(tmp) / "judge.py"
        metric.write_text(JUDGE)
        got = [await one_run(metric, n, seed) for seed in range(runs)]
    within = sum(r["billed"] <= BUDGET and r["ledger"] <= BUDGET for r in got)
    whole = sum(r["results"] == n and r["other_errors"] == 0 for r in got)
    used = [r["billed"] / BUDGET for r in got]
    print(f"budget ${BUDGET:g}, {IN_FLIGHT} calls in flight, {n} examples, {runs} runs")
    print(f"  spent at most the budget:        {within} of {runs} runs")
    print(f"  every example one result:        {whole} of {runs} runs")
    print(
        f"  billed by the server:            ${min(r['billed'] for r in got):.6f} .. "
        f"${max(r['billed'] for r in got):.6f}"
    )
    print(
        f"  budget used:                     {min(used):.1%} .. {max(used):.1%} "
        f"(median {statistics.median(used):.1%})"
    )
    print(
        f"  calls sent / examples exhausted: "
        f"{statistics.median(r['requests'] for r in got):.0f} / "
        f"{statistics.median(r['exhausted'] for r in got):.0f} (medians)"
    )
    print(f"  peak calls in flight at the server: {max(r['peak'] for r in got):.0f}")
    return 0 if within == runs and whole == runs else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="3 runs of 1,000 examples")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(3, 1000) if args.smoke else main(20, 2000)))
