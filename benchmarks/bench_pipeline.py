"""Pipeline benchmarks: cheap-metric throughput, memory when streaming, optimizer overhead.

    python benchmarks/bench_pipeline.py            # full sizes; ratios from one run
    python benchmarks/bench_pipeline.py --smoke    # CI: small sizes, a few seconds
    python benchmarks/bench_pipeline.py --only-engine   # 1 only: the engine's rates

1. Cheap metric (the docs' exact match), score-only: the engine's examples/s in the
   process and inline executors, against a bare loop calling the metric and against one
   asyncio task per example, gathered. Targets: >= 500,000/s inline and >= 400,000/s
   through worker processes (issue 27), >= 3x task-per-example.
2. Memory: peak RSS streaming N generated examples vs N/10, each in a fresh subprocess
   (``VmHWM``). Target ratio <= 1.2.
3. Optimizer-style: many ``evaluate_many`` calls of 3 examples on a warm Evaluator; the
   engine's overhead per call in µs (the metric's own time subtracted). Target <= 200 µs.
   Beside it, the machine's floor measured in the same run: a bare hop from the loop to
   a thread and back (inline) and a bare one-byte round trip to a child process
   (process), which no executor can beat and which a loaded 2-core box stretches.
4. The CLI beside the library on the same rows (100,000 and 300,000 of them; score-only
   exact match; inline and the default executor, worker processes for this metric):
   ``skynet-eval run --output`` in a fresh process, its examples/s as its report gives
   them (the run after its contract check), against ``evaluate_many`` on a fresh
   Evaluator that first ran the same 3 examples (paying the same start). Target: CLI at
   least 0.8 of the library. One sample swings with the machine's load, so each cell runs
   ``--pairs`` pairs (5; 1 with ``--smoke``), library and CLI back to back, the order
   alternating from pair to pair, and prints the median of the pairs' ratios with their
   min-max. Beside it, the command's whole wall time (interpreter, imports, the one read of
   the dataset, the results file) as examples/s end to end (the median).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluator._call._contract import validate_return  # noqa: E402
from evaluator._call._results import Result  # noqa: E402
from evaluator._data._dataset import Example  # noqa: E402
from evaluator._pipeline import Evaluator  # noqa: E402

EXACT = """
def score(input, output, expected=None):
    want = expected["label"]
    if output == want:
        return 1.0, {"feedback": "Correct."}
    return 0.0, {"feedback": f"Expected {want!r}, got {output!r}."}
"""

ASYNC_EXACT = """
async def score(input, output, expected=None):
    want = expected["label"]
    if output == want:
        return 1.0, {"feedback": "Correct."}
    return 0.0, {"feedback": f"Expected {want!r}, got {output!r}."}
"""


def _examples(n: int) -> list[Example]:
    return [
        Example(id=i, input={"q": i}, expected={"label": "a"}, output="a" if i % 4 else "b")
        for i in range(n)
    ]


def _write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


# -- 1. cheap metric throughput -----------------------------------------------------------


async def _engine_rate(metric: Path, execution: str, examples: list[Example]) -> float:
    async with Evaluator(metric, execution=execution) as ev:
        await ev.evaluate_many(None, examples[: min(len(examples), 20_000)])  # warm up
        started = time.perf_counter()
        results = await ev.evaluate_many(None, examples)
        elapsed = time.perf_counter() - started
    assert len(results) == len(examples)
    return len(examples) / elapsed


def _bare_rate(metric: Path, examples: list[Example]) -> float:
    namespace: dict[str, Any] = {}
    exec(compile(metric.read_text(), str(metric), "exec"), namespace)
    score = namespace["score"]
    started = time.perf_counter()
    for ex in examples:
        score(ex.input, ex.output, ex.expected)
    return len(examples) / (time.perf_counter() - started)


async def _task_per_example_rate(source: str, examples: list[Example]) -> float:
    """The common pattern: one asyncio task per example, validated, gathered."""
    namespace: dict[str, Any] = {}
    exec(compile(source, "exact.py", "exec"), namespace)
    score = namespace["score"]

    async def one(ex: Example) -> Result:
        scored = validate_return(score(ex.input, ex.output, ex.expected), ex.id)
        return Result(
            example_id=ex.id, score=scored.score, scores=scored.scores, feedback=scored.feedback
        )

    started = time.perf_counter()
    results = await asyncio.gather(*(one(ex) for ex in examples))
    elapsed = time.perf_counter() - started
    assert len(results) == len(examples)
    return len(examples) / elapsed


def bench_cheap(folder: Path, n: int) -> dict[str, float]:
    metric = _write(folder, "exact.py", EXACT)
    examples = _examples(n)
    out = {
        "bare_loop": _bare_rate(metric, examples),
        "task_per_example": asyncio.run(_task_per_example_rate(metric.read_text(), examples)),
        "engine_inline": asyncio.run(_engine_rate(metric, "inline", examples)),
        "engine_process": asyncio.run(_engine_rate(metric, "process", examples)),
    }
    return out


# -- 2. memory ------------------------------------------------------------------------------

_MEMORY_CHILD = """
import asyncio, resource, sys
sys.path.insert(0, {root!r})
from evaluator._data._dataset import Example
from evaluator._pipeline import Evaluator

