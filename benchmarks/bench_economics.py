"""Spending less per decision (issue 28): one section per promise, figures from one run.

    python benchmarks/bench_economics.py                       # every section, full sizes
    python benchmarks/bench_economics.py --only race,budget    # some sections
    python benchmarks/bench_economics.py --smoke               # CI: small sizes, seconds

Sections (one function each, ``bench_<name>``, in the issue's order: race, budget, dedup,
hedge):

- **race**: a race between candidates. 8 candidates whose true pass rates are known:
  0.70 (the best, by 0.05), 0.65, 0.60, 0.60, 0.55, 0.55, 0.50, 0.50. The program passes
  an example when the example's difficulty (uniform, the same for every candidate: a
  paired design, as real examples are) is below the candidate's threshold, and its
  verdict is flipped with probability 0.05 (set per candidate and example), the threshold
  chosen so that the pass rate is exactly the candidate's. The metric scores the verdict
  1 or 0 (inline, no model). Each seed draws new difficulties and flips and runs
  ``Evaluator.race`` at 95%; 20 seeds of 1,000 examples (smoke: 2 of 200). Goals: the
  correct winner, or a reported tie that includes it, in at least 95% of the seeds; at
  most 30% of the calls (evaluations: a program and a metric call each) of scoring every
  candidate on every example. Then **a race under a dollar budget**: the same 8
  candidates, judged by a priced model on the simulator (``skynet.allm``, $0.50 per
  million tokens), under ``Evaluator.race(budget=Budget(usd=0.01))``, which runs out
  before the race can end: the race stops with the standing (outcome "budget"), what the
  simulator billed and what the race says it spent are at most the budget, and every
  evaluated cell has one score, the cut ones ``budget_exhausted``.
- **budget**: a dollar budget that runs out mid-run is never overrun. An async judge
  metric (``skynet.allm`` to the simulator, 5-15 ms a reply, priced at $0.50 per million
  tokens in and out) keeps 64 model calls in flight over 2,000 examples (smoke: 1,000),
  under ``Budget(usd=0.01)``, which runs out part way (64 worst cases fit in it at once),
  20 runs (smoke: 1 of 400). Each run checks: what the simulator served, at the model's price
  (the independent side of the books), is at most the budget; the engine's own ledger
  agrees; every example has exactly one result, scored or ``budget_exhausted``. Goals:
  spent at most the budget in 20 of 20 runs, every example one result (the exit status
  is 1 otherwise). Also printed: how much of the budget was used (the reservations are
  worst cases, so the last calls that would have fitted in reality may not be sent) and
  the calls sent.

- **dedup**: one payment per identical call. Four ``evaluate_many`` at once on one
  Evaluator (memory cache) over the same examples and artifact, then two
  ``skynet-eval run --cache DIR`` processes started together on one cache directory,
  each against one simulator (program and judge calls over HTTP, 100 ms each). Goal:
  the server's requests equal the distinct keys (two calls per example), printed as
  requests / (distinct keys x 2): 1.00 is the goal, 4.00 (or 2.00) is paying for each.
- **hedge**: hedged judge calls against a heavy tail. The judge metric
  (``examples/metrics/judge.py``, one model call per example) scores minibatches of three
  examples through ``Evaluator.evaluate_many``, 8 optimizer loops at once, 100 minibatches
  each (smoke: 2 x 20); the simulator answers in 40-50 ms and slows a seeded 5% of its
  replies 10x. Unhedged, then ``hedge=Q`` on the metric model (a second copy past the Q
  quantile of recent latencies, at most 10% extra calls, within the rate budget) for
  Q = 0.95 and 0.9. Goals: the p99 of a minibatch at most 0.5 of unhedged, at most 10%
  extra calls; a losing copy that replied is metered, one cancelled in flight makes the
  call's cost unmeasured (a provider may bill a cancelled request). Then **hedging under
  a dollar budget**: hedge=0.9 with ``Budget(usd=0.003, max_tokens=256)`` on the
  Evaluator, which runs out part way: each hedge copy reserves its own worst case
  first, so what the simulator billed is at most the budget, and the hedges that did not
  fit are refused (counted).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluator import Budget, Example  # noqa: E402
from evaluator._models import Models  # noqa: E402
from evaluator._pipeline import Evaluator  # noqa: E402
from evaluator._stats import percentile  # noqa: E402
from llm_client import Hedge, HedgeStatistics, ModelConfig, Simulator, SimulatorConfig  # noqa: E402

PROGRAM = """
from skynet import llm

