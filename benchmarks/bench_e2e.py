"""Model-bound work end to end: the CLI and the library against a plain client, one run.

    python benchmarks/bench_e2e.py            # full sizes, 300 ms latency
    python benchmarks/bench_e2e.py --smoke    # CI: small sizes, 50 ms latency, seconds

Every measurement has a simulator of its own (``skynet-eval simulator`` in a subprocess,
so that it has a core of its own and its peak of requests in flight is this
measurement's), at a fixed latency and no rate limit.

1. The page's judge metric (``examples/metrics/judge.py``) through ``skynet-eval run``
   in a subprocess, default settings, score-only: the report's throughput against a
   plain client (64 threads, each a keep-alive ``http.client`` connection, sending the
   same judge requests) on the same kind of server. Target >= 0.85. Beside it, the
   most requests the simulator saw in flight at once (default budget: 64).
2. An optimizer's full-valset evaluation through the library: 4 candidates at once
   (``asyncio.gather`` of 4 ``evaluate_many`` calls on one Evaluator), 200 examples
   each, a cheap program (worker processes) and the judge metric (threads): the rate
   of judged examples against the latency bound, 64 in flight / latency. Target >= 0.85.
3. A model-bound program (``skynet.llm``, threads) and a CPU-bound metric (about 2 ms of
   pure Python, worker processes): the rate against the latency bound, and each stage's
   calls in flight (executor statistics sampled every 5 ms: mean and peak), against its
   executor's parallelism.

Three more measure the in-flight limit (``--only slow-judge,no-limit,overload``; not in
the default run, about 30 s each), the judge streamed through the library, score-only:

5. slow-judge: 2 s latency, a server allowing 3,000 RPM over any 10 s window and saying
   so in its headers, no limit configured: the steady rate (middle 80% of the results)
   against the limit, target >= 0.95, where 64 in flight reach at most 0.64.
6. no-limit: 300 ms latency, no limit anywhere, the server slowing down past 256 in
   flight: the rate against ``dspy.Evaluate(num_threads=64)`` (``bench_llm_dspy.py``) on
   a server of its own, target >= 1.5x.
7. overload: 300 ms latency, the server slowing down past 96 in flight: the in-flight
   limit over the second half (target: its median <= 96) and the 429 share (< 1%).

Each prints how the limit moved (the report's model budget line) and its last changes.

Figures are ratios from one run; the load average is printed first, since the machine
may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_llm import run, run_dspy, sim_stats, simulator  # noqa: E402

from evaluator import Evaluator, Example, Models  # noqa: E402
from llm_client import ModelConfig  # noqa: E402

JUDGE = ROOT / "examples" / "metrics" / "judge.py"
INSTRUCTION = "Answer PASS or FAIL, then give one sentence of reasons."

PROGRAM = """
def run(artifact, input):
    return f"{artifact} {input['question'].split()[-1]}"
"""

MODEL_PROGRAM = """
from skynet import llm

def run(artifact, input):
    return llm(artifact, input=input["question"])
"""

CPU_METRIC = """
LOOPS = {loops}

def score(input, output, expected=None):
    total = 0
    for i in range(LOOPS):
        total += i * i % 7
    return (1.0 if output else 0.0), {{"feedback": "ok" if output else "empty"}}
