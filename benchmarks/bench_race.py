"""The race between candidates (issue 28, item 2): the right winner, for how many calls.

    python benchmarks/bench_race.py            # 20 seeds of 1,000 examples
    python benchmarks/bench_race.py --smoke    # CI: 3 seeds of 300 examples

8 candidates whose true pass rates are known: 0.70 (the best, by 0.05), 0.65, 0.60,
0.60, 0.55, 0.55, 0.50, 0.50. The program passes an example when the example's
difficulty (uniform, the same for every candidate: a paired design, as real examples
are) is below the candidate's threshold, and its verdict is flipped with probability
0.05 (set per candidate and example), the threshold chosen so that the pass rate is
exactly the candidate's. The metric scores the verdict 1 or 0 (inline, no model). Each
seed draws new difficulties and flips and runs ``Evaluator.race`` at 95%.

Goals: the correct winner, or a reported tie that includes it, in at least 95% of the
seeds; at most 30% of the calls (evaluations: a program and a metric call each) of
scoring every candidate on every example.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluator import Evaluator  # noqa: E402

RATES = (0.70, 0.65, 0.60, 0.60, 0.55, 0.55, 0.50, 0.50)
NOISE = 0.05

PROGRAM = """
import hashlib
EXECUTION = "inline"

def run(artifact, input):
    key = f"{artifact['name']}:{input['n']}".encode()
    draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
    return (input["u"] < artifact["threshold"]) != (draw < artifact["noise"])
"""
METRIC = """
EXECUTION = "inline"

def score(input, output, expected=None):
    return (1.0 if output else 0.0), {"feedback": "pass" if output else "fail"}
"""


def artifacts(seed: int) -> list[dict[str, object]]:
    """The candidates of one seed: pass rate p = t (1 - e) + (1 - t) e for threshold t."""
    return [
        {"name": f"s{seed}c{i}", "threshold": (p - NOISE) / (1 - 2 * NOISE), "noise": NOISE}
        for i, p in enumerate(RATES)
    ]


def examples(n: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    return [{"id": f"e{i}", "input": {"n": i, "u": rng.random()}} for i in range(n)]


async def race(folder: Path, seeds: int, n: int) -> None:
    program, metric = folder / "program.py", folder / "metric.py"
    right = ties = 0
    shares: list[float] = []
    started = time.perf_counter()
    async with Evaluator(metric, program) as ev:
        for seed in range(seeds):
            result = await ev.race(artifacts(seed), examples(n, seed), seed=seed)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="3 seeds of 300 examples")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "program.py").write_text(PROGRAM)
        (folder / "metric.py").write_text(METRIC)
        asyncio.run(race(folder, 3, 300) if args.smoke else race(folder, 20, 1000))


if __name__ == "__main__":
    main()
