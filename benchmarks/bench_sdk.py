"""A program that brings its own SDK, end to end through ``skynet-eval run``.

    python benchmarks/bench_sdk.py [--smoke] [--only throughput,overhead,rpm,budget]

The program is examples/openai/program.py (``openai.OpenAI()``, one chat completion per
example, base URL and key from the environment) with its metric and artifact, on rows
generated like its data. The simulator runs in its own process (``skynet-eval
simulator``), so it has a core of its own; the run is the CLI in another.

1. Throughput at realistic latency (250 ms): ``skynet-eval run`` with default settings,
   and with the program in 64 threads, against ``dspy.Evaluate(num_threads=16)`` on the
   same program and server; every call metered (model calls in the report == calls the
   simulator served).
2. Routing overhead: CPU per call in the process running the openai client, at 0 ms
   latency, 16 threads: the client alone (16 threads of our own) against the same calls
   routed through the engine (thread executor, 16 threads; the engine's own per-example
   work included).
3. A server enforcing 600 RPM, the run told ``--rpm 600`` (the configured model is the
   program's: same name and base URL): 429s and the achieved rate against the limit.
4. No limit configured, a server enforcing 1,800 RPM over a 10 s sliding window, with
   rate-limit headers and without any (bare 429s): 429 share and achieved rate.

Every run uses default settings but for what a section says it sets; ratios from one run
are printed so that machines compare.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_llm import sim_stats, simulator  # noqa: E402

EXAMPLE = ROOT / "examples" / "openai"


def rows(path: Path, n: int) -> Path:
    """``n`` grading rows like the example's data (a fixed seed: every run the same)."""
    rng = random.Random(5)
    with path.open("w") as fh:
        for i in range(n):
            a, b = rng.randint(2, 900), rng.randint(2, 900)
            wrong = rng.random() < 0.4
            answer = a + b + (rng.choice([-2, -1, 1, 3]) if wrong else 0)
            row = {
                "id": f"q{i}",
                "input": {"question": f"What is {a} + {b}?", "answer": str(answer),
                          "reference": str(a + b)},
                "expected": {"verdict": "FAIL" if wrong else "PASS"},
            }  # fmt: skip
            fh.write(json.dumps(row) + "\n")
    return path