def run(artifact, input):
    return llm(artifact, input=input["q"])
"""
JUDGE = """
from skynet import llm

def score(input, output, expected=None):
    verdict = llm("Answer PASS or FAIL.", input=f"{input['q']} {output}")
    return float(len(verdict) % 2), {"feedback": f"verdict {verdict[:20]}"}
"""
ARTIFACT = "Answer briefly."


def _rows(n: int) -> list[dict[str, Any]]:
    return [{"id": f"e{i}", "input": {"q": f"question {i}"}} for i in range(n)]


def _simulator(latency_ms: float = 100, jitter_ms: float = 20, seed: int = 0) -> Simulator:
    return Simulator(SimulatorConfig(latency_ms=latency_ms, jitter_ms=jitter_ms, seed=seed))


def _model(sim: Simulator, name: str, price: float | None = None) -> ModelConfig:
    """A model on ``sim``, priced at ``price`` USD per million tokens in and out."""
    return ModelConfig(
        model=name,
        base_url=sim.base_url,
        api_key_env=None,
        price_input=price,
        price_output=price,
    )


def _models(sim: Simulator) -> Models:
    return Models(program=_model(sim, "sim-program"), metric=_model(sim, "sim-judge"))


def _write(folder: Path, **files: str) -> list[Path]:
    """``name=source`` as ``folder/name.py``, the paths in order."""
    paths = [folder / f"{name}.py" for name in files]
    for path, source in zip(paths, files.values(), strict=True):
        path.write_text(textwrap.dedent(source))
    return paths


# -- race ---------------------------------------------------------------------------

RATES = (0.70, 0.65, 0.60, 0.60, 0.55, 0.55, 0.50, 0.50)
NOISE = 0.05

RACE_PROGRAM = """
import hashlib
EXECUTION = "inline"

def run(artifact, input):
    key = f"{artifact['name']}:{input['n']}".encode()
    draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
    return (input["u"] < artifact["threshold"]) != (draw < artifact["noise"])
"""
RACE_METRIC = """
EXECUTION = "inline"

def score(input, output, expected=None):
    return (1.0 if output else 0.0), {"feedback": "pass" if output else "fail"}
"""


def _candidates(seed: int) -> list[dict[str, object]]:
    """The candidates of one seed: pass rate p = t (1 - e) + (1 - t) e for threshold t."""
    return [
        {"name": f"s{seed}c{i}", "threshold": (p - NOISE) / (1 - 2 * NOISE), "noise": NOISE}
        for i, p in enumerate(RATES)
    ]


def _race_examples(n: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    return [{"id": f"e{i}", "input": {"n": i, "u": rng.random()}} for i in range(n)]


async def bench_race(folder: Path, smoke: bool) -> bool:
    seeds, n = (2, 200) if smoke else (20, 1000)
    program, metric = _write(folder, program=RACE_PROGRAM, metric=RACE_METRIC)
    right = ties = 0
    shares: list[float] = []
    started = time.perf_counter()
    async with Evaluator(metric, program) as ev:
        for seed in range(seeds):
            result = await ev.race(_candidates(seed), _race_examples(n, seed), seed=seed)
            right += 0 in result.winners
            ties += result.tied
            shares.append(result.spend.evaluations / result.spend.full_evaluations)
            won = ",".join(str(i) for i in result.winners)
            print(
                f"  seed {seed:2d}: {result.outcome:6s} [{won}]  "
                f"{result.spend.evaluations:5,} of {result.spend.full_evaluations:,} "
                f"evaluations ({shares[-1]:.1%})"
            )
    wall = time.perf_counter() - started
    share = sum(shares) / len(shares)
    print(
        f"race: 8 candidates (best 0.70 by 0.05, verdict noise {NOISE}), {n:,} examples, "
        f"{seeds} seeds, in {wall:.1f} s"
    )
    print(
        f"  correct winner or a tie that includes it: {right}/{seeds} = {right / seeds:.0%} "
        f"(goal >= 95%; {ties} of them ties)"
    )
    print(
        f"  calls against scoring everything: mean {share:.1%}, max {max(shares):.1%} (goal <= 30%)"
    )
    return await _race_under_budget(folder, program, n)


RACE_JUDGE = """
from skynet import allm

async def score(input, output, expected=None):
    text = await allm("Judge this answer: PASS or FAIL.", input=str(output), max_tokens=50)
    return (1.0 if output else 0.0), {"feedback": text}