def rows(n):
    for i in range(n):
        yield Example(id=i, input={{"q": i}}, expected={{"label": "a"}}, output="a")

async def main(n):
    count = 0
    async with Evaluator({metric!r}, execution={execution!r}) as ev:
        async for _ in ev.stream(None, rows(n)):
            count += 1
    assert count == n
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child started by a
    # big parent would report the parent's peak.
    try:
        with open("/proc/self/status") as fh:
            print(next(int(l.split()[1]) for l in fh if l.startswith("VmHWM:")))
    except OSError:
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)

asyncio.run(main(int(sys.argv[1])))
"""


def _peak_rss_kb(metric: Path, n: int, execution: str) -> int:
    code = _MEMORY_CHILD.format(root=str(ROOT), metric=str(metric), execution=execution)
    done = subprocess.run(
        [sys.executable, "-c", code, str(n)], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip().splitlines()[-1])


def bench_memory(folder: Path, n: int) -> dict[str, float]:
    metric = _write(folder, "exact.py", EXACT)
    small = _peak_rss_kb(metric, n // 10, "inline")
    large = _peak_rss_kb(metric, n, "inline")  # peak RSS in kB
    return {"rss_small_mb": small / 1024, "rss_large_mb": large / 1024, "ratio": large / small}


# -- 3. optimizer-style overhead --------------------------------------------------------------


async def _overhead(metric: Path, execution: str, calls: int) -> dict[str, float]:
    batches = [_examples(3) for _ in range(calls)]
    async with Evaluator(metric, execution=execution) as ev:
        for batch in batches[:50]:  # warm: workers started, chunk size learned
            await ev.evaluate_many(None, batch)
        started = time.perf_counter()
        for batch in batches:
            results = await ev.evaluate_many(None, batch)
        elapsed = time.perf_counter() - started
        metric_ms = sum(r.metric_ms or 0.0 for r in results) * calls
    per_call_us = elapsed / calls * 1e6
    return {"per_call_us": per_call_us, "overhead_us": per_call_us - metric_ms * 1e3 / calls}


async def _thread_hop_us(n: int) -> float:
    """The floor of any thread executor: the loop hands a thread a job and awaits it."""
    loop = asyncio.get_running_loop()
    jobs: queue.SimpleQueue[asyncio.Future[None] | None] = queue.SimpleQueue()

    def worker() -> None:
        while (future := jobs.get()) is not None:
            loop.call_soon_threadsafe(future.set_result, None)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    for i in range(n + 50):  # the first 50 warm up
        if i == 50:
            started = time.perf_counter()
        future = loop.create_future()
        jobs.put(future)
        await future
    elapsed = time.perf_counter() - started
    jobs.put(None)
    thread.join()
    return elapsed / n * 1e6


_ECHO = (
    "import socket, sys\n"
    "s = socket.socket(fileno=int(sys.argv[1]))\n"
    "while d := s.recv(64): s.send(d)\n"
)


async def _process_hop_us(n: int) -> float:
    """The floor of any process executor: one byte to a child process and back, awaited."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    child = subprocess.Popen(  # noqa: ASYNC220  # started before the timed part
        [sys.executable, "-c", _ECHO, str(theirs.fileno())], pass_fds=(theirs.fileno(),)
    )
    theirs.close()
    ours.setblocking(False)
    waiting: list[asyncio.Future[None]] = []

    def readable() -> None:
        ours.recv(64)
        waiting.pop().set_result(None)

    loop.add_reader(ours.fileno(), readable)
    try:
        for i in range(n + 50):  # the first 50 warm up
            if i == 50:
                started = time.perf_counter()
            waiting.append(loop.create_future())
            ours.send(b"x")
            await waiting[-1]
        elapsed = time.perf_counter() - started
    finally:
        loop.remove_reader(ours.fileno())
        ours.close()
        child.wait()
    return elapsed / n * 1e6


