"""Fault-injection benchmark: 10,000 examples with about 20 % faults of every kind.

    python benchmarks/bench_faults.py            # 10,000 examples (BENCH_PLAN)
    python benchmarks/bench_faults.py --smoke    # CI: 200 examples (CI_PLAN), a few seconds

The program and the metric run in worker processes; the metric raises, hangs past its
timeout, calls os._exit, segfaults, exceeds the worker memory limit, returns each invalid
shape of the contract and prints; the program raises and hangs; the judge (skynet.llm to
simulators on 127.0.0.1) answers 429, 500, 503, times out, sends a malformed body and
drops the connection. The fault of each example is a function of its id (see
``tests/faults/faultmix.py``), so every result is checked against its expected kind.

Prints: wall time of the fault-free and the faulty run, results, counts by kind (expected
and got), anything lost or mislabelled, and what was left behind. Exit 1 on any problem.
And the two figures of issue 15: the judge calls paid (requests the simulators received)
against the calls needed (one per judged example of each run: a call is never paid twice,
even when its example runs again after a worker crash), and the faulty run's time over
the fault-free run's, as measured and less what its hangs must wait (hangs x timeout /
workers: what they would cost if each held a worker's slot for its timeout; with
stand-ins they do not, so that figure can fall below zero).
Then worker replacement alone: a worker that crashes again and again, each crash followed
by one call, with replacements forked by the fork server against fresh interpreters.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "faults"))

from faultmix import (  # noqa: E402
    BENCH_PLAN,
    CI_PLAN,
    MEMORY_LIMIT_MB,
    JudgeFaults,
    Leaks,
    check_results,
    expected_counts,
    make_rows,
    schedule,
    write_files,
)

from evaluator._call._calls import ScoreCall  # noqa: E402
from evaluator._call._loader import load_function  # noqa: E402
from evaluator._call._results import ERROR_KINDS, Result  # noqa: E402
from evaluator._executors._process._executor import ProcessExecutor  # noqa: E402
from evaluator._pipeline import Evaluator  # noqa: E402
from evaluator._report import ReportBuilder  # noqa: E402


async def bench(n: int, smoke: bool, workers: int, timeout: float) -> int:
    plan = CI_PLAN if smoke else BENCH_PLAN
    rows = make_rows(n, schedule(plan))
    leaks = Leaks().before()
    with TemporaryDirectory() as folder:
        program, metric = write_files(Path(folder))
        async with (
            JudgeFaults() as judge,
            Evaluator(
                metric,
                program,
                timeout=timeout,
                program_timeout=timeout,
                workers=workers,
                execution="process",
                program_execution="process",
                models=judge.models(),
                memory_limit_mb=MEMORY_LIMIT_MB,
            ) as ev,
        ):
            started = time.perf_counter()
            clean = await ev.evaluate_many({"faults": False, "hang_s": 60.0}, rows)
            clean_s = time.perf_counter() - started
            results: list[Result] = []
            builder = ReportBuilder(failure_score=ev.failure_score)
            started = time.perf_counter()
            async with ev.stream({"faults": True, "hang_s": 60.0}, rows) as stream:
                async for batch in stream.batches():
                    results += batch
                    builder.add_many(batch)
            faulty_s = time.perf_counter() - started
            stats = ev.statistics()
        report = builder.build()
        problems = check_results(rows, results, clean)
        left = await leaks.after()

    want = expected_counts(rows)
    judged = Counter(r["input"]["fault"] for r in rows)
    needed = judged["ok_judge"] * 2 + sum(c for f, c in judged.items() if f.startswith("j_"))
    paid = sum(judge.routed.values())
    hangs = want.get("metric_timeout", 0) + want.get("program_timeout", 0)
    waits = hangs * timeout / workers
    ratio = (faulty_s - waits) / clean_s
    got = Counter(r.error.kind if r.error else "ok" for r in results)
    print(f"examples            {n:,}  (plan {'CI' if smoke else 'BENCH'}, {workers} workers, "
          f"timeout {timeout:g} s, memory limit {MEMORY_LIMIT_MB} MB)")  # fmt: skip
    print(f"fault-free run      {clean_s:8.2f} s  ({n / clean_s:,.0f} examples/s)")
    print(f"faulty run          {faulty_s:8.2f} s  ({n / faulty_s:,.0f} examples/s)")
    print(f"results             {len(results):,} for {n:,} examples "
          f"({len({r.example_id for r in results}):,} distinct ids)")  # fmt: skip
    print("counts by kind      expected    got    report")
    for kind in ("ok", *ERROR_KINDS):
        if want.get(kind) or got.get(kind):
            in_report = report.ok if kind == "ok" else report.errors.get(kind, 0)
            print(f"  {kind:17} {want.get(kind, 0):8,} {got.get(kind, 0):6,} {in_report:9,}")
    m, p = stats.metric, stats.program
    print(f"metric workers      crashes {m.crashes}, timeouts {m.timeouts}, restarts "
          f"{m.restarts} ({m.workers_forked} forked), stand-ins {m.stand_ins_started}, "
          f"requeued {m.calls_requeued}, "
          f"model calls replayed {m.model_calls_replayed}")  # fmt: skip
    print(f"program workers     crashes {p.crashes}, timeouts {p.timeouts}, restarts "
          f"{p.restarts} ({p.workers_forked} forked), stand-ins {p.stand_ins_started}")  # fmt: skip
    print(f"fork servers        metric: {m.fork_server}; program: {p.fork_server}")
    print(f"judge calls         {stats.models.judge_calls:,} ok, {stats.models.failed_calls:,} "
          f"failed; routed {dict(judge.routed)}")  # fmt: skip
    print(f"judge calls paid    {paid:,} for {needed:,} needed "
          f"(ratio {paid / needed if needed else float('nan'):.3f})")  # fmt: skip
    print(f"faulty/fault-free   {faulty_s:.2f} s / {clean_s:.2f} s = {faulty_s / clean_s:.2f}x "
          f"as measured; less what its hangs must wait ({hangs} hangs x {timeout:g} s / "
          f"{workers} workers): {ratio:.2f}x")  # fmt: skip
    if ratio < 0:
        print("                    (below zero: the hangs did not wait in a worker's slot; "
              "stand-ins took the work queued behind them)")  # fmt: skip
    print(f"lost or mislabelled {len(problems)}")
    for line in problems[:20]:
        print(f"  {line}")
    print(f"left behind         {left or 'nothing'}")
    return 1 if problems or left or report.n != n else 0


CRASHER = """
import os