"""


async def _race_under_budget(folder: Path, program: Path, n: int) -> bool:
    (metric,) = _write(folder, race_judge=RACE_JUDGE)
    async with _simulator(latency_ms=5, jitter_ms=10) as sim:
        models = Models(metric=_model(sim, "sim-judge", price=PRICE))
        async with Evaluator(metric, program, models=models, concurrency=IN_FLIGHT) as ev:
            race = await ev.race(_candidates(0), _race_examples(n, 0), budget=Budget(usd=BUDGET))
        stats = sim.statistics()
    billed = (stats.prompt_tokens + stats.completion_tokens) * PRICE / 1e6
    s, b = race.spend, race.budget
    assert b is not None
    within = billed <= BUDGET and b.spent_usd <= BUDGET and (s.cost_usd or 0.0) <= BUDGET
    won = ",".join(str(i) for i in race.winners)
    print(f"race under a dollar budget: 8 candidates judged at ${PRICE}/M, Budget(usd={BUDGET})")
    print(
        f"  outcome {race.outcome}, standing [{won}] after {len(race.example_ids):,} examples; "
        f"{race.reason}"
    )
    print(
        f"  spent / budget: billed by the server {billed / BUDGET:.3f}, ledger "
        f"{b.spent_usd / BUDGET:.3f}, race's spend {(s.cost_usd or 0.0) / BUDGET:.3f} "
        f"(goal <= 1); {s.model_calls:,} calls, {s.evaluations:,} evaluations of "
        f"{s.full_evaluations:,}, {s.exhausted:,} cells budget_exhausted; everything: "
        f"~${s.full_cost_usd or 0.0:.4f}"
    )
    return within and race.outcome == "budget"


# -- budget -------------------------------------------------------------------------

PRICE = 0.5  # USD per million tokens, input and output
BUDGET = 0.01
IN_FLIGHT = 64

BUDGET_JUDGE = """
from skynet import allm

async def score(input, output, expected=None):
    text = await allm("Judge this answer: PASS or FAIL.", input=str(output), max_tokens=50)
    return float(text.startswith("PASS")), {"feedback": text}