def bench_optimizer(folder: Path, calls: int) -> dict[str, dict[str, float]]:
    exact = _write(folder, "exact.py", EXACT)
    aexact = _write(folder, "aexact.py", ASYNC_EXACT)
    out = {
        "async": asyncio.run(_overhead(aexact, "async", calls)),
        "inline": asyncio.run(_overhead(exact, "inline", calls)),
        "process": asyncio.run(_overhead(exact, "process", calls)),
    }
    # The machine's floors, measured in the same run: what a hop to a thread or a round
    # trip to a process costs before the engine does anything.
    out["async"]["floor_us"] = 0.0
    out["inline"]["floor_us"] = asyncio.run(_thread_hop_us(calls))
    out["process"]["floor_us"] = asyncio.run(_process_hop_us(calls))
    return out


# -- 4. the CLI beside the library --------------------------------------------------------

CHECKED = 3  # the contract check's examples: the CLI's run starts after them


def _dataset_file(folder: Path, n: int) -> tuple[Path, list[Example]]:
    examples = _examples(n)
    path = folder / f"rows-{n}.jsonl"
    with path.open("w") as fh:
        for ex in examples:
            row = {"id": ex.id, "input": ex.input, "expected": ex.expected, "output": ex.output}
            fh.write(json.dumps(row) + "\n")
    return path, examples


async def _library_rate(metric: Path, execution: str | None, examples: list[Example]) -> float:
    async with Evaluator(metric, execution=execution) as ev:
        await ev.evaluate_many(None, examples[:CHECKED])  # what the CLI's check pays
        rest = examples[CHECKED:]
        started = time.perf_counter()
        results = await ev.evaluate_many(None, rest)
        elapsed = time.perf_counter() - started
    assert len(results) == len(rest)
    return len(rest) / elapsed


