"""Result-cache benchmarks (issue 15): what the cache saves, and what it costs.

    python benchmarks/bench_cache.py            # full sizes; ratios from one run
    python benchmarks/bench_cache.py --smoke    # CI: small sizes, a few seconds
    python benchmarks/bench_cache.py --only cold  # some sections (gepa, lookups, cold)

1. GEPA: the shipped example (``examples/gepa/optimize.py``: its program, data, seed,
   reflection and budget) with a metric that also asks a judge model for its opinion
   (``skynet.llm`` to the simulator, priced as gpt-4o-mini), run with the adapter's cache
   on (its default) and off: metric calls executed, judge calls and simulated dollars
   paid, and the final score, which must be the same.
2. Lookups per second of a chunk of results already stored: from memory, and from disk
   (a fresh Evaluator's memory is empty: every hit is a SELECT). Targets: >= 100,000/s
   from memory, >= 10,000/s from disk.
3. A cold run (nothing cached yet) with the disk cache on against the same run with it
   off, best of three each: a model-bound program (the simulator at 20 ms) with the
   exact-match metric. Target: at most 5 % slower. Beside it, the same for an exact-match
   metric alone (score-only, inline), where the engine's own time is all there is: the
   cache's keying and storing is then a visible share, printed as measured.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples" / "gepa"))

from evaluator import load_examples  # noqa: E402
from evaluator._cache import KeyMaker, ResultCache  # noqa: E402
from evaluator._call._loader import load_metric  # noqa: E402
from evaluator._call._results import Observation, Result, Usage  # noqa: E402
from evaluator._data._dataset import Example  # noqa: E402
from evaluator._models import Models  # noqa: E402
from evaluator._pipeline import Evaluator  # noqa: E402
from llm_client import ModelConfig, Simulator, SimulatorConfig  # noqa: E402

CLASSIFY = ROOT / "examples" / "classify"

# The example's exact-match metric, plus one judge call for an opinion: paid, metered.
JUDGED = """
from skynet import llm

def score(input, output, expected=None):
    llm("Does this label fit the message? Answer yes or no.",
        input=f"{input['message']} -> {output}")
    want = expected["label"]
    if output == want:
        return 1.0, {"feedback": "Correct."}
    return 0.0, {"feedback": f"Expected {want!r}, got {output!r}."}
"""
EXACT = """
def score(input, output, expected=None):
    want = expected["label"]
    return float(output == want), {"feedback": "Correct." if output == want else "Wrong."}
"""
LLM_PROGRAM = """
from skynet import llm

def run(artifact, input):
    return llm(artifact, input=input["q"])
"""


def bench_gepa(folder: Path, smoke: bool) -> None:
    import gepa
    from optimize import Progress, reflect

    from evaluator.gepa import EvaluatorAdapter

    metric = folder / "judged_metric.py"
    metric.write_text(JUDGED)
    rows: list[Any] = list(load_examples(CLASSIFY / "data.jsonl"))
    seed = {"prompt": (CLASSIFY / "prompt.txt").read_text()}
    budget = 60 if smoke else 300
    runs = {}
    for cache in (True, False):
        with EvaluatorAdapter.open(
            metric=str(metric),
            program=str(CLASSIFY / "program.py"),
            execution="inline",
            metric_lm="openai/gpt-4o-mini",
            simulator=SimulatorConfig(),
            cache=cache,
        ) as adapter:
            result = gepa.optimize(
                seed_candidate=seed,
                trainset=rows,
                adapter=adapter,
                reflection_lm=reflect,
                max_metric_calls=budget,
                reflection_minibatch_size=3,
                logger=_Quiet(Progress()),
                seed=0,
            )
            after = adapter.evaluate(rows, result.best_candidate)
            stats = adapter.statistics()
        runs[cache] = (result, sum(after.scores) / len(after.scores), stats)
    (on, on_score, on_stats), (off, off_score, off_stats) = runs[True], runs[False]
    cache_stats = on_stats.cache
    hits = 0 if cache_stats is None else cache_stats.memory_hits + cache_stats.disk_hits
    print(
        f"1. GEPA example, max_metric_calls={budget}, judge on the simulator (gpt-4o-mini prices)"
    )
    for name, stats, res, score, cached in (
        ("cache on ", on_stats, on, on_score, hits),
        ("cache off", off_stats, off, off_score, 0),
    ):
        usd = stats.models.judge_cost_usd
        print(
            f"   {name}: {stats.examples} metric calls requested, {stats.examples - cached} "
            f"executed, {stats.models.judge_calls} judge calls, ${usd:.6f} paid; "
            f"{len(res.candidates)} candidates, final score {score:.3f}"
        )
    on_usd, off_usd = on_stats.models.judge_cost_usd, off_stats.models.judge_cost_usd
    assert on_usd is not None and off_usd is not None
    print(
        f"   executed metric calls on/off: {(on_stats.examples - hits) / off_stats.examples:.3f}; "
        f"dollars on/off: {on_usd / off_usd:.3f} (saved ${off_usd - on_usd:.6f}); "
        f"same final score: {on_score == off_score and on.best_candidate == off.best_candidate}"
    )


class _Quiet:
    """GEPA's logger, silenced: the figures are printed at the end."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def log(self, message: str) -> None:
        pass


