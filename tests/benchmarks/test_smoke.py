"""Each benchmark runs end to end in its quick mode and prints its ratios (not timed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Each benchmark runs in a subprocess for seconds: left out of the developer loop.
pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize(
    "name",
    [
        "bench_cache.py",
        "bench_cpu.py",
        "bench_dspy_judge.py",
        "bench_e2e.py",
        # The in-flight scenarios (not in its default run); the dspy one is too slow here.
        "bench_e2e.py --only slow-judge,overload",
        # Race, budget and dedup (and hedging, when it lands): one file, every section.
        "bench_economics.py",
        "bench_fair.py",
        "bench_faults.py",
        "bench_llm.py",
        "bench_pipeline.py",
        "bench_tracing.py",
        # Its CLI runs and the dspy contender start whole interpreters: two sections only.
        "bench_sdk.py --only overhead,rpm",
    ],
)
def test_benchmark_smoke(name: str) -> None:
    """`python benchmarks/NAME --smoke` exits 0 and prints at least one ratio."""
    script, *extra = name.split()
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--smoke", *extra],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert any(ch.isdigit() for ch in done.stdout)