def score(input, output, expected=None):
    if input["crash"]:
        os._exit(3)
    return 1.0, {"feedback": "ok"}
"""


async def replacements(crashes: int, *, fork: bool) -> tuple[float, int]:
    """Seconds per crash (the crash, then a call in its replacement), workers forked."""
    with TemporaryDirectory() as folder:
        path = Path(folder) / "crasher.py"
        path.write_text(CRASHER)
        fn = load_function(path, "score")
        async with ProcessExecutor(fn, "score", timeout=10, workers=2, fork_server=fork) as ex:
            await ex.submit([ScoreCall(0, 0, {"crash": False}, None)])
            for _ in range(2000):  # the spare (and the fork server) ready: at most 20 s
                s = ex.statistics()
                if s.spare_ready and (not fork or s.fork_server not in (None, "starting")):
                    break
                await asyncio.sleep(0.01)
            started = time.perf_counter()
            for i in range(1, crashes + 1):
                calls = [ScoreCall(2 * i, i, {"crash": True}, None)]
                calls.append(ScoreCall(2 * i + 1, i, {"crash": False}, None))
                outcomes = await ex.submit(calls)
                assert [o.error.kind if o.error else "ok" for o in outcomes] == [
                    "worker_crash",
                    "ok",
                ]
            elapsed = (time.perf_counter() - started) / crashes
            return elapsed, ex.statistics().workers_forked


async def bench_replacements(crashes: int) -> None:
    spawned, _ = await replacements(crashes, fork=False)
    forked, n_forked = await replacements(crashes, fork=True)
    print(f"replacements        {crashes} crashes in a row: {spawned * 1e3:.1f} ms each with "
          f"fresh interpreters, {forked * 1e3:.1f} ms forked ({n_forked} forked): "
          f"{spawned / forked:.1f}x faster")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="200 examples, for CI")
    parser.add_argument("-n", type=int, help="examples (default 10,000; 200 with --smoke)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes per stage")
    parser.add_argument("--timeout", type=float, default=1.0, help="metric/program timeout, s")
    args = parser.parse_args()
    n = args.n or (200 if args.smoke else 10_000)
    code = asyncio.run(bench(n, args.smoke, args.workers, args.timeout))
    asyncio.run(bench_replacements(5 if args.smoke else 40))
    return code


if __name__ == "__main__":
    sys.exit(main())
