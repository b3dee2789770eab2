"""Model client benchmarks against the simulator (in its own process, so it has a core).

    python benchmarks/bench_llm.py [--smoke] [--only rate,latency,storm]

1. Rate limit kept full: judge calls against a simulator enforcing an RPM limit over a
   sliding window, the client told the same RPM: achieved rate / limit and 429 share;
   beside the official ``openai`` AsyncOpenAI client (default retries) under
   ``asyncio.gather``, and ``dspy.Evaluate`` threads over a ``dspy.LM`` (litellm, default
   retries; a scaled run of fewer calls at the same limit, see bench_llm_dspy.py).
2. Latency bound: calls with a fixed simulated latency, 64 in flight, no limit: achieved
   rate / (64 / latency) and client CPU per call, for the default transport under uvloop and
   plain asyncio and for the aiohttp transport, beside AsyncOpenAI under ``asyncio.gather``
   with a semaphore of 64.
3. Fault storm: 10% 503, 5% 429, 2% dropped connections: every call ends in a reply or an
   LLMError; retries and wall time.
4. A budget nobody configured: judge calls at full concurrency (64 in flight, 250 ms
   latency) against a simulator enforcing 1,800 RPM over a sliding window, the client told
   no limit: with rate-limit headers (the governor learns the limit from them) and without
   any (bare 429s: AIMD): achieved rate / limit, 429 share, the budget in force and its
   source.

Every figure is from one run, started from a collected heap; ratios are printed so that
runs on different machines compare.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llm_client import AiohttpTransport, LLMError, ModelClient, ModelConfig  # noqa: E402


def judge_messages(i: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You grade answers. Answer PASS or FAIL, then one sentence."},
        {
            "role": "user",
            "content": f"Question {i}: what is {i} + {i}?\nAnswer: {2 * i}\nExpected: {2 * i}",
        },
    ]


@contextmanager
def simulator(*args: str) -> Iterator[str]:
    """Run ``skynet-eval simulator`` in a subprocess; yield its base URL."""
    cmd = [sys.executable, "-m", "evaluator", "simulator", "--port", "0", *args]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "serving at" not in line:
            raise RuntimeError(
                f"simulator did not start: {line}{proc.stderr.read() if proc.stderr else ''}"
            )
        url = line.strip().rsplit(" ", 1)[-1]
        _sim_pids[url] = proc.pid
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sim_stats(base_url: str, window: float | None = None) -> dict[str, Any]:
    url = base_url.removesuffix("/v1") + "/sim/statistics" + (f"?window={window}" if window else "")
    with urllib.request.urlopen(url, timeout=30) as resp:
        data: dict[str, Any] = json.loads(resp.read())
    return data


async def run_ours(base_url: str, n: int, *, transport: str = "http", **cfg: Any) -> dict[str, Any]:
    """``n`` judge calls at once through one ModelClient (its governor paces them)."""
    config = ModelConfig(model="judge-1", base_url=base_url, api_key_env=None, **cfg)
    ok = errors = 0
    chosen = AiohttpTransport(limit=config.max_concurrency) if transport == "aiohttp" else None
    async with ModelClient(config, transport=chosen) as client:
        started = time.perf_counter()
        cpu = time.thread_time()

        async def one(i: int) -> None:
            nonlocal ok, errors
            try:
                await client.complete(judge_messages(i))
                ok += 1
            except LLMError:
                errors += 1

        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - started
        cpu = time.thread_time() - cpu
        stats = client.statistics()
    return {
        "ok": ok,
        "errors": errors,
        "wall": wall,
        "cpu_us": cpu / n * 1e6,
        "retries": stats.retries,
        "rate_limited": stats.rate_limited,
        "rpm": stats.rpm,
        "rpm_source": stats.rpm_source,
    }


async def run_openai(base_url: str, n: int, concurrency: int | None) -> dict[str, Any]:
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench")
    gate = asyncio.Semaphore(concurrency) if concurrency else None
    ok = errors = 0

    async def one(i: int) -> None:
        nonlocal ok, errors
        try:
            messages: Any = judge_messages(i)
            if gate is None:
                await client.chat.completions.create(model="judge-1", messages=messages)
            else:
                async with gate:
                    await client.chat.completions.create(model="judge-1", messages=messages)
            ok += 1
        except openai.OpenAIError:
            errors += 1

    started = time.perf_counter()
    cpu = time.thread_time()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - started
    cpu = time.thread_time() - cpu
    await client.close()
    return {"ok": ok, "errors": errors, "wall": wall, "cpu_us": cpu / n * 1e6}


def have_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def run(coro: Any, loop: str = "uvloop") -> Any:
    """Run under uvloop (as the engine's CLI does) when it is installed, else asyncio."""
    # A full collection (40-100 ms here) falls inside a short measured run or not depending
    # on what ran before it, which moved a smoke run's CPU per call by 2x between two
    # builds of the same hot path: start every run from a collected heap, so runs compare.
    gc.collect()
    if loop == "uvloop" and have_uvloop():
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def run_dspy(base_url: str, n: int, threads: int) -> dict[str, Any]:
    """``dspy.Evaluate`` in a subprocess (dspy must see its environment before import)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_llm_dspy.py"), base_url, str(n),
         str(threads)],
        capture_output=True, text=True, timeout=1800, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"the dspy contender failed:\n{out.stderr[-2000:]}")
    data: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return data


_sim_pids: dict[str, int] = {}


def sim_cpu(base_url: str) -> float:
    """CPU seconds (user + system) used so far by the simulator process at ``base_url``."""
    try:
        import psutil  # type: ignore[import-untyped]  # no stubs in the venv
    except ImportError:
        return float("nan")
    times = psutil.Process(_sim_pids[base_url]).cpu_times()
    return float(times.user + times.system)


def bench_rate(smoke: bool, dspy: bool) -> None:
    n, rpm, window = (100, 6000.0, 1.0) if smoke else (1000, 600.0, 10.0)
    limit = rpm / 60.0
    print(
        f"\n1. Rate limit kept full: {n} judge calls, simulator {rpm:g} RPM over any "
        f"{window:g} s window, client told {rpm:g} RPM"
    )
    sim_args = ("--rpm", str(rpm), "--window", str(window), "--latency-ms", "50")
    with simulator(*sim_args) as url:
        ours = run(run_ours(url, n, rpm=rpm))
        seen = sim_stats(url, window)
    achieved = n / ours["wall"]
    share = seen["rate_limited"] / max(1, seen["requests"])
    print(
        f"   skynet ModelClient : achieved/limit {achieved / limit:.3f} (target >= 0.97), "
        f"429 share {share:.4f} (target < 0.005), {ours['ok']} ok / {ours['errors']} failed, "
        f"wall {ours['wall']:.1f} s, peak accepted in a window {seen['peak_accepted']} "
        f"(limit {int(limit * window)})"
    )
    with simulator(*sim_args) as url:
        theirs = run(run_openai(url, n, None))
        seen = sim_stats(url, window)
    share = seen["rate_limited"] / max(1, seen["requests"])
    print(
        f"   openai gather      : achieved/limit {theirs['ok'] / theirs['wall'] / limit:.3f} "
        f"(successes only), 429 share {share:.3f}, {theirs['ok']} ok / {theirs['errors']} "
        f"failed (RateLimitError after default retries), wall {theirs['wall']:.1f} s"
    )
    if not dspy:
        print("   dspy.Evaluate      : skipped (--no-dspy, or --smoke without --dspy)")
        return
    # dspy at the full size takes as long as the others: a scaled run of fewer calls at the
    # same limit and window, with our client on the very same scaled setup beside it. A
    # sliding window lets a short run beat the limit (the first window's allowance is a
    # larger share of it), so the scaled lines also print the most any client could reach.
    n_dspy, threads = (60, 16) if smoke else (300, 16)
    allowance = int(limit * window)
    best = n_dspy / max(1e-9, (n_dspy - allowance) / limit) / limit if n_dspy > allowance else 0
    with simulator(*sim_args) as url:
        ours = run(run_ours(url, n_dspy, rpm=rpm))
        seen = sim_stats(url, window)
    share = seen["rate_limited"] / max(1, seen["requests"])
    print(
        f"   SCALED to {n_dspy} calls, same limit (a sliding window allows at most "
        f"{best:.2f}x the limit over so short a run):\n"
        f"   skynet ModelClient : achieved/limit {ours['ok'] / ours['wall'] / limit:.3f}, "
        f"429 share {share:.3f}, {ours['ok']} ok / {ours['errors']} failed, "
        f"wall {ours['wall']:.1f} s"
    )
    with simulator(*sim_args) as url:
        dsp = run_dspy(url, n_dspy, threads)
        seen = sim_stats(url, window)
    share = seen["rate_limited"] / max(1, seen["requests"])
    kinds = ", ".join(dsp["kinds"]) or "none"
    print(
        f"   dspy.Evaluate ({threads} threads): achieved/limit "
        f"{dsp['ok'] / dsp['wall'] / limit:.3f} (successes only), 429 share {share:.3f}, "
        f"{dsp['ok']} ok / {dsp['errors']} failed ({kinds}) after litellm's default "
        f"retries, wall {dsp['wall']:.1f} s"
    )


def bench_latency(smoke: bool) -> None:
    n, latency, inflight = (200 if smoke else 3000), 0.050, 64
    bound = inflight / latency
    print(
        f"\n2. Latency bound: {n} calls, {latency * 1000:.0f} ms simulated latency, "
        f"{inflight} in flight, no limit (bound {bound:.0f} calls/s); CPU per call is the "
        "client thread's, and the simulator process's beside it"
    )
    loops = ["uvloop", "asyncio"] if have_uvloop() else ["asyncio"]
    if smoke:
        loops = loops[:1]  # CI time: the plain-asyncio run only in the full benchmark
    contenders: list[tuple[str, str, str]] = [
        *((f"skynet ModelClient ({loop})", "http", loop) for loop in loops),
        ("skynet ModelClient, aiohttp transport (uvloop)", "aiohttp", loops[0]),
        ("openai gather (sem 64, uvloop)", "openai", loops[0]),
    ]
    rates: dict[str, float] = {}
    warm = 64 if smoke else 200  # imports, the connection pool
    with simulator("--latency-ms", str(latency * 1000)) as url:
        for name, transport, loop in contenders:
            if transport == "openai":
                run(run_openai(url, warm, inflight), loop)
                sim_before = sim_cpu(url)
                result = run(run_openai(url, n, inflight), loop)
            else:
                run(run_ours(url, warm, transport=transport, max_concurrency=inflight), loop)
                sim_before = sim_cpu(url)
                result = run(run_ours(url, n, transport=transport, max_concurrency=inflight), loop)
            sim_us = (sim_cpu(url) - sim_before) / n * 1e6
            rate = result["ok"] / result["wall"]
            rates[name] = rate
            target = " (target >= 0.9)" if name == contenders[0][0] else ""
            print(
                f"   {name:48s}: {rate:5.0f} calls/s, achieved/bound {rate / bound:.3f}"
                f"{target}, client CPU {result['cpu_us']:.0f} us/call, simulator "
                f"{sim_us:.0f} us/call"
            )
    ours_rate = rates[contenders[0][0]]
    theirs_rate = rates[contenders[-1][0]]
    print(f"   ratio skynet / openai: {ours_rate / theirs_rate:.2f}x (target >= 3x)")


def bench_storm(smoke: bool) -> None:
    n = 200 if smoke else 2000
    print(
        f"\n3. Fault storm: {n} calls, 10% 503, 5% 429, 2% dropped connections, "
        "20 ms latency, 64 in flight"
    )
    args = (
        "--latency-ms",
        "20",
        "--error-503-rate",
        "0.10",
        "--rate-limit-rate",
        "0.05",
        "--drop-rate",
        "0.02",
        "--seed",
        "7",
    )
    with simulator(*args) as url:
        ours = run(run_ours(url, n, max_concurrency=64))
        seen = sim_stats(url)
    ended = ours["ok"] + ours["errors"]
    print(
        f"   skynet ModelClient : {ours['ok']} replies + {ours['errors']} LLMErrors = "
        f"{ended}/{n} ended, "
        f"{ours['retries']} retries ({ours['rate_limited']} after 429), wall {ours['wall']:.1f} s; "
        f"simulator faults {seen['faults']}"
    )
    with simulator(*args) as url:
        theirs = run(run_openai(url, n, 64))
    print(
        f"   openai gather (sem 64): {theirs['ok']} replies + {theirs['errors']} errors, "
        f"wall {theirs['wall']:.1f} s"
    )
    assert ended == n, "a call neither replied nor raised LLMError"


def bench_budget(smoke: bool) -> None:
    n, rpm, window = (200, 6000.0, 1.0) if smoke else (3000, 1800.0, 10.0)
    limit = rpm / 60.0
    print(
        f"\n4. A budget nobody configured: {n} judge calls, 64 in flight, 250 ms latency, "
        f"simulator {rpm:g} RPM over any {window:g} s window, client told no limit"
    )
    for label, extra, targets in (
        ("with headers   ", (), "(target >= 0.9, 429 share <= 0.01)"),
        ("without headers", ("--no-rate-limit-headers",), "(target >= 0.8, 429 share <= 0.05)"),
    ):
        sim_args = ("--rpm", str(rpm), "--window", str(window), "--latency-ms", "250", *extra)
        with simulator(*sim_args) as url:
            ours = run(run_ours(url, n, max_concurrency=64))
            seen = sim_stats(url, window)
        share = seen["rate_limited"] / max(1, seen["requests"])
        achieved = ours["ok"] / ours["wall"]
        in_force = f"{ours['rpm']:.0f} RPM" if ours["rpm"] else "none"
        print(
            f"   {label}: achieved/limit {achieved / limit:.3f}, 429 share {share:.4f} "
            f"{targets}; {ours['ok']} ok / {ours['errors']} failed, wall {ours['wall']:.1f} s, "
            f"budget in force {in_force} ({ours['rpm_source']}), peak accepted in a window "
            f"{seen['peak_accepted']} (limit {int(limit * window)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes for CI (seconds)")
    parser.add_argument(
        "--only", default="rate,latency,storm,budget", help="comma-separated subset"
    )
    parser.add_argument("--dspy", action="store_true", help="run the dspy contender in --smoke")
    parser.add_argument("--no-dspy", action="store_true", help="skip the dspy contender")
    args = parser.parse_args()
    chosen = set(args.only.split(","))
    print(f"bench_llm ({'smoke' if args.smoke else 'full'}), {os.cpu_count()} cores")
    if "rate" in chosen:
        bench_rate(args.smoke, dspy=not args.no_dspy and (args.dspy or not args.smoke))
    if "latency" in chosen:
        bench_latency(args.smoke)
    if "storm" in chosen:
        bench_storm(args.smoke)
    if "budget" in chosen:
        bench_budget(args.smoke)


if __name__ == "__main__":
    main()
