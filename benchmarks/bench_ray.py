"""The Ray executor beside the process executor, on this machine's Ray instances.

Three runs, each figure a ratio from the same run (start-up reported apart):

1. **Local**: a metric of about 2 ms of pure-Python work on N examples (2,000), on a
   local Ray instance the engine starts itself (two CPUs here), against the local
   process executor: throughput through ``Evaluator.evaluate`` (the pipeline) and
   through one ``submit`` (the executors alone), both warm. Target: >= 0.85.
2. **Two nodes**: the same run on a simulated cluster of two nodes of one CPU each
   (``ray.cluster_utils.Cluster``), with the calls each node ran.
3. **Faults**: N examples with metric raises, hangs past the timeout and segfaults, on
   three nodes, one of them removed mid-run: N results, each fault labelled with its
   kind, and nothing of the run left on the cluster (no actor, no worker process).

Everything runs on 127.0.0.1.

    python benchmarks/bench_ray.py            # full: 2,000 examples
    python benchmarks/bench_ray.py --smoke    # CI: 200 examples
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Before Ray is imported: the driver and every node on loopback.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import psutil

from evaluator import Evaluator
from evaluator._calls import ScoreCall
from evaluator._executors._process._executor import ProcessExecutor
from evaluator._executors._ray._executor import RayExecutor
from evaluator._loader import load_function

METRIC = """
import ctypes, os, time

