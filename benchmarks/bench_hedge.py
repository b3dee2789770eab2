"""Hedged judge calls against a heavy tail: the slowest of an optimizer's 3-example minibatches.

    python benchmarks/bench_hedge.py            # 8 loops x 100 minibatches of 3 examples
    python benchmarks/bench_hedge.py --smoke    # CI: 4 loops x 25 minibatches

The judge metric (``skynet.llm``, one model call per example) scores minibatches of three
examples through ``Evaluator.evaluate_many``, as an optimizer does between proposals:
``--loops`` optimizer loops at once, each evaluating its minibatches one after the other.
The simulator on 127.0.0.1 answers in 40 ms plus up to 10 ms of jitter, and slows a seeded
5% of its replies 10x (``tail_share=0.05, tail_factor=10``), so one minibatch in seven
waits for a slow call. Two runs of the same work, each on its own Evaluator and simulator
(same seed): unhedged, and with ``hedge=Q`` on the metric model (a second copy past the
Q quantile of the model's recent latencies, at most 10% extra calls, within the rate
budget), for Q = 0.95 and 0.9. With 5% of calls in the tail the p95 sits at the tail's
edge; it holds in the body because the ring keeps replies' latencies, and a hedge that
wins puts its own fast one there instead of the slow copy's.

Each run first evaluates one minibatch per loop, untimed (warm-up: the latency ring needs 20
samples before the first hedge; the unhedged run gets the same). Then, from this one run:
the p50/p99 of a minibatch's wall time (hedged over unhedged; target p99 <= 0.5), the extra
calls (hedges sent over calls made; target <= 10%), the hedges won, and the extra spend:
measured for a losing copy that replied, unmeasured (with the reason) for one cancelled in
flight, since a provider may bill a cancelled request.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluator import Evaluator, Example, Models  # noqa: E402
from evaluator._stats import percentile  # noqa: E402
from llm_client import Hedge, HedgeStatistics, ModelConfig, Simulator, SimulatorConfig  # noqa: E402

JUDGE = ROOT / "examples" / "metrics" / "judge.py"


def minibatch(loop: int, step: int) -> list[Example]:
    return [
        Example(id=f"l{loop}s{step}e{i}", input={"question": f"q{loop}.{step}.{i}"}, output=str(i))
        for i in range(3)
    ]


async def run(hedge: Hedge | None, loops: int, steps: int) -> dict[str, object]:
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
        async with Evaluator(JUDGE, models=Models(metric=config)) as ev:
            times: list[float] = []
            errors = 0

            async def optimizer(loop: int, timed: bool, first: int, last: int) -> None:
                nonlocal errors
                for step in range(first, last):
                    started = time.perf_counter()
                    results = await ev.evaluate_many(None, minibatch(loop, step))
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
            (budget,) = stats.model_budgets
            return {
                "times": times,
                "errors": errors,
                "requests": sim.statistics().requests - served_before,
                "hedging": budget.hedging,
                "row": budget.describe(),
                "cost": stats.models.judge_cost_usd,
            }


def report(name: str, plain: dict[str, object], hedged: dict[str, object]) -> int:
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


async def bench(loops: int, steps: int) -> int:
    plain = await run(None, loops, steps)
    print(
        f"{len(plain['times'])} timed minibatches of 3 examples per run "  # type: ignore[arg-type]
        f"({loops} loops x {steps}), 5% of replies slowed 10x"
    )
    problems = int(plain["errors"])  # type: ignore[call-overload]
    for q in (0.95, 0.9):
        hedged = await run(Hedge(quantile=q, max_extra=0.1), loops, steps)
        problems += report(f"hedge={q:g} (max_extra=0.1)", plain, hedged)
    print(f"errors: {problems}")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CI: small, a few seconds")
    parser.add_argument("--loops", type=int, default=8, help="optimizer loops at once")
    parser.add_argument("--steps", type=int, default=100, help="minibatches per loop")
    args = parser.parse_args()
    if args.smoke:
        args.loops, args.steps = 4, 25
    return asyncio.run(bench(args.loops, args.steps))


if __name__ == "__main__":
    sys.exit(main())
