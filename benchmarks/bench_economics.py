"""Spending less per decision (issue 28): one section per promise, figures from one run.

    python benchmarks/bench_economics.py                 # every section, full sizes
    python benchmarks/bench_economics.py --only dedup    # one section (comma-separated)
    python benchmarks/bench_economics.py --smoke         # CI: small sizes, a few seconds

Sections (one function each, ``bench_<name>``):

- **dedup**: one payment per identical call. Four ``evaluate_many`` at once on one
  Evaluator (memory cache) over the same examples and artifact, then two
  ``skynet-eval run --cache DIR`` processes started together on one cache directory,
  each against one simulator (program and judge calls over HTTP, 100 ms each). Goal:
  the server's requests equal the distinct keys (two calls per example), printed as
  requests / (distinct keys x 2): 1.00 is the goal, 4.00 (or 2.00) is paying for each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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

from evaluator._models import Models  # noqa: E402
from evaluator._pipeline import Evaluator  # noqa: E402
from llm_client import ModelConfig, Simulator, SimulatorConfig  # noqa: E402

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


def _simulator() -> Simulator:
    return Simulator(SimulatorConfig(latency_ms=100, jitter_ms=20))


def _models(sim: Simulator) -> Models:
    def config(name: str) -> ModelConfig:
        return ModelConfig(model=name, base_url=sim.base_url, api_key_env=None)

    return Models(program=config("sim-program"), metric=config("sim-judge"))


async def bench_dedup(folder: Path, smoke: bool) -> None:
    n = 20 if smoke else 200
    program = folder / "program.py"
    metric = folder / "judge.py"
    program.write_text(textwrap.dedent(PROGRAM))
    metric.write_text(textwrap.dedent(JUDGE))
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


SECTIONS: dict[str, Callable[[Path, bool], Awaitable[None]]] = {"dedup": bench_dedup}


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
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            folder = Path(tmp) / name
            folder.mkdir()
            asyncio.run(SECTIONS[name](folder, args.smoke))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