def _results(examples: list[Example]) -> list[Result]:
    obs = Observation(
        duration_ms=1.5, cost_usd=0.0001, input_tokens=20, output_tokens=5, llm_calls=1
    )
    return [
        Result(ex.id, 1.0, {"exact": 1.0}, "Correct.", None, obs, Usage(), 0.01, "billing")
        for ex in examples
    ]


async def bench_lookups(folder: Path, smoke: bool) -> None:
    n, chunk = (5_000, 1000) if smoke else (200_000, 1000)
    metric = folder / "exact.py"
    metric.write_text(EXACT)
    keys = KeyMaker(load_metric(metric), None, Models())
    examples = [
        Example(
            id=f"e{i}", input={"message": f"message {i}", "n": i}, expected={"label": "billing"}
        )
        for i in range(n)
    ]
    chunks = [examples[i : i + chunk] for i in range(0, n, chunk)]
    artifact = "refund -> billing\n" * 20
    print(f"2. lookups of {n:,} stored results, chunks of {chunk}")
    for tier, directory in (("memory", None), ("disk", folder / "lookups")):
        async with ResultCache(keys, directory=directory) as cache:
            for part in chunks:
                found = await cache.lookup(artifact, part)
                cache.store(found, _results(found.misses))
            if directory is None:
                rate = await _lookup_rate(cache, artifact, chunks, n)
        if directory is not None:  # a fresh cache: an empty memory tier, every hit a SELECT
            async with ResultCache(keys, directory=directory) as cache:
                rate = await _lookup_rate(cache, artifact, chunks, n)
                assert cache.statistics().disk_hits == n
        target = 100_000 if tier == "memory" else 10_000
        print(
            f"   {tier:<6}: {rate:>10,.0f} lookups/s (target >= {target:,}: {rate / target:.1f}x)"
        )


async def _lookup_rate(
    cache: ResultCache, artifact: str, chunks: list[list[Example]], n: int
) -> float:
    started = time.perf_counter()
    hits = 0
    for part in chunks:
        found = await cache.lookup(artifact, part)
        hits += found.hit_count
    elapsed = time.perf_counter() - started
    assert hits == n, (hits, n)
    return n / elapsed


async def _cold_run(
    metric: Path, program: Path | None, rows: list[Any], cache: Path | None, **options: Any
) -> float:
    async with Evaluator(metric, program, cache=cache, **options) as ev:
        started = time.perf_counter()
        results = await ev.evaluate_many("Answer briefly.", rows)
        elapsed = time.perf_counter() - started
    assert all(r.ok and not r.cached for r in results)
    return elapsed


async def bench_cold(folder: Path, smoke: bool) -> None:
    metric = folder / "exact.py"
    metric.write_text(EXACT)
    program = folder / "llm_program.py"
    program.write_text(LLM_PROGRAM)
    n_model, n_cpu = (100, 5_000) if smoke else (2000, 200_000)
    turns = 1 if smoke else 5
    print(f"3. a cold run, disk cache on vs off (interleaved, best of {turns} each)")
    async with Simulator(SimulatorConfig(latency_ms=20)) as sim:
        models = Models(
            program=ModelConfig(model="gpt-4o-mini", base_url=sim.base_url, api_key_env=None)
        )
        rows = [
            {"id": i, "input": {"q": f"question {i}"}, "expected": {"label": "x"}}
            for i in range(n_model)
        ]
        await _compare(
            "model-bound program (20 ms) + exact match",
            n_model,
            lambda cache: _cold_run(metric, program, rows, cache, models=models),
            folder,
            turns,
        )
    cpu_rows = [
        {"id": i, "input": {"n": i}, "expected": {"label": "a"}, "output": "a"}
        for i in range(n_cpu)
    ]
    print("      target <= 1.05 for the model-bound run; the next line has no target")
    await _compare(
        "exact match alone (score-only, inline)",
        n_cpu,
        lambda cache: _cold_run(metric, None, cpu_rows, cache, execution="inline"),
        folder,
        turns,
    )


async def _compare(name: str, n: int, run: Any, folder: Path, turns: int) -> None:
    off, on = [], []
    for turn in range(turns):
        off.append(await run(None))
        on.append(await run(folder / f"cold-{name[:5]}-{turn}"))  # a new directory: cold
    best_off, best_on = min(off), min(on)
    print(
        f"   {name}: {n:,} examples, off {best_off:.3f} s, on {best_on:.3f} s, "
        f"on/off {best_on / best_off:.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes, for CI")
    parser.add_argument(
        "--only", metavar="SECTIONS", help="comma-separated sections: gepa, lookups, cold"
    )
    args = parser.parse_args(argv)
    sections = ("gepa", "lookups", "cold")
    names = list(sections) if args.only is None else [s.strip() for s in args.only.split(",")]
    unknown = [n for n in names if n not in sections]
    if unknown:
        parser.error(
            f"--only: no section {', '.join(unknown)}; the sections: {', '.join(sections)}"
        )
    warnings.simplefilter("error")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "gepa" in names:
            bench_gepa(folder, args.smoke)
        if "lookups" in names:
            asyncio.run(bench_lookups(folder, args.smoke))
        if "cold" in names:
            asyncio.run(bench_cold(folder, args.smoke))
    return 0


if __name__ == "__main__":
    sys.exit(main())