def _cli_rate(metric: Path, data: Path, execution: str | None, n: int) -> tuple[float, float]:
    """(the report's examples/s, examples/s over the command's whole wall time)."""
    out = data.with_suffix(".results.jsonl")
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "evaluator", "run", "--metric", str(metric)]
    argv += ["--data", str(data), "--output", str(out), "--json"]
    if execution is not None:
        argv += ["--execution", execution]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    wall = time.perf_counter() - started
    report = json.loads(done.stdout)
    assert report["n"] == n, report
    return float(report["throughput"]), n / wall


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def bench_cli(folder: Path, sizes: tuple[int, ...], pairs: int) -> dict[str, dict[str, float]]:
    """Each cell: ``pairs`` library/CLI pairs, the order alternating (library first in
    the even pairs, the CLI first in the odd ones), so that a drift in the machine's load
    weighs on both sides alike; the ratio is taken within each pair."""
    metric = _write(folder, "exact.py", EXACT)
    out: dict[str, dict[str, float]] = {}
    for n in sizes:
        data, examples = _dataset_file(folder, n)
        for execution in ("inline", None):
            library: list[float] = []
            cli: list[float] = []
            whole: list[float] = []
            for pair in range(pairs):
                for side in ("library", "cli") if pair % 2 == 0 else ("cli", "library"):
                    if side == "library":
                        library.append(asyncio.run(_library_rate(metric, execution, examples)))
                    else:
                        rate, end_to_end = _cli_rate(metric, data, execution, n)
                        cli.append(rate)
                        whole.append(end_to_end)
            ratios = [c / lib for c, lib in zip(cli, library, strict=True)]
            out[f"{n}/{execution or 'default'}"] = {
                "pairs": pairs,
                "library": _median(library),
                "cli": _median(cli),
                "ratio": _median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "cli_end_to_end": _median(whole),
            }
        data.unlink()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes for CI")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--only-cli", action="store_true", help="only 4: the CLI and the library")
    parser.add_argument("--only-engine", action="store_true", help="only 1: the engine's rates")
    parser.add_argument(
        "--pairs",
        type=int,
        default=None,
        help="4: library/CLI pairs per cell (default 5; 1 with --smoke)",
    )
    args = parser.parse_args(argv)
    n_cheap, n_memory, n_calls = (
        (10_000, 50_000, 200) if args.smoke else (200_000, 1_000_000, 2_000)
    )
    cli_sizes = (10_000,) if args.smoke else (100_000, 300_000)
    pairs = args.pairs if args.pairs is not None else (1 if args.smoke else 5)
    if pairs < 1:
        parser.error(f"--pairs must be 1 or more, got {pairs}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cheap: dict[str, float] = {}
        memory: dict[str, float] = {}
        optimizer: dict[str, dict[str, float]] = {}
        cli: dict[str, dict[str, float]] = {}
        if not args.only_cli:
            cheap = bench_cheap(folder, n_cheap)
        if not (args.only_cli or args.only_engine):
            memory = bench_memory(folder, n_memory)
            optimizer = bench_optimizer(folder, n_calls)
        if not args.only_engine:
            cli = bench_cli(folder, cli_sizes, pairs)
    out: dict[str, Any] = {"sizes": {"cheap": n_cheap, "memory": n_memory, "calls": n_calls}}
    out.update({"cheap": cheap, "memory": memory, "optimizer": optimizer, "cli": cli})
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if args.only_engine:
        _print_cheap(out)
        return 0
    if not args.only_cli:
        _print_engine(out)
    print(
        "4. the CLI beside the library, the same rows, score-only exact match (examples/s; "
        f"medians of {pairs} pair(s) a cell, the order alternating)"
    )
    for name, figures in cli.items():
        print(
            f"   {name:<15} library {figures['library']:>10,.0f}   CLI {figures['cli']:>10,.0f}"
            f"   CLI/library {figures['ratio']:.2f} [{figures['ratio_min']:.2f}-"
            f"{figures['ratio_max']:.2f}] (target >= 0.8);"
            f" the whole command {figures['cli_end_to_end']:>9,.0f}"
        )
    return 0


def _print_engine(out: dict[str, Any]) -> None:
    memory, optimizer = out["memory"], out["optimizer"]
    n_memory, n_calls = out["sizes"]["memory"], out["sizes"]["calls"]
    _print_cheap(out)
    print(f"2. memory streaming {n_memory:,} vs {n_memory // 10:,} examples (peak RSS)")
    print(
        f"   {memory['rss_large_mb']:.1f} MB vs {memory['rss_small_mb']:.1f} MB: "
        f"ratio {memory['ratio']:.2f} (target <= 1.2)"
    )
    print(f"3. optimizer-style: {n_calls:,} evaluate_many calls of 3 examples, warm")
    for name, figures in optimizer.items():
        print(
            f"   {name:<8} {figures['per_call_us']:8.1f} µs per call, "
            f"engine overhead {figures['overhead_us']:8.1f} µs (target <= 200); "
            f"of which the machine's bare hop {figures['floor_us']:6.1f} µs"
        )


def _print_cheap(out: dict[str, Any]) -> None:
    cheap, n_cheap = out["cheap"], out["sizes"]["cheap"]
    print(f"1. cheap metric, {n_cheap:,} examples score-only (examples/s)")
    for name, rate in cheap.items():
        print(f"   {name:<18} {rate:>12,.0f}")
    task = cheap["task_per_example"]
    bare = cheap["bare_loop"]
    print(f"   bare loop: {1e6 / bare:.2f} µs a call; task-per-example: {1e6 / task:.2f} µs")
    for name, target in (("engine_inline", 500_000), ("engine_process", 400_000)):
        print(
            f"   {name}: {1e6 / cheap[name]:.2f} µs an example; "
            f"{cheap[name] / task:.2f}x task-per-example (target >= 3x), "
            f"{cheap[name] / bare:.3f} of the bare loop, "
            f"{cheap[name] / target:.2f} of the {target:,}/s target"
        )


if __name__ == "__main__":
    sys.exit(main())
