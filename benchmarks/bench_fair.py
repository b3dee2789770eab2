"""Fair shares: two tenants on one Evaluator and one 600 RPM model budget.

    python benchmarks/bench_fair.py            # 600 RPM, a 10,000-example job, 60 s window
    python benchmarks/bench_fair.py --smoke    # CI: 3000 RPM, 2,000 examples, 3 s window

A judge metric (``skynet.llm``, run in threads) scores every example with one model call to
the simulator on 127.0.0.1, paced by the model's governor at ``--rpm``. One run measures:

1. **alone**: a 30-example job (tenant ``small``) alone on the Evaluator;
2. **fair**: the same job while a 10,000-example job (tenant ``batch``) saturates the
   budget: its time over its time alone (the issue's target: within 2x);
3. **one tenant**: the same job again with ``tenant="batch"``, i.e. in line behind the
   large job's backlog as before fair shares (FIFO), for contrast;
4. **weights**: a second large job (tenant ``heavy``, weight 3) joins ``batch`` (weight 1);
   over the window, each tenant's share of the results completed against its weight's
   share (the issue's target: within 5 %);
5. **cancellation**: both large jobs are cancelled; what they sent against what they
   were given, and what is left in the governor and the Evaluator (must be nothing).

Ratios are from this one run; the wall times they come from are printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluator import Evaluator, Example, Models  # noqa: E402
from llm_client import ModelConfig, RateGovernor, Simulator, SimulatorConfig  # noqa: E402
from llm_client._governor import governor_for  # noqa: E402

JUDGE = ROOT / "examples" / "metrics" / "judge.py"


def examples(n: int, prefix: str) -> list[Example]:
    return [
        Example(id=f"{prefix}{i}", input={"question": f"q{i}"}, expected=None, output=str(i))
        for i in range(n)
    ]


def governor(config: ModelConfig) -> RateGovernor:
    return governor_for(
        base_url=config.base_url,
        api_key=None,
        model=config.model,
        rpm=config.rpm,
        tpm=config.tpm,
        max_concurrency=config.max_concurrency,
        margin=config.rate_margin,
    )


async def until(predicate: Callable[[], bool], timeout: float = 120.0) -> None:
    async with asyncio.timeout(timeout):
        for _ in iter(int, 1):
            if predicate():
                return
            await asyncio.sleep(0.01)


class Job:
    """A large job streamed in a task: when each of its results arrived."""

    def __init__(self, ev: Evaluator, n: int, tenant: str, weight: float) -> None:
        self.arrivals: list[float] = []
        self.errors = 0
        self.task = asyncio.create_task(self._run(ev, n, tenant, weight))

    async def _run(self, ev: Evaluator, n: int, tenant: str, weight: float) -> None:
        async for result in ev.stream(None, examples(n, tenant), tenant=tenant, weight=weight):
            self.arrivals.append(time.perf_counter())
            self.errors += result.error is not None

    def between(self, start: float, end: float) -> int:
        return sum(1 for t in self.arrivals if start <= t < end)


async def timed_small(ev: Evaluator, n: int, tenant: str, weight: float = 1.0) -> tuple[float, int]:
    started = time.perf_counter()
    results = await ev.evaluate_many(None, examples(n, "s"), tenant=tenant, weight=weight)
    return time.perf_counter() - started, sum(r.error is not None for r in results)


async def bench(rpm: float, small_n: int, large_n: int, window_s: float) -> int:
    problems = 0
    async with Simulator(SimulatorConfig(latency_ms=100)) as sim:
        config = ModelConfig(
            model="judge-1", base_url=sim.base_url, api_key_env=None, rpm=rpm, rate_margin=0.0
        )
        async with Evaluator(JUDGE, models=Models(metric=config)) as ev:
            gov = governor(config)
            alone_s, errors = await timed_small(ev, small_n, "small")
            problems += errors
            batch = Job(ev, large_n, "batch", 1.0)
            await until(lambda: gov.statistics().waiting >= 32)  # the budget is saturated
            fair_s, errors = await timed_small(ev, small_n, "small")
            problems += errors
            weighted_s, errors = await timed_small(ev, small_n, "small", 2.0)
            problems += errors
            fifo_s, errors = await timed_small(ev, small_n, "batch")
            problems += errors
            print(f"{small_n}-example job alone:                   {alone_s:7.2f} s")
            print(
                f"beside a {large_n}-example job, own tenant:    {fair_s:7.2f} s  "
                f"ratio {fair_s / alone_s:.2f}x (target <= 2x; an equal share of a saturated "
                "budget is half of it)"
            )
            print(
                f"beside it, own tenant, weight 2:         {weighted_s:7.2f} s  "
                f"ratio {weighted_s / alone_s:.2f}x"
            )
            print(
                f"beside it, one tenant for both (FIFO):   {fifo_s:7.2f} s  "
                f"ratio {fifo_s / alone_s:.2f}x (for contrast: before fair shares)"
            )

            heavy = Job(ev, large_n, "heavy", 3.0)
            await until(lambda: len(heavy.arrivals) >= 20)  # both backlogged
            start = time.perf_counter()
            await asyncio.sleep(window_s)
            end = time.perf_counter()
            counts = {"batch": batch.between(start, end), "heavy": heavy.between(start, end)}
            total = sum(counts.values())
            print(f"weights over {window_s:g} s: {total} results, {total / window_s:.2f}/s")
            for name, weight in (("batch", 1.0), ("heavy", 3.0)):
                share = counts[name] / total if total else float("nan")
                expected = weight / 4.0
                print(
                    f"  {name:5} weight {weight:g}: {counts[name]:5} results, share "
                    f"{share:.3f} (weight's share {expected:.3f}), ratio {share / expected:.3f} "
                    f"(target within 5 %)"
                )

            problems += await cancel_both(ev, sim, gov, batch, heavy, large_n)
            print(
                f"peak requests in any 1 s window: {sim.peak_requests(1.0)} "
                f"(budget {rpm / 60:g}/s + a burst of 2)"
            )
    return problems


async def cancel_both(
    ev: Evaluator, sim: Simulator, gov: RateGovernor, batch: Job, heavy: Job, large_n: int
) -> int:
    """Cancel both large jobs; print what they sent and what is left. Problems found."""
    queued = gov.statistics().waiting
    sent_before = sim.statistics().requests
    started = time.perf_counter()
    for job in (batch, heavy):
        job.task.cancel()
    await asyncio.gather(batch.task, heavy.task, return_exceptions=True)
    returned_s = time.perf_counter() - started
    await until(lambda: gov.statistics().in_flight == 0 and gov.statistics().waiting == 0, 30)
    drained_s = time.perf_counter() - started
    stats = gov.statistics()
    metric = ev.statistics().metric
    done = len(batch.arrivals) + len(heavy.arrivals)
    left = (stats.in_flight, stats.waiting, stats.tokens_reserved, ev.statistics().in_flight)
    print(
        f"cancelled the two large jobs: {done} of their {2 * large_n} examples done; "
        f"{queued} calls were queued at the governor, {sim.statistics().requests - sent_before} "
        f"requests reached the simulator after the cancel (those already admitted); "
        f"cancel returned in {returned_s * 1000:.1f} ms, governor drained in "
        f"{drained_s * 1000:.1f} ms; running thread calls stopped: "
        f"{getattr(metric, 'cancelled_calls', None)}; left in flight / queued / tokens "
        f"reserved / examples: {left}"
    )
    return batch.errors + heavy.errors + sum(left)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="CI: small, a few seconds")
    args: Any = parser.parse_args(argv)
    if args.smoke:
        problems = asyncio.run(bench(rpm=3000, small_n=30, large_n=2000, window_s=3.0))
    else:
        problems = asyncio.run(bench(rpm=600, small_n=30, large_n=10_000, window_s=60.0))
    if problems:
        print(f"PROBLEMS: {problems} (errors or state left behind)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