def env_for(url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "sk-bench",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


def skynet_run(url: str, data: Path, *extra: str) -> dict[str, Any]:
    """``skynet-eval run --json`` on the example's program; its report."""
    cmd = [
        sys.executable, "-m", "evaluator", "run",
        "--program", str(EXAMPLE / "program.py"), "--metric", str(EXAMPLE / "metric.py"),
        "--artifact", str(EXAMPLE / "prompt.txt"), "--data", str(data), "--json", *extra,
    ]  # fmt: skip
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=3600, cwd=ROOT, env=env_for(url)
    )
    if out.returncode != 0:
        raise RuntimeError(f"skynet-eval run failed ({out.returncode}):\n{out.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(out.stdout)
    return report


DSPY_CONTENDER = """
import importlib.util, json, os, sys, tempfile, time
os.environ["DSPY_CACHEDIR"] = tempfile.mkdtemp(prefix="bench-sdk-dspy-")
import dspy
program_path, artifact_path, data_path, threads = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("program", program_path)
program = importlib.util.module_from_spec(spec); spec.loader.exec_module(program)
artifact = open(artifact_path).read()
rows = [json.loads(line) for line in open(data_path)]

class Grader(dspy.Module):
    def forward(self, question, answer, reference):
        return dspy.Prediction(verdict=program.run(
            artifact, {"question": question, "answer": answer, "reference": reference}))

devset = [dspy.Example(**r["input"], verdict=r["expected"]["verdict"])
          .with_inputs("question", "answer", "reference") for r in rows]
evaluate = dspy.Evaluate(devset=devset, metric=lambda e, p, t=None: float(p.verdict == e.verdict),
                         num_threads=int(threads), display_progress=False,
                         max_errors=len(rows) + 1, provide_traceback=False)
started = time.perf_counter()
result = evaluate(Grader())
print(json.dumps({"wall": time.perf_counter() - started, "score": result.score}))
"""


def dspy_run(url: str, data: Path, threads: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", DSPY_CONTENDER, str(EXAMPLE / "program.py"),
         str(EXAMPLE / "prompt.txt"), str(data), str(threads)],
        capture_output=True, text=True, timeout=3600, cwd=ROOT, env=env_for(url),
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"the dspy contender failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def bench_throughput(smoke: bool, folder: Path) -> None:
    n = 40 if smoke else 800
    data = rows(folder / "throughput.jsonl", n)
    print(
        f"\n1. Throughput: {n} examples, one openai chat completion each, simulator at "
        "250 ms latency (jitter 50 ms)"
    )
    sim_args = ("--latency-ms", "250", "--jitter-ms", "50")
    contenders: list[tuple[str, tuple[str, ...]]] = [
        ("skynet-eval run, defaults", ()),
        # --workers counts both stages' workers: the metric (CPU-bound, worker processes
        # by default) moves to threads too, where 64 is a count it may have.
        ("skynet-eval run, both stages in 64 threads", ("--program-execution", "thread",
                                                         "--execution", "thread",
                                                         "--workers", "64")),
    ]  # fmt: skip
    rates: dict[str, float] = {}
    for name, extra in contenders:
        with simulator(*sim_args) as url:
            report = skynet_run(url, data, *extra)
            seen = sim_stats(url)
        rate = report["throughput"]
        rates[name] = rate
        cost = report["program_cost_usd"]
        shown = f"${cost:.6f}" if cost is not None else "unmeasured"
        print(
            f"   {name:44s}: {rate:6.1f} examples/s; model calls metered "
            f"{report['program_llm_calls']} / served {seen['served']} "
            f"({'all' if report['program_llm_calls'] == seen['served'] else 'NOT all'}), "
            f"cost {shown}"
        )
    with simulator(*sim_args) as url:
        theirs = dspy_run(url, data, 16)
        seen = sim_stats(url)
    dspy_rate = n / theirs["wall"]
    print(
        f"   {'dspy.Evaluate(num_threads=16)':44s}: {dspy_rate:6.1f} examples/s "
        f"(simulator served {seen['served']}; dspy meters no cost of a program's own client)"
    )
    for name, rate in rates.items():
        print(f"   ratio {name} / dspy.Evaluate: {rate / dspy_rate:.2f}x (target >= 3x)")


OVERHEAD_DIRECT = """
import json, os, sys, threading, time
import openai
n, threads = int(sys.argv[1]), int(sys.argv[2])
client = openai.OpenAI()
messages = [{"role": "user", "content": "Question: 1\\nAnswer: 2\\nExpected: 2"}]
def work(k):
    for _ in range(k):
        client.chat.completions.create(model="gpt-4o-mini", messages=messages, max_tokens=40)
work(50)  # imports, the connection pool
cpu, wall = time.process_time(), time.perf_counter()
pool = [threading.Thread(target=work, args=(n // threads,)) for _ in range(threads)]
for t in pool: t.start()
for t in pool: t.join()
print(json.dumps({"cpu_us": (time.process_time() - cpu) / n * 1e6,
                  "rate": n / (time.perf_counter() - wall)}))
"""

OVERHEAD_ROUTED = """
import asyncio, json, sys, time
from evaluator import Evaluator
n, threads, program, metric, artifact, data = sys.argv[1:7]
rows = [json.loads(line) for line in open(data)]
art = open(artifact).read()
async def main():
    async with Evaluator(metric, program, program_execution="thread",
                         workers=int(threads), timeout=60) as ev:
        await ev.evaluate_many(art, rows[:50])  # imports, the model client, the threads
        cpu, wall = time.process_time(), time.perf_counter()
        await ev.evaluate_many(art, rows[:int(n)])
        print(json.dumps({"cpu_us": (time.process_time() - cpu) / int(n) * 1e6,
                          "rate": int(n) / (time.perf_counter() - wall)}))
asyncio.run(main())
"""


def bench_overhead(smoke: bool, folder: Path) -> None:
    n, threads = (100 if smoke else 3000), 16
    data = rows(folder / "overhead.jsonl", n)
    print(
        f"\n2. Routing overhead: {n} calls, 0 ms latency, {threads} threads; CPU per call of "
        "the process running the openai client"
    )
    with simulator() as url:
        direct = subprocess.run(
            [sys.executable, "-c", OVERHEAD_DIRECT, str(n), str(threads)],
            capture_output=True, text=True, timeout=1800, env=env_for(url), cwd=ROOT,
        )  # fmt: skip
        routed = subprocess.run(
            [sys.executable, "-c", OVERHEAD_ROUTED, str(n), str(threads),
             str(EXAMPLE / "program.py"), str(EXAMPLE / "metric.py"),
             str(EXAMPLE / "prompt.txt"), str(data)],
            capture_output=True, text=True, timeout=1800, env=env_for(url), cwd=ROOT,
        )  # fmt: skip
    for out in (direct, routed):
        if out.returncode != 0:
            raise RuntimeError(f"overhead contender failed:\n{out.stderr[-3000:]}")
    a = json.loads(direct.stdout.strip().splitlines()[-1])
    b = json.loads(routed.stdout.strip().splitlines()[-1])
    ratio = b["cpu_us"] / a["cpu_us"]
    print(f"   openai client alone       : {a['cpu_us']:6.0f} us CPU/call, {a['rate']:5.0f} /s")
    print(
        f"   routed through skynet-eval: {b['cpu_us']:6.0f} us CPU/call, {b['rate']:5.0f} "
        f"calls/s (the engine's per-example work included); ratio {ratio:.2f}"
    )


def bench_rpm(smoke: bool, folder: Path) -> None:
    n, rpm, window = (100, 3000.0, 2.0) if smoke else (660, 600.0, 10.0)
    limit = rpm / 60
    data = rows(folder / "rpm.jsonl", n)
    print(
        f"\n3. A server enforcing {rpm:g} RPM over any {window:g} s window, 250 ms latency: "
        f"{n} examples, the run told --rpm {rpm:g}"
    )
    with simulator("--rpm", str(rpm), "--window", str(window), "--latency-ms", "250") as url:
        report = skynet_run(
            url, data, "--model", "gpt-4o-mini", "--base-url", url, "--api-key-env", "none",
            "--rpm", str(rpm),
        )  # fmt: skip
        seen = sim_stats(url, window)
    share = seen["rate_limited"] / max(1, seen["requests"])
    print(
        f"   skynet-eval run: achieved/limit {report['throughput'] / limit:.3f} (target >= 0.95), "
        f"429s {seen['rate_limited']} (target 0, share {share:.4f}), "
        f"{report['ok']}/{report['n']} ok, "
        f"metered {report['program_llm_calls']} / served {seen['served']}, peak accepted in a "
        f"window {seen['peak_accepted']} (limit {int(limit * window)})"
    )


def bench_budget(smoke: bool, folder: Path) -> None:
    n, rpm, window = (400, 3000.0, 3.0) if smoke else (3000, 1800.0, 10.0)
    limit = rpm / 60
    data = rows(folder / "budget.jsonl", n)
    print(
        f"\n4. No limit configured, a server enforcing {rpm:g} RPM over any {window:g} s "
        f"window, 250 ms latency: {n} examples, default settings"
    )
    for label, extra, target in (
        ("with headers   ", (), "(target >= 0.9, 429 share <= 0.01)"),
        ("without headers", ("--no-rate-limit-headers",), "(target >= 0.8, 429 share <= 0.05)"),
    ):
        args = ("--rpm", str(rpm), "--window", str(window), "--latency-ms", "250", *extra)
        with simulator(*args) as url:
            report = skynet_run(url, data)
            seen = sim_stats(url, window)
        share = seen["rate_limited"] / max(1, seen["requests"])
        print(
            f"   {label}: achieved/limit {report['throughput'] / limit:.3f}, 429 share "
            f"{share:.4f} {target}; {report['ok']}/{report['n']} ok, metered "
            f"{report['program_llm_calls']} / served {seen['served']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes for CI")
    parser.add_argument("--only", default="throughput,overhead,rpm,budget")
    args = parser.parse_args()
    chosen = set(args.only.split(","))
    print(f"bench_sdk ({'smoke' if args.smoke else 'full'}), {os.cpu_count()} cores")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-sdk-") as tmp:
        folder = Path(tmp)
        if "throughput" in chosen:
            bench_throughput(args.smoke, folder)
        if "overhead" in chosen:
            bench_overhead(args.smoke, folder)
        if "rpm" in chosen:
            bench_rpm(args.smoke, folder)
        if "budget" in chosen:
            bench_budget(args.smoke, folder)
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
