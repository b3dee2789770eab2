"""Model client benchmarks against the simulator (in its own process, so it has a core).

    /work/venv/bin/python benchmarks/bench_llm.py [--smoke] [--only rate,latency,storm]

1. Rate limit kept full: judge calls against a simulator enforcing an RPM limit over a
   sliding window, the client told the same RPM: achieved rate / limit and 429 share;
   beside the official ``openai`` AsyncOpenAI client (default retries) under
   ``asyncio.gather``.
2. Latency bound: calls with a fixed simulated latency, 64 in flight, no limit: achieved
   rate / (64 / latency), beside AsyncOpenAI under ``asyncio.gather`` with a semaphore of 64.
3. Fault storm: 10% 503, 5% 429, 2% dropped connections: every call ends in a reply or an
   LLMError; retries and wall time.

Every figure is from one run; ratios are printed so that runs on different machines compare.
"""

from __future__ import annotations

import argparse
import asyncio
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

from llm_client import LLMError, ModelClient, ModelConfig  # noqa: E402


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
        yield line.strip().rsplit(" ", 1)[-1]
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


async def run_ours(base_url: str, n: int, **cfg: Any) -> dict[str, Any]:
    config = ModelConfig(model="judge-1", base_url=base_url, api_key_env=None, **cfg)
    ok = errors = 0
    async with ModelClient(config) as client:
        started = time.perf_counter()

        async def one(i: int) -> None:
            nonlocal ok, errors
            try:
                await client.complete(judge_messages(i))
                ok += 1
            except LLMError:
                errors += 1

        await asyncio.gather(*(one(i) for i in range(n)))
        wall = time.perf_counter() - started
        stats = client.statistics()
    return {
        "ok": ok,
        "errors": errors,
        "wall": wall,
        "retries": stats.retries,
        "rate_limited": stats.rate_limited,
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
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - started
    await client.close()
    return {"ok": ok, "errors": errors, "wall": wall}


def run(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


def bench_rate(smoke: bool) -> None:
    n, rpm, window = (200, 6000.0, 1.0) if smoke else (1000, 600.0, 10.0)
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


def bench_latency(smoke: bool) -> None:
    n, latency, inflight = (300 if smoke else 3000), 0.050, 64
    bound = inflight / latency
    print(
        f"\n2. Latency bound: {n} calls, {latency * 1000:.0f} ms simulated latency, "
        f"{inflight} in flight, no limit (bound {bound:.0f} calls/s)"
    )
    with simulator("--latency-ms", str(latency * 1000)) as url:
        run(run_ours(url, min(n, 200), max_concurrency=inflight))  # warm-up: imports, pool
        ours = run(run_ours(url, n, max_concurrency=inflight))
        theirs = run(run_openai(url, n, inflight))
    ours_rate = n / ours["wall"]
    theirs_rate = theirs["ok"] / theirs["wall"]
    print(
        f"   skynet ModelClient : {ours_rate:.0f} calls/s, "
        f"achieved/bound {ours_rate / bound:.3f} (target >= 0.9)"
    )
    print(
        f"   openai gather (sem 64): {theirs_rate:.0f} calls/s, "
        f"achieved/bound {theirs_rate / bound:.3f}"
    )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes for CI (seconds)")
    parser.add_argument("--only", default="rate,latency,storm", help="comma-separated subset")
    args = parser.parse_args()
    chosen = set(args.only.split(","))
    print(f"bench_llm ({'smoke' if args.smoke else 'full'}), {os.cpu_count()} cores")
    if "rate" in chosen:
        bench_rate(args.smoke)
    if "latency" in chosen:
        bench_latency(args.smoke)
    if "storm" in chosen:
        bench_storm(args.smoke)


if __name__ == "__main__":
    main()