"""


async def _budget_run(metric: Path, n: int, seed: int) -> dict[str, float]:
    async with _simulator(latency_ms=5, jitter_ms=10, seed=seed) as sim:
        models = Models(metric=_model(sim, "sim-judge", price=PRICE))
        rows = [{"id": i, "input": {}, "output": f"answer {seed}-{i}"} for i in range(n)]
        async with Evaluator(metric, models=models, concurrency=IN_FLIGHT) as ev:
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


async def bench_budget(folder: Path, smoke: bool) -> bool:
    runs, n = (1, 400) if smoke else (20, 2000)
    (metric,) = _write(folder, judge=BUDGET_JUDGE)
    got = [await _budget_run(metric, n, seed) for seed in range(runs)]
    within = sum(r["billed"] <= BUDGET and r["ledger"] <= BUDGET for r in got)
    whole = sum(r["results"] == n and r["other_errors"] == 0 for r in got)
    used = [r["billed"] / BUDGET for r in got]
    print(f"budget: ${BUDGET:g}, {IN_FLIGHT} calls in flight, {n} examples, {runs} runs")
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
    return within == runs and whole == runs


# -- dedup --------------------------------------------------------------------------


async def bench_dedup(folder: Path, smoke: bool) -> bool:
    n = 20 if smoke else 200
    program, metric = _write(folder, program=PROGRAM, judge=JUDGE)
    print(f"dedup: {n} examples, one program and one judge call each (distinct keys {n})")

    async with _simulator() as sim:
        started = time.perf_counter()
        async with Evaluator(metric, program, models=_models(sim), cache=True) as ev:
            runs = await asyncio.gather(*(ev.evaluate_many(ARTIFACT, _rows(n)) for _ in range(4)))
            stats = ev.cache_statistics()
        elapsed = time.perf_counter() - started
        requests = sim.statistics().requests
    assert all(len(run) == n and all(r.ok for r in run) for run in runs)
    shared = getattr(stats, "shared", 0)  # (an engine before issue 28 has no such count)
    print(
        f"   4 evaluate_many at once, one Evaluator: {requests:,} requests for {n:,} keys "
        f"(requests / (keys x 2) = {requests / (2 * n):.2f}; 4.00 would be paying for "
        f"each), {shared:,} examples waited for another's result, {elapsed:.2f} s"
    )

    data = folder / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in _rows(n)))
    async with _simulator() as sim:
        command = [
            sys.executable, "-m", "evaluator", "run",
            "--program", str(program), "--metric", str(metric),
            "--artifact-text", ARTIFACT, "--data", str(data),
            "--model", "sim-program", "--base-url", sim.base_url,
            "--metric-model", "sim-judge", "--metric-base-url", sim.base_url,
            "--api-key-env", "none", "--cache", str(folder / "cache"), "--json",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        pipe = asyncio.subprocess.PIPE
        started = time.perf_counter()
        procs = [
            await asyncio.create_subprocess_exec(
                *command,
                "--output",
                str(folder / f"run{i}.jsonl"),
                stdout=pipe,
                stderr=pipe,
                env=env,
                cwd=folder,
            )
            for i in range(2)
        ]
        reports = []
        for proc in procs:
            out, err = await proc.communicate()
            if proc.returncode != 0:
                raise SystemExit(f"skynet-eval run failed: {err.decode()[-2000:]}")
            reports.append(json.loads(out))
        elapsed = time.perf_counter() - started
        requests = sim.statistics().requests
    executed = [r["cache"]["executed"] for r in reports]
    shared_runs = [r["cache"].get("shared", 0) for r in reports]
    print(
        f"   2 CLI runs together, one --cache DIR: {requests:,} requests for {n:,} keys "
        f"(requests / (keys x 2) = {requests / (2 * n):.2f}; 2.00 would be paying for "
        f"each), executed {executed[0]:,} + {executed[1]:,}, waited for the other "
        f"{shared_runs[0]:,} + {shared_runs[1]:,}, {elapsed:.2f} s"
    )
    return True


# -- hedging: hedged judge calls for the tail (issue 28, item 4)

HEDGE_JUDGE = ROOT / "examples" / "metrics" / "judge.py"


def _hedge_minibatch(loop: int, step: int) -> list[Example]:
    return [
        Example(id=f"l{loop}s{step}e{i}", input={"question": f"q{loop}.{step}.{i}"}, output=str(i))
        for i in range(3)
    ]


async def _hedge_run(
    hedge: Hedge | None, loops: int, steps: int, budget: Budget | None = None
) -> dict[str, object]:
    sim_config = SimulatorConfig(latency_ms=40, jitter_ms=10, tail_share=0.05, tail_factor=10)
    async with Simulator(sim_config) as sim:
        config = ModelConfig(
            model="judge-1",
            base_url=sim.base_url,
            api_key_env=None,
            price_input=0.15,
            price_output=0.6,
            hedge=hedge,
        )
        async with Evaluator(HEDGE_JUDGE, models=Models(metric=config), budget=budget) as ev:
            times: list[float] = []
            errors = 0

            async def optimizer(loop: int, timed: bool, first: int, last: int) -> None:
                nonlocal errors
                for step in range(first, last):
                    started = time.perf_counter()
                    results = await ev.evaluate_many(None, _hedge_minibatch(loop, step))
                    if timed:
                        times.append(time.perf_counter() - started)
                    errors += sum(r.error is not None for r in results)

            async with asyncio.TaskGroup() as tg:  # warm-up: one minibatch per loop
                for loop in range(loops):
                    tg.create_task(optimizer(loop, False, 0, 1))
            served_before = sim.statistics().requests
            async with asyncio.TaskGroup() as tg:
                for loop in range(loops):
                    tg.create_task(optimizer(loop, True, 1, 1 + steps))
            stats = ev.statistics()
            (model_budget,) = stats.model_budgets
            served = sim.statistics()
            return {
                "times": times,
                "errors": errors,
                "requests": served.requests - served_before,
                "hedging": model_budget.hedging,
                "row": model_budget.describe(),
                "cost": stats.models.judge_cost_usd,
                "billed": (served.prompt_tokens * 0.15 + served.completion_tokens * 0.6) / 1e6,
                "spent": None if ev.spend is None else ev.spend.spent_usd,
            }


def _hedge_report(name: str, plain: dict[str, object], hedged: dict[str, object]) -> int:
    times_plain, times_hedged = plain["times"], hedged["times"]
    assert isinstance(times_plain, list) and isinstance(times_hedged, list)
    print(f"-- {name}")
    for q, label in ((0.5, "p50"), (0.99, "p99")):
        a, b = percentile(times_plain, q), percentile(times_hedged, q)
        assert a is not None and b is not None
        target = " (target <= 0.5)" if label == "p99" else ""
        print(
            f"minibatch {label}: unhedged {a * 1000:7.1f} ms, hedged {b * 1000:7.1f} ms, "
            f"ratio {b / a:.2f}{target}"
        )
    h = hedged["hedging"]
    if not isinstance(h, HedgeStatistics):
        print("hedging statistics missing")
        return 1
    print(
        f"extra calls: {h.hedges_sent} hedges over {h.calls} calls, ratio "
        f"{h.extra_calls:.3f} (target <= 0.10); won {h.hedges_won}, refused {h.refused}, "
        f"held back by max_extra {h.capped}"
    )
    print(f"server requests: unhedged {plain['requests']}, hedged {hedged['requests']}")
    print(f"judge cost (USD): unhedged {plain['cost']}, hedged {hedged['cost']}")
    print(f"report row: model budget: {hedged['row']}")
    return int(hedged["errors"])  # type: ignore[call-overload]


async def _hedge_bench(loops: int, steps: int) -> int:
    plain = await _hedge_run(None, loops, steps)
    print(
        f"{len(plain['times'])} timed minibatches of 3 examples per run "  # type: ignore[arg-type]
        f"({loops} loops x {steps}), 5% of replies slowed 10x"
    )
    problems = int(plain["errors"])  # type: ignore[call-overload]
    for q in (0.95, 0.9):
        hedged = await _hedge_run(Hedge(quantile=q, max_extra=0.1), loops, steps)
        problems += _hedge_report(f"hedge={q:g} (max_extra=0.1)", plain, hedged)
    print(f"errors: {problems}")
    over = _hedge_budget(await _hedge_run(Hedge(quantile=0.9), loops, steps, HEDGE_BUDGET))
    return 1 if problems or over else 0


#: Tight: ~16 worst cases (a 256-token cap) fit at once, beside 12 first copies in flight,
#: and cancelled copies count at their worst case, so it runs out part way.
HEDGE_BUDGET = Budget(usd=0.003, max_tokens=256)


def _hedge_budget(run: dict[str, object]) -> int:
    """Hedging under a dollar budget: spent at most it, the hedges that did not fit refused."""
    h, billed, spent = run["hedging"], run["billed"], run["spent"]
    assert isinstance(h, HedgeStatistics) and isinstance(billed, float)
    assert isinstance(spent, float)
    limit = HEDGE_BUDGET.usd
    assert limit is not None
    print(f"-- hedge=0.9 under Budget(usd={limit:g}, max_tokens={HEDGE_BUDGET.max_tokens})")
    print(
        f"spent / budget: billed by the server {billed / limit:.3f}, ledger "
        f"{spent / limit:.3f} (goal <= 1); hedges sent {h.hedges_sent} of {h.calls} calls, "
        f"refused by the spending budget {h.refused_budget}, by the rate budget "
        f"{h.refused - h.refused_budget}"
    )
    print(f"report row: model budget: {run['row']}")
    return 0 if billed <= limit and spent <= limit else 1


async def bench_hedge(folder: Path, smoke: bool) -> bool:
    """Hedged judge calls for the tail (the goals: p99 of a 3-example minibatch at most
    0.5 of unhedged, at most 10% extra calls)."""
    del folder  # the judge is the shipped one
    loops, steps = (2, 20) if smoke else (8, 100)
    return await _hedge_bench(loops, steps) == 0


# Each section writes its files into its own folder, prints its figures and returns
# whether the checks it makes held (the exit status is 1 when one did not).
SECTIONS: dict[str, Callable[[Path, bool], Awaitable[bool]]] = {
    "race": bench_race,
    "budget": bench_budget,
    "dedup": bench_dedup,
    "hedge": bench_hedge,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes, for CI")
    parser.add_argument(
        "--only",
        metavar="NAMES",
        help=f"comma-separated sections to run, of: {', '.join(SECTIONS)} (default all)",
    )
    args = parser.parse_args(argv)
    names = list(SECTIONS) if args.only is None else [s.strip() for s in args.only.split(",")]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown:
        parser.error(
            f"--only: no section {', '.join(unknown)}; the sections: {', '.join(SECTIONS)}"
        )
    warnings.simplefilter("error")
    held = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            folder = Path(tmp) / name
            folder.mkdir()
            held = asyncio.run(SECTIONS[name](folder, args.smoke)) and held
    return 0 if held else 1


if __name__ == "__main__":
    raise SystemExit(main())