LOOPS = {loops}
with open({pids!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")

def _work(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total

def score(input, output, expected=None):
    fault = input.get("fault")
    if fault == "raise":
        raise ValueError("planted fault")
    if fault == "hang":
        time.sleep(1000)
    if fault == "segv":
        ctypes.string_at(0)
    _work(LOOPS)
    ok = output == expected["answer"]
    return (1.0 if ok else 0.0), {{"feedback": "right" if ok else "wrong"}}
"""

FAULTS = {"raise": "metric_error", "hang": "metric_timeout", "segv": "worker_crash"}
NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False}
STORE = 80 * 1024 * 1024


def calibrate(target_ms: float) -> int:
    """Loop count of the metric's ``_work`` that takes about ``target_ms`` here."""
    namespace: dict[str, Any] = {}
    exec(textwrap.dedent(METRIC.format(loops=0, pids=os.devnull)), namespace)
    work = namespace["_work"]
    n = 10_000
    while True:
        start = time.perf_counter()
        work(n)
        elapsed = (time.perf_counter() - start) * 1000
        if elapsed > 20:
            return int(n * target_ms / elapsed)
        n *= 2


def rows(n: int, faults: dict[int, str] | None = None) -> list[dict[str, Any]]:
    faults = faults or {}
    return [
        {
            "id": i,
            "input": {"q": i, **({"fault": faults[i]} if i in faults else {})},
            "expected": {"answer": "a"},
            "output": "a" if i % 2 else "b",
        }
        for i in range(n)
    ]


def calls(n: int) -> list[ScoreCall]:
    return [ScoreCall(i, i, {"q": i}, "a" if i % 2 else "b", {"answer": "a"}) for i in range(n)]


async def pipeline(metric: Path, data: list[Any], **options: Any) -> tuple[float, float, Any]:
    """(start-up s, examples/s) through ``Evaluator.evaluate``, warm; its statistics."""
    start = time.perf_counter()
    async with Evaluator(metric, timeout=60, **options) as ev:
        await ev.evaluate(None, data[:50])
        startup = time.perf_counter() - start
        start = time.perf_counter()
        report = await ev.evaluate(None, data)
        elapsed = time.perf_counter() - start
        assert report.ok == len(data), report.errors
        return startup, len(data) / elapsed, ev.statistics()


async def one_submit(executor: Any, n: int) -> tuple[float, float]:
    """(start-up s, calls/s) of one submit of ``n`` calls, warm."""
    start = time.perf_counter()
    async with executor as ex:
        await ex.submit(calls(50))
        startup = time.perf_counter() - start
        start = time.perf_counter()
        outcomes = await ex.submit(calls(n))
        elapsed = time.perf_counter() - start
        assert all(o.error is None for o in outcomes)
        return startup, n / elapsed


async def local_run(metric: Path, n: int) -> None:
    import ray

    data = rows(n)
    fn = load_function(metric, "score")
    p_start, p_rate, _ = await pipeline(metric, data, execution="process")
    r_start, r_rate, stats = await pipeline(metric, data, execution="ray")
    assert not ray.is_initialized(), "the engine's local instance was not shut down"
    _, pe_rate = await one_submit(ProcessExecutor(fn, "score", timeout=60), n)
    _, re_rate = await one_submit(RayExecutor(fn, "score", timeout=60), n)
    metric_stats = stats.metric
    print(f"1. local Ray instance ({metric_stats.parallelism} CPUs), {n:,} examples of ~2 ms")
    print(f"   pipeline: process {p_rate:,.0f} ex/s, ray {r_rate:,.0f} ex/s")
    print(f"   throughput ray / process (pipeline):    {r_rate / p_rate:.2f}  (target >= 0.85)")
    print(f"   one submit: process {pe_rate:,.0f} calls/s, ray {re_rate:,.0f} calls/s")
    print(f"   throughput ray / process (one submit):  {re_rate / pe_rate:.2f}")
    print(
        f"   start-up, apart: process {p_start:.2f} s, ray {r_start:.2f} s (instance, "
        f"actor, workers); batches {metric_stats.batches_sent:,} of "
        f"{metric_stats.mean_batch_size:.0f} calls on average"
    )


def pids(path: Path) -> set[int]:
    return {int(p) for p in path.read_text().split()} if path.exists() else set()


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def until(predicate: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark's run did not get there")
        await asyncio.sleep(0.01)


async def two_nodes(metric: Path, n: int) -> None:
    data = rows(n)
    fn = load_function(metric, "score")
    p_start, p_rate, _ = await pipeline(metric, data, execution="process", workers=2)
    r_start, r_rate, stats = await pipeline(metric, data, execution="ray")
    _, pe_rate = await one_submit(ProcessExecutor(fn, "score", timeout=60, workers=2), n)
    _, re_rate = await one_submit(RayExecutor(fn, "score", timeout=60), n)
    by_node = stats.metric.calls_by_node
    print(f"2. two nodes of one CPU each, {n:,} examples")
    print(f"   throughput ray (2 nodes) / process (2 workers), pipeline:   {r_rate / p_rate:.2f}")
    print(f"   throughput ray (2 nodes) / process (2 workers), one submit: {re_rate / pe_rate:.2f}")
    shares = ", ".join(f"{node}: {calls:,}" for node, calls in sorted(by_node.items()))
    print(f"   calls per node (warm-up included): {shares}")
    print(f"   start-up, apart: process {p_start:.2f} s, ray {r_start:.2f} s")


async def faults_run(cluster: Any, metric: Path, pid_file: Path, n: int) -> None:
    plan: dict[int, str] = {}
    for i in range(n):
        if i % 97 == 5:
            plan[i] = "raise"
        elif i % 211 == 7:
            plan[i] = "hang"
        elif i % 151 == 9:
            plan[i] = "segv"
    data = rows(n, plan)
    node = cluster.add_node(object_store_memory=STORE, **NODE)
    fn = load_function(metric, "score")
    call_list = [ScoreCall(r["id"], r["id"], r["input"], r["output"], r["expected"]) for r in data]
    start = time.perf_counter()
    async with RayExecutor(fn, "score", timeout=0.5) as ex:
        members = list(ex._roster.every)
        task = asyncio.ensure_future(ex.submit(call_list))
        await until(lambda: ex.statistics().calls >= n // 3)
        cluster.remove_node(node)
        outcomes = await task
        await until(lambda: ex.statistics().lost_nodes != [])
        stats = ex.statistics()
        members = list(ex._roster.every)
    elapsed = time.perf_counter() - start
    kinds = Counter(o.error.kind if o.error else "ok" for o in outcomes)
    wrong = [
        i
        for i, o in enumerate(outcomes)
        if (o.error.kind if o.error else "ok") != FAULTS.get(plan.get(i, ""), "ok")
    ]
    left = [p for p in pids(pid_file) | {m.pid for m in members if m.pid} if not gone(p)]
    deadline = time.monotonic() + 30
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        left = [p for p in left if not gone(p)]
    planted = Counter(FAULTS[f] for f in plan.values())
    print(f"3. faults on three nodes, one removed mid-run, {n:,} examples ({elapsed:.1f} s)")
    print(f"   results {len(outcomes):,} of {n:,}; by kind: {dict(sorted(kinds.items()))}")
    print(f"   planted faults: {dict(sorted(planted.items()))}; labelled otherwise: {len(wrong)}")
    print(
        f"   lost nodes {len(stats.lost_nodes)}, actors lost {stats.actors_lost}, calls "
        f"requeued {stats.calls_requeued:,}; processes left on the cluster: {len(left)}"
    )
    if len(outcomes) != n or wrong or left:
        raise SystemExit("the fault run lost, mislabelled or left something behind")


async def on_cluster(cluster: Any, metric: Path, pid_file: Path, n: int) -> None:
    await two_nodes(metric, n)
    await asyncio.to_thread(pid_file.write_text, "")  # the fault run's processes only
    await faults_run(cluster, metric, pid_file, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes for CI")
    args = parser.parse_args()
    n = 200 if args.smoke else 2000
    loops = calibrate(2.0)
    with tempfile.TemporaryDirectory() as tmp:
        pid_file = Path(tmp, "pids.txt")
        metric = Path(tmp, "metric.py")
        metric.write_text(textwrap.dedent(METRIC.format(loops=loops, pids=str(pid_file))))
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        asyncio.run(local_run(metric, n))

        import ray
        from ray.cluster_utils import Cluster

        cluster = Cluster(
            initialize_head=True, head_node_args={"object_store_memory": STORE, **NODE}
        )
        try:
            cluster.add_node(object_store_memory=STORE, **NODE)
            ray.init(address=cluster.address, logging_level="ERROR")
            asyncio.run(on_cluster(cluster, metric, pid_file, n))
        finally:
            ray.shutdown()
            cluster.shutdown()


if __name__ == "__main__":
    main()