"""


def rows(n: int, offset: int = 0) -> Iterator[dict[str, Any]]:
    for i in range(offset, offset + n):
        yield {
            "id": i,
            "input": {"question": f"What is {i} + {i}?"},
            "output": str(2 * i),
            "expected": {"answer": str(2 * i)},
        }


def judge_body(row: dict[str, Any]) -> bytes:
    """The request the judge metric sends for ``row`` (instruction as system message)."""
    user = f"Question: {row['input']['question']}\nAnswer: {row['output']}"
    return json.dumps(
        {
            "model": "judge-1",
            "messages": [
                {"role": "system", "content": INSTRUCTION},
                {"role": "user", "content": user},
            ],
        }
    ).encode()


def plain_client(base_url: str, n: int, threads: int = 64) -> float:
    """``threads`` threads, each with a keep-alive connection, sending ``n`` judge
    requests between them; requests per second."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/") + "/chat/completions"
    bodies = [judge_body(row) for row in rows(n)]
    claim = iter(range(n))
    lock = threading.Lock()
    failures: list[str] = []

    def worker() -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        try:
            while True:
                with lock:
                    i = next(claim, None)
                if i is None:
                    return
                conn.request("POST", path, bodies[i], headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    failures.append(str(response.status))
        finally:
            conn.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    started = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - started
    assert not failures, failures[:5]
    return n / elapsed


def cli_run(base_url: str, data: Path) -> dict[str, Any]:
    """``skynet-eval run`` with the judge metric and default settings; its JSON report."""
    done = subprocess.run(
        [
            sys.executable, "-m", "evaluator", "run", "--metric", str(JUDGE),
            "--data", str(data), "--metric-model", "judge-1", "--metric-base-url", base_url,
            "--api-key-env", "none", "--json",
        ],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"skynet-eval run failed:\n{done.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def bench_cli(tmp: Path, n: int, latency_ms: float) -> None:
    bound = 64 / (latency_ms / 1000)
    print(
        f"\n1. judge metric through `skynet-eval run`, defaults, {n} examples, "
        f"{latency_ms:g} ms latency (bound at 64 in flight: {bound:.0f}/s)"
    )
    data = tmp / "judge.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows(n)))
    with simulator("--latency-ms", str(latency_ms)) as url:
        plain_client(url, 64)  # warm: connections, the simulator's first replies
        plain = plain_client(url, n)
    with simulator("--latency-ms", str(latency_ms)) as url:
        report = cli_run(url, data)
        peak = sim_stats(url)["peak_in_flight"]
    cli = report["throughput"]
    executor = next(s for s in report["executors"] if s["stage"] == "score")
    assert report["n"] == report["ok"] == n, report["errors"]
    print(f"   plain client (64 threads)  {plain:7.1f} examples/s  {plain / bound:.3f} of bound")
    print(
        f"   skynet-eval run            {cli:7.1f} examples/s  {cli / bound:.3f} of bound, "
        f"peak in flight at the server {peak}, metric executor {executor['kind']} "
        f"x{executor['parallelism']}"
    )
    print(f"   skynet-eval run / plain client: {cli / plain:.3f}  (target >= 0.85)")


def _examples(n: int, offset: int) -> list[Example]:
    return [
        Example(id=r["id"], input=r["input"], expected=r["expected"], output=r["output"])
        for r in rows(n, offset)
    ]


async def _optimizer(url: str, program: Path, per: int, candidates: int) -> dict[str, Any]:
    judge = ModelConfig(model="judge-1", base_url=url, api_key_env=None)
    async with Evaluator(JUDGE, program, models=Models(metric=judge)) as ev:
        await ev.evaluate_many("warm", _examples(8, 10**6))  # workers up, connections open
        batches = [_examples(per, c * per) for c in range(candidates)]
        started = time.perf_counter()
        results = await asyncio.gather(
            *(ev.evaluate_many(f"candidate {c}", batch) for c, batch in enumerate(batches))
        )
        elapsed = time.perf_counter() - started
        stats = ev.statistics()
    judged = sum(1 for batch in results for r in batch if r.error is None)
    assert judged == per * candidates, [r.error for b in results for r in b if r.error][:3]
    return {"rate": judged / elapsed, "stats": stats}


def bench_optimizer(tmp: Path, per: int, candidates: int, latency_ms: float) -> None:
    bound = 64 / (latency_ms / 1000)
    print(
        f"\n2. optimizer full-valset: {candidates} candidates at once x {per} judged examples, "
        f"evaluate_many, {latency_ms:g} ms latency (bound {bound:.0f}/s)"
    )
    program = tmp / "program.py"
    program.write_text(textwrap.dedent(PROGRAM))
    with simulator("--latency-ms", str(latency_ms)) as url:
        out = run(_optimizer(url, program, per, candidates))
        peak = sim_stats(url)["peak_in_flight"]
    rate = out["rate"]
    described = "; ".join(s.describe() for s in out["stats"].executors)
    print(f"   evaluate_many x{candidates}  {rate:7.1f} examples/s, peak in flight {peak}")
    print(f"   stages: {described}")
    print(f"   achieved / latency bound: {rate / bound:.3f}  (target >= 0.85)")


def calibrate(target_ms: float) -> int:
    """The loop count of the CPU metric that takes about ``target_ms`` here."""
    namespace: dict[str, Any] = {}
    exec(textwrap.dedent(CPU_METRIC.format(loops=0)), namespace)
    n = 20_000
    while True:
        source = textwrap.dedent(CPU_METRIC.format(loops=n))
        exec(source, namespace)
        started = time.perf_counter()
        namespace["score"]({}, "x")
        elapsed = (time.perf_counter() - started) * 1000
        if elapsed > 10:
            return int(n * target_ms / elapsed)
        n *= 2


async def _two_stages(url: str, program: Path, metric: Path, n: int) -> dict[str, Any]:
    """Each stage's calls in flight, sampled, while ``n`` examples go through both."""
    models = Models(
        program=ModelConfig(model="program-1", base_url=url, api_key_env=None),
        metric=ModelConfig(model="judge-1", base_url=url, api_key_env=None),
    )
    samples: dict[str, list[int]] = {"run": [], "score": []}
    async with Evaluator(metric, program, models=models) as ev:
        await ev.evaluate_many("Answer briefly.", _examples(8, 10**6))

        async def sample() -> None:
            while True:
                stats = ev.statistics()
                samples["run"].append(stats.program.busy)
                samples["score"].append(stats.metric.busy)
                await asyncio.sleep(0.005)

        sampler = asyncio.create_task(sample())
        started = time.perf_counter()
        results = await ev.evaluate_many("Answer briefly.", _examples(n, 0))
        elapsed = time.perf_counter() - started
        sampler.cancel()
        await asyncio.wait({sampler})
        stats = ev.statistics()
    assert all(r.error is None for r in results), [r.error for r in results if r.error][:3]
    return {"rate": n / elapsed, "samples": samples, "stats": stats}


def bench_mixed(tmp: Path, n: int, latency_ms: float) -> None:
    bound = 64 / (latency_ms / 1000)
    loops = calibrate(2.0)
    print(
        f"\n3. model-bound program + CPU-bound metric (~2 ms), {n} examples, "
        f"{latency_ms:g} ms latency (bound {bound:.0f}/s)"
    )
    program = tmp / "model_program.py"
    program.write_text(textwrap.dedent(MODEL_PROGRAM))
    metric = tmp / "cpu_metric.py"
    metric.write_text(textwrap.dedent(CPU_METRIC.format(loops=loops)))
    _print_stages(latency_ms, program, metric, n)


def _print_stages(latency_ms: float, program: Path, metric: Path, n: int) -> None:
    bound = 64 / (latency_ms / 1000)
    with simulator("--latency-ms", str(latency_ms)) as url:
        out = run(_two_stages(url, program, metric, n))
        peak = sim_stats(url)["peak_in_flight"]
    rate = out["rate"]
    for stage in out["stats"].executors:
        seen = out["samples"][stage.stage]
        steady = seen[len(seen) // 10 : len(seen) - len(seen) // 10] or seen
        mean = sum(steady) / max(1, len(steady))
        print(
            f"   {stage.stage:5s} stage: {stage.describe()}; in flight mean {mean:5.1f} "
            f"(middle 80% of the run), peak {max(seen, default=0)}"
        )
    print(f"   peak in flight at the server {peak}")
    print(f"   achieved / latency bound: {rate / bound:.3f}  ({rate:.1f} examples/s)")


def bench_two_models(tmp: Path, n: int, latency_ms: float) -> None:
    bound = 64 / (latency_ms / 1000)
    print(
        f"\n4. model-bound program + judge metric, a model each (64 in flight each), {n} "
        f"examples, {latency_ms:g} ms latency (bound {bound:.0f}/s, both stages full)"
    )
    program = tmp / "model_program.py"
    program.write_text(textwrap.dedent(MODEL_PROGRAM))
    _print_stages(latency_ms, program, JUDGE, n)


async def _judge_run(url: str, n: int, sample_s: float = 0.05, **model: Any) -> dict[str, Any]:
    """``n`` judged examples streamed through the library (score-only, the page's judge);
    each result's arrival time, and the judge's in-flight limit sampled every
    ``sample_s``."""
    judge = ModelConfig(model="judge-1", base_url=url, api_key_env=None, **model)
    arrivals: list[float] = []
    limits: list[tuple[float, int]] = []
    errors: list[Any] = []
    async with Evaluator(JUDGE, models=Models(metric=judge)) as ev:

        async def sample() -> None:
            while True:
                (budget,) = ev.statistics().model_budgets
                limits.append((time.perf_counter() - started, budget.in_flight_limit or 0))
                await asyncio.sleep(sample_s)

        started = time.perf_counter()
        sampler = asyncio.create_task(sample())
        async for result in ev.stream(None, _examples(n, 0)):
            arrivals.append(time.perf_counter() - started)
            if result.error is not None:
                errors.append(result.error)
        wall = time.perf_counter() - started
        sampler.cancel()
        await asyncio.wait({sampler})
        (budget,) = ev.statistics().model_budgets
    assert not errors, errors[:3]
    arrivals.sort()
    lo, hi = arrivals[len(arrivals) // 10], arrivals[len(arrivals) * 9 // 10]
    steady = (len(arrivals) * 8 // 10) / max(hi - lo, 1e-9)
    return {"rate": n / wall, "steady": steady, "wall": wall, "budget": budget, "limits": limits}


def _print_limit(budget: Any) -> None:
    history = ", ".join(f"{t:.1f}s:{v}" for t, v in budget.in_flight_history[-10:])
    print(f"   model in flight: {budget.describe()}")
    print(f"   in-flight history (last changes, seconds:limit): {history}")


def bench_slow_judge(n: int, latency_ms: float, rpm: float) -> None:
    limit = rpm / 60.0
    fixed = min(1.0, 64 / (latency_ms / 1000) / limit)
    print(
        f"\n5. a slow judge: {latency_ms / 1000:g} s latency, the server allows {rpm:,.0f} RPM "
        f"over any 10 s window and says so in its headers; {n} examples, no limit configured "
        f"(64 in flight reach at most {fixed:.2f} of the limit)"
    )
    sim_args = ("--latency-ms", str(latency_ms), "--rpm", str(rpm), "--window", "10")
    with simulator(*sim_args) as url:
        out = run(_judge_run(url, n))
        seen = sim_stats(url, 10)
    share = seen["rate_limited"] / max(1, seen["requests"])
    print(
        f"   steady rate (middle 80% of results) {out['steady']:.1f}/s = "
        f"{out['steady'] / limit:.3f} of the limit (target >= 0.95); whole run "
        f"{out['rate'] / limit:.3f} (the first and last {latency_ms / 1000:g} s included); "
        f"429 share {share:.4f}; peak in flight at the server {seen['peak_in_flight']}"
    )
    _print_limit(out["budget"])


def bench_no_limit(n: int, n_dspy: int, latency_ms: float, capacity: int) -> None:
    print(
        f"\n6. no limit known: {latency_ms:g} ms judge, the server slows down past {capacity} in "
        f"flight; the library ({n} examples) against dspy.Evaluate(num_threads=64) "
        f"({n_dspy}) on a server of its own"
    )
    sim_args = ("--latency-ms", str(latency_ms), "--capacity", str(capacity))
    with simulator(*sim_args) as url:
        ours = run(_judge_run(url, n))
        seen = sim_stats(url)
    with simulator(*sim_args) as url:
        theirs = run_dspy(url, n_dspy, 64)
    dspy_rate = theirs["ok"] / theirs["wall"]
    print(
        f"   skynet evaluate      {ours['rate']:7.1f} examples/s, peak in flight at the "
        f"server {seen['peak_in_flight']}"
    )
    print(f"   dspy.Evaluate(64)    {dspy_rate:7.1f} examples/s ({theirs['errors']} failed)")
    print(f"   skynet / dspy.Evaluate(64): {ours['rate'] / dspy_rate:.2f}x (target >= 1.5x)")
    _print_limit(ours["budget"])


def bench_overload(n: int, latency_ms: float, capacity: int) -> None:
    print(
        f"\n7. a server that slows down past {capacity} in flight: {latency_ms:g} ms judge, "
        f"{n} examples, no limit known"
    )
    with simulator("--latency-ms", str(latency_ms), "--capacity", str(capacity)) as url:
        out = run(_judge_run(url, n))
        seen = sim_stats(url)
    share = seen["rate_limited"] / max(1, seen["requests"])
    late = sorted(v for t, v in out["limits"] if t >= out["wall"] / 2)
    median = late[len(late) // 2] if late else 0
    print(
        f"   in-flight limit over the second half: median {median}, range "
        f"{late[0] if late else 0}-{late[-1] if late else 0} (target: median <= {capacity}); "
        f"429 share {share:.4f} (target < 0.01); {out['rate']:.1f} examples/s, "
        f"{out['rate'] / (capacity / (latency_ms / 1000)):.3f} of the server's capacity"
    )
    _print_limit(out["budget"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes for CI (seconds)")
    parser.add_argument(
        "--only",
        default="cli,optimizer,mixed,two",
        help="comma-separated subset of cli,optimizer,mixed,two and the in-flight "
        "scenarios slow-judge,no-limit,overload (not run by default: about 30 s each)",
    )
    args = parser.parse_args()
    chosen = set(args.only.split(","))
    latency = 50.0 if args.smoke else 300.0
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"bench_e2e ({'smoke' if args.smoke else 'full'}): {os.cpu_count()} cores, "
        f"load average {load:.2f}, python {sys.version.split()[0]}"
    )
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if "cli" in chosen:
            bench_cli(tmp, 300 if args.smoke else 2000, latency)
        if "optimizer" in chosen:
            bench_optimizer(tmp, 50 if args.smoke else 200, 4, latency)
        if "mixed" in chosen:
            bench_mixed(tmp, 300 if args.smoke else 2000, latency)
        if "two" in chosen:
            bench_two_models(tmp, 300 if args.smoke else 2000, latency)
    if "slow-judge" in chosen:
        bench_slow_judge(100 if args.smoke else 1500, 2000.0, 3000.0)
    if "no-limit" in chosen:
        bench_no_limit(*((600, 200) if args.smoke else (6000, 3000)), 300.0, 256)
    if "overload" in chosen:
        bench_overload(500 if args.smoke else 5000, 300.0, 96)


if __name__ == "__main__":
    main()
